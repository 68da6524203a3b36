"""Request limits of `litevllm serve` (flags), vLLM's logit_bias / chat-template / chat echo behaviour: exact status, `param`
and message for each, and the same greedy text afterwards."""
import json, threading, time
import httpx, pytest
from test_server import start_server, stop_server

FLAGS = ["--max-n", "4", "--max-num-seqs", "6", "--max-tokens-limit", "64", "--max-stop-strings", "4", "--max-stop-string-length", "20",
         "--max-logit-bias", "10", "--max-logprobs", "5", "--max-request-body-bytes", "100000"]
GREEDY = dict(prompt="The capital of France is", max_tokens=8, temperature=0)


@pytest.fixture(scope="module")
def base():
    proc, base = start_server(*FLAGS)
    yield base
    assert stop_server(proc) == 0


def post(base, path, body=None, **kw):
    return httpx.post(f"{base}{path}", json=body, timeout=120, **kw) if body is not None else httpx.post(f"{base}{path}", timeout=120, **kw)


def greedy_text(base) -> str:
    r = post(base, "/v1/completions", GREEDY)
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["text"]


def chat(**kw): return dict(messages=[{"role": "user", "content": "Hi"}], max_tokens=4, temperature=0) | kw


CASES = {  # name: (path, body, param, words the message must hold)
    "n": ("/v1/completions", GREEDY | dict(n=5, temperature=1.0), "n", ["--max-n 4"]),
    "n, half the batch": ("/v1/completions", GREEDY | dict(n=4, temperature=1.0), "n", ["half of --max-num-seqs 6", "more than 3"]),
    "n × prompts": ("/v1/completions", GREEDY | dict(prompt=["a", "b"], n=2, temperature=1.0), "n", ["2 prompts", "4 sequences"]),
    "max_tokens": ("/v1/completions", GREEDY | dict(max_tokens=65), "max_tokens", ["--max-tokens-limit 64"]),
    "max_completion_tokens": ("/v1/chat/completions", chat(max_completion_tokens=65), "max_completion_tokens", ["--max-tokens-limit 64"]),
    "stop count": ("/v1/completions", GREEDY | dict(stop=["a", "b", "c", "d", "e"]), "stop", ["5 stop strings", "--max-stop-strings 4"]),
    "stop length": ("/v1/completions", GREEDY | dict(stop=["x" * 21]), "stop", ["21 characters", "--max-stop-string-length 20"]),
    "logprobs": ("/v1/completions", GREEDY | dict(logprobs=6), "logprobs", ["Requested sample logprobs of 6, which is greater than max allowed: 5"]),
    "top_logprobs": ("/v1/chat/completions", chat(logprobs=True, top_logprobs=6), "logprobs", ["greater than max allowed: 5"]),  # vLLM names the engine's field
    "bad_words count": ("/v1/completions", GREEDY | dict(bad_words=["w"] * 129), "bad_words", ["129 entries", "--max-bad-words 128"]),
    "logit_bias entries": ("/v1/completions", GREEDY | dict(logit_bias={str(i): 1.0 for i in range(11)}), "logit_bias", ["11 entries", "--max-logit-bias 10"]),
    "prompt tokens": ("/v1/completions", GREEDY | dict(prompt="hello " * 600), "input_tokens", ["maximum context length is 512", "601 input tokens"]),
    "request chat template": ("/v1/chat/completions", chat(chat_template="{{ 'x' }}"), "chat_template", ["--trust-request-chat-template"]),
    "chat template in kwargs": ("/v1/chat/completions", chat(chat_template_kwargs={"chat_template": "{{ 'x' }}"}), "chat_template", ["untrusted"]),
}


def test_each_limit_refused_then_same_text(base):
    ref = greedy_text(base)
    for name, (path, body, param, words) in CASES.items():
        r = post(base, path, body)
        assert r.status_code == 400, (name, r.status_code, r.text)
        err = r.json()["error"]
        assert (err["param"], err["type"], err["code"]) == (param, "BadRequestError", 400), (name, err)
        assert all(w in err["message"] for w in words), (name, err["message"])
    assert greedy_text(base) == ref


def test_non_finite_logit_bias_refused(base):
    for v in ("NaN", "Infinity", "-Infinity"):
        body = json.dumps(GREEDY)[:-1] + f', "logit_bias": {{"5": {v}}}}}'
        r = post(base, "/v1/completions", content=body, headers={"content-type": "application/json"})
        assert r.status_code == 400 and r.json()["error"]["param"] == "logit_bias", r.text
        assert "finite" in r.json()["error"]["message"]


def test_body_size_refused_before_parsing(base):
    ref = greedy_text(base)
    big = b'{"prompt": "' + b"a" * 200_000 + b'"}'
    r = post(base, "/v1/completions", content=big, headers={"content-type": "application/json"})
    assert r.status_code == 413 and "--max-request-body-bytes 100000" in r.json()["error"]["message"], r.text
    def chunks():  # no Content-Length: chunked transfer, counted as it arrives
        for _ in range(30): yield b" " * 10_000
    r = post(base, "/v1/completions", content=chunks(), headers={"content-type": "application/json"})
    assert r.status_code == 413 and r.json()["error"]["code"] == 413, r.text
    r = post(base, "/v1/completions", content=(json.dumps(GREEDY).encode() for _ in range(1)), headers={"content-type": "application/json"})
    assert r.status_code == 200, r.text   # a small chunked body still works
    assert greedy_text(base) == ref


def test_logit_bias_clamped(base):
    tok = lambda s: post(base, "/tokenize", dict(prompt=s, add_special_tokens=False)).json()["tokens"][0]
    london, paris = tok(" London"), tok(" Paris")
    # clamped, 1000 and 100 are both 100: the model's own preference (" Paris") decides; unclamped, " London" would win
    r = post(base, "/v1/completions", GREEDY | dict(max_tokens=1, logit_bias={str(london): 1000, str(paris): 100}))
    assert r.json()["choices"][0]["text"] == " Paris"
    r = post(base, "/v1/completions", GREEDY | dict(max_tokens=1, logit_bias={str(london): 100}))
    assert r.json()["choices"][0]["text"] == " London"   # and a bias at the bound still acts


def test_chat_echo_with_continue_final_message(base):
    conv = [{"role": "user", "content": "What is the capital of France?"}, {"role": "assistant", "content": "The capital of France is"}]
    body = dict(messages=conv, continue_final_message=True, add_generation_prompt=False, max_tokens=4, temperature=0)
    plain = post(base, "/v1/chat/completions", body).json()["choices"][0]["message"]["content"]
    echoed = post(base, "/v1/chat/completions", body | dict(echo=True)).json()["choices"][0]["message"]["content"]
    assert echoed == "The capital of France is" + plain
    with httpx.stream("POST", f"{base}/v1/chat/completions", json=body | dict(echo=True, stream=True), timeout=60) as r:
        deltas = [json.loads(l[5:]) for l in r.iter_lines() if l.startswith("data:") and l[5:].strip() != "[DONE]"]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in deltas if c["choices"])
    assert text == echoed
    assert deltas[1]["choices"][0]["delta"]["content"] == "The capital of France is"   # right after the role chunk
    no_echo = dict(messages=conv[:1], max_tokens=4, temperature=0, echo=True)   # last message not the assistant's: nothing added
    assert post(base, "/v1/chat/completions", no_echo).json()["choices"][0]["message"]["content"] == \
        post(base, "/v1/chat/completions", no_echo | dict(echo=False)).json()["choices"][0]["message"]["content"]


def test_fair_share_n_children_leave_room(base):
    "An n=3 request (half of --max-num-seqs 6) runs; a request sent after it finishes long before it does."
    ref = greedy_text(base)
    done = {}
    def big():
        r = post(base, "/v1/completions", dict(prompt="Once upon a time", n=3, max_tokens=64, ignore_eos=True, temperature=1.0, seed=1))
        done["big"] = (time.monotonic(), r.status_code)
    t = threading.Thread(target=big); t.start()
    time.sleep(0.5)
    text = greedy_text(base)
    done["small"] = time.monotonic()
    t.join(120)
    assert done["big"][1] == 200 and text == ref
    assert done["small"] < done["big"][0]
