"The real server, end to end: `python -m litevllm.cli serve` in a subprocess, driven with the official openai client and httpx."
import asyncio, json, os, signal, socket, subprocess, sys, time
import httpx, openai, pytest
from litevllm.metrics import parse_metrics, metric_value

MODEL = "SmolLM2-135M-Instruct"
KEY = "test-key"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(*args, timeout=300):
    "Start `litevllm serve` on a free loopback port and wait for /health; (process, base url)."
    port = free_port()
    cmd = [sys.executable, "-m", "litevllm.cli", "serve", "--host", "127.0.0.1", "--port", str(port), "--max-model-len", "512",
           "--dtype", "float32", "--disable-uvicorn-access-log", *args]
    # float32: several tests compare texts made in different batches (stream vs not, one client vs many). In bfloat16
    # (what "auto" picks on this CPU, as in vLLM) the batch's shapes change the rounding enough to flip a near-tie.
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    base, deadline = f"http://127.0.0.1:{port}", time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None: raise RuntimeError(f"server exited with {proc.returncode}: {proc.stderr.read()[-3000:]}")
        try:
            if httpx.get(f"{base}/health", timeout=1).status_code == 200: return proc, base
        except httpx.HTTPError: pass
        time.sleep(0.2)
    proc.kill()
    raise TimeoutError("server did not become healthy")


def stop_server(proc, timeout=60) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try: proc.wait(timeout)
        except subprocess.TimeoutExpired: proc.kill(); proc.wait()
    return proc.returncode


@pytest.fixture(scope="module")
def server_proc():
    """The module's server: (process, base url). One server for the whole module (a start is ~5 s): the last test,
    test_sigterm_exits_0_after_in_flight_request, ends it with a SIGTERM (--shutdown-timeout 30 is for that test)."""
    proc, base = start_server("--api-key", KEY, "--shutdown-timeout", "30")
    yield proc, base
    stop_server(proc)  # a no-op once the last test has stopped it


@pytest.fixture(scope="module")
def server(server_proc): return server_proc[1]


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=f"{server}/v1", api_key=KEY, max_retries=0, timeout=120)


def metrics(base) -> dict:
    return parse_metrics(httpx.get(f"{base}/metrics", timeout=10).text)


def wait_idle(base, timeout=30) -> dict:
    "Wait until no request is live and every KV block is free; the last metrics read."
    deadline = time.monotonic() + timeout
    while True:
        m = metrics(base)
        idle = (metric_value(m, "vllm:num_requests_running") == 0 and metric_value(m, "vllm:num_requests_waiting") == 0
                and metric_value(m, "litevllm:num_unfinished_requests") == 0
                and metric_value(m, "litevllm:num_free_blocks") == metric_value(m, "litevllm:num_total_blocks"))
        if idle or time.monotonic() > deadline: return m
        time.sleep(0.1)


def assert_idle(base):
    m = wait_idle(base)
    assert metric_value(m, "vllm:num_requests_running") == 0
    assert metric_value(m, "vllm:num_requests_waiting") == 0
    assert metric_value(m, "litevllm:num_unfinished_requests") == 0
    assert metric_value(m, "litevllm:num_free_blocks") == metric_value(m, "litevllm:num_total_blocks") > 0


# --- the basics ---------------------------------------------------------------------------------------------------------

def test_models(client):
    ids = [m.id for m in client.models.list().data]
    assert ids == [MODEL]


def test_completion_greedy_and_usage(client, server):
    r = client.completions.create(model=MODEL, prompt="The capital of France is", max_tokens=6, temperature=0)
    assert r.object == "text_completion" and r.id.startswith("cmpl-")
    c = r.choices[0]
    assert c.text.startswith(" Paris") and c.index == 0 and c.finish_reason == "length"
    n_prompt = httpx.post(f"{server}/tokenize", json={"prompt": "The capital of France is"}).json()["count"]
    assert (r.usage.prompt_tokens, r.usage.completion_tokens, r.usage.total_tokens) == (n_prompt, 6, n_prompt + 6)


def test_model_aliases(client):
    for name in (MODEL, f"HuggingFaceTB/{MODEL}"):
        r = client.completions.create(model=name, prompt="Hi", max_tokens=2)
        assert len(r.choices) == 1


def test_chat_greedy(client):
    r = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "What is the capital of France?"}],
                                       max_tokens=20, temperature=0)
    assert r.object == "chat.completion" and r.id.startswith("chatcmpl-")
    m = r.choices[0].message
    assert m.role == "assistant" and "Paris" in m.content
    assert r.usage.completion_tokens <= 20 and r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_chat_content_parts_and_max_completion_tokens(client):
    r = client.chat.completions.create(model=MODEL, max_completion_tokens=3, temperature=0,
                                       messages=[{"role": "user", "content": [{"type": "text", "text": "Say hello."}]}])
    assert r.usage.completion_tokens <= 3


@pytest.mark.parametrize("kind", ["completions", "chat"])
def test_stream_equals_non_stream(client, kind):
    "The streamed text of a seeded request is the non-streamed text, and the usage chunk counts the same."
    kw = dict(model=MODEL, max_tokens=16, temperature=0.9, seed=1234)
    if kind == "completions":
        full = client.completions.create(prompt="Once upon a time", **kw)
        chunks = list(client.completions.create(prompt="Once upon a time", stream=True, stream_options={"include_usage": True}, **kw))
        text = "".join(c.choices[0].text for c in chunks if c.choices)
        ref = full.choices[0].text
    else:
        msgs = [{"role": "user", "content": "Tell me a story."}]
        full = client.chat.completions.create(messages=msgs, **kw)
        chunks = list(client.chat.completions.create(messages=msgs, stream=True, stream_options={"include_usage": True}, **kw))
        assert chunks[0].choices[0].delta.role == "assistant"
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        ref = full.choices[0].message.content
    assert text == ref and text
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == [full.choices[0].finish_reason]
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.model_dump() == full.usage.model_dump()
    assert all(c.usage is None for c in chunks[:-1])


def test_sse_wire_format(server):
    "SSE lines `data: {json}`, ending with `data: [DONE]`."
    with httpx.stream("POST", f"{server}/v1/completions", headers={"Authorization": f"Bearer {KEY}"},
                      json=dict(model=MODEL, prompt="Hello", max_tokens=4, stream=True)) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        lines = [l for l in r.iter_lines() if l]
    assert lines[-1] == "data: [DONE]"
    assert all(l.startswith("data: ") for l in lines)
    assert all(json.loads(l[6:])["object"] == "text_completion" for l in lines[:-1])


def test_n2(client):
    r = client.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=8, n=2, temperature=1.0, seed=7)
    assert sorted(c.index for c in r.choices) == [0, 1]
    assert 2 <= r.usage.completion_tokens <= 16 and r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    chat = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Hi"}], max_tokens=8, n=2, seed=7)
    assert sorted(c.index for c in chat.choices) == [0, 1]
    streamed = {0: "", 1: ""}
    for c in client.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=8, n=2, temperature=1.0, seed=7, stream=True):
        for ch in c.choices: streamed[ch.index] += ch.text
    assert streamed == {c.index: c.text for c in r.choices}


def test_batch_prompts(client):
    r = client.completions.create(model=MODEL, prompt=["The capital of France is", "Once upon a time"], max_tokens=4, temperature=0)
    assert [c.index for c in sorted(r.choices, key=lambda c: c.index)] == [0, 1]
    alone = client.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=4, temperature=0)
    assert sorted(r.choices, key=lambda c: c.index)[1].text == alone.choices[0].text


def test_stop_strings(client):
    kw = dict(model=MODEL, prompt="The capital of France is", max_tokens=16, temperature=0)
    r = client.completions.create(stop=["."], **kw)
    assert r.choices[0].text == " Paris" and r.choices[0].finish_reason == "stop"
    r = client.completions.create(stop=["."], extra_body=dict(include_stop_str_in_output=True), **kw)
    assert r.choices[0].text == " Paris." and r.choices[0].finish_reason == "stop"
    streamed = "".join(c.choices[0].text for c in client.completions.create(stop=["."], stream=True, **kw) if c.choices)
    assert streamed == " Paris"


# vLLM 0.32's offline LLM on the default model (float32, greedy, max_tokens 60), 2026-11-28: the output token ids and
# finish reason of each prompt with each RepetitionDetectionParams.
REPETITION_VLLM = [
    ("Repeat after me: la la la la la la la la", dict(max_pattern_size=4, min_count=3), [2618, 2618, 2618], "repetition"),
    ("Repeat after me: la la la la la la la la", dict(max_pattern_size=6, min_pattern_size=2, min_count=2), [2618] * 4, "repetition"),
    ("1, 2, 1, 2, 1, 2, 1, 2,", dict(max_pattern_size=4, min_count=3), [216, 33, 28, 216, 34, 28] * 10, "length"),  # a 6-token pattern
    ("1, 2, 1, 2, 1, 2, 1, 2,", dict(max_pattern_size=6, min_pattern_size=2, min_count=2), [216, 33, 28, 216, 34, 28] * 2, "repetition"),
    ("Write the word 'hello' twenty times:", dict(max_pattern_size=4, min_count=3), [198, 198, 3725, 198, 28120, 198, 28120, 198, 28120], "repetition"),
    ("Write the word 'hello' twenty times:", dict(max_pattern_size=6, min_pattern_size=2, min_count=2), [198, 198, 3725, 198, 28120, 198, 28120], "repetition"),
]


def test_repetition_detection(client, server):
    "vLLM's `repetition_detection`: the same tokens and finish reason as vLLM's; streamed, in chat, counted; a bad one is a 400."
    def repeated(): return sum(v for k, v in metrics(server).items() if k.startswith("vllm:request_success_total") and 'finished_reason="repetition"' in k)
    before = repeated()
    for prompt, params, ids, reason in REPETITION_VLLM:
        c = client.completions.create(model=MODEL, prompt=prompt, max_tokens=60, temperature=0,
                                      extra_body=dict(repetition_detection=params, return_token_ids=True)).choices[0]
        assert (c.token_ids, c.finish_reason) == (ids, reason), (prompt, params)
    deadline = time.monotonic() + 10
    while repeated() - before < 5 and time.monotonic() < deadline: time.sleep(0.05)
    assert repeated() - before == 5
    kw = dict(model=MODEL, max_tokens=60, temperature=0, extra_body=dict(repetition_detection=dict(max_pattern_size=4, min_count=3)))
    chunks = [ch for ch in client.completions.create(prompt=REPETITION_VLLM[0][0], stream=True, **kw) if ch.choices]
    assert "".join(ch.choices[0].text for ch in chunks) == " la la la" and chunks[-1].choices[0].finish_reason == "repetition"
    kw["extra_body"] = dict(repetition_detection=dict(max_pattern_size=8, min_count=2))
    chat = client.chat.completions.create(messages=[{"role": "user", "content": "Say 'ha' fifty times, separated by spaces."}], **kw).choices[0]
    # vLLM 0.32's LLM.chat, same model and settings: 59 tokens, the sentence "I'm here to help with anything" twice at the end
    assert chat.finish_reason == "repetition" and chat.message.content.endswith("I'm here to help with anything. I'm here to help with anything")
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=MODEL, prompt="Hi", max_tokens=5, extra_body=dict(repetition_detection=dict(max_pattern_size=2, min_count=1)))
    assert "min_count must be >= 2" in str(e.value)


def test_seed_reproducibility(client):
    kw = dict(model=MODEL, prompt="Once upon a time", max_tokens=16, temperature=1.0)
    a = client.completions.create(seed=42, **kw).choices[0].text
    b = client.completions.create(seed=42, **kw).choices[0].text
    c = client.completions.create(seed=43, **kw).choices[0].text
    assert a == b and a != c


def test_vllm_extra_fields(client):
    r = client.completions.create(model=MODEL, prompt="Hello", max_tokens=5, temperature=0.8, top_p=0.9, seed=1,
                                  extra_body=dict(top_k=20, min_p=0.05, repetition_penalty=1.1, ignore_eos=True, min_tokens=5,
                                                  skip_special_tokens=True, stop_token_ids=[2]))
    assert r.usage.completion_tokens == 5


def test_completion_logprobs(client):
    r = client.completions.create(model=MODEL, prompt="The capital of France is", max_tokens=4, temperature=0, logprobs=2)
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == 4
    assert "".join(lp.tokens) == r.choices[0].text
    assert lp.text_offset == [sum(len(t) for t in lp.tokens[:i]) for i in range(4)]
    for tok, l, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
        assert l <= 0 and len(top) == 2 and top[tok] == l == max(top.values())  # greedy: the top token


def test_chat_logprobs(client):
    r = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Hi"}], max_tokens=4, temperature=0,
                                       logprobs=True, top_logprobs=3)
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens
    assert "".join(t.token for t in content) == r.choices[0].message.content
    for t in content:
        assert t.bytes == list(t.token.encode()) and len(t.top_logprobs) == 3
        assert t.top_logprobs[0].token == t.token and t.top_logprobs[0].logprob == t.logprob
        assert [x.logprob for x in t.top_logprobs] == sorted((x.logprob for x in t.top_logprobs), reverse=True)
    r = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Hi"}], max_tokens=2, logprobs=True)
    assert all(t.top_logprobs == [] for t in r.choices[0].logprobs.content)


def test_tokenize_detokenize(server):
    t = httpx.post(f"{server}/tokenize", json={"model": MODEL, "prompt": "Hello world"}).json()
    assert t["count"] == len(t["tokens"]) and t["max_model_len"] == 512
    assert httpx.post(f"{server}/detokenize", json={"model": MODEL, "tokens": t["tokens"]}).json()["prompt"] == "Hello world"
    chat = httpx.post(f"{server}/tokenize", json={"messages": [{"role": "user", "content": "Hi"}]}).json()
    assert chat["count"] > 3


# --- errors -------------------------------------------------------------------------------------------------------------

OK = dict(model=MODEL, prompt="Hello", max_tokens=4)
CHAT_OK = dict(model=MODEL, messages=[{"role": "user", "content": "Hi"}], max_tokens=4)
BAD = [  # (name, path, body (None: malformed JSON), headers, status, a word the message must contain)
    ("malformed-json", "/v1/completions", None, None, 400, "JSON"),
    ("wrong-type-max_tokens", "/v1/completions", OK | dict(max_tokens="ten"), None, 400, "max_tokens"),
    ("wrong-type-temperature", "/v1/completions", OK | dict(temperature="hot"), None, 400, "temperature"),
    ("wrong-type-stream", "/v1/chat/completions", CHAT_OK | dict(stream="maybe"), None, 400, "stream"),  # "yes"/"true" are a bool (lax, as vLLM)
    ("wrong-type-messages", "/v1/chat/completions", CHAT_OK | dict(messages="hi"), None, 400, "messages"),
    ("missing-prompt", "/v1/completions", dict(model=MODEL), None, 400, "prompt"),
    ("stream-options-without-stream", "/v1/completions", OK | dict(stream_options={"include_usage": True}), None, 400, "stream=True"),
    ("negative-max_tokens", "/v1/completions", OK | dict(max_tokens=-3), None, 400, "max_tokens"),
    ("zero-max_tokens", "/v1/chat/completions", CHAT_OK | dict(max_tokens=0), None, 400, "max_tokens"),
    ("n-0", "/v1/completions", OK | dict(n=0), None, 400, "n"),
    ("temperature-negative", "/v1/completions", OK | dict(temperature=-1.0), None, 400, "temperature"),
    ("top_p-0", "/v1/chat/completions", CHAT_OK | dict(top_p=0.0), None, 400, "top_p"),
    ("prompt-too-long", "/v1/completions", OK | dict(prompt="hello " * 600), None, 400, "prompt"),
    ("max_tokens-above-max_model_len", "/v1/completions", OK | dict(max_tokens=600), None, 400, "max_tokens"),  # vLLM 0.32 caps a fitting one
    ("messages-too-long", "/v1/chat/completions", CHAT_OK | dict(messages=[{"role": "user", "content": "hello " * 600}]), None, 400, "input tokens"),
    ("top_logprobs-without-logprobs", "/v1/chat/completions", CHAT_OK | dict(top_logprobs=2), None, 400, "logprobs"),
    ("logprobs-above-max", "/v1/completions", OK | dict(logprobs=50), None, 400, "logprobs"),
    ("token-out-of-vocab", "/v1/completions", OK | dict(prompt=[10**9]), None, 400, "out of vocabulary"),
    ("unknown-model", "/v1/completions", OK | dict(model="gpt-4o"), None, 404, "gpt-4o"),
    ("no-key", "/v1/completions", OK, {"Authorization": ""}, 401, "Unauthorized"),
    ("wrong-key", "/v1/chat/completions", CHAT_OK, {"Authorization": "Bearer nope"}, 401, "Unauthorized"),
]


@pytest.mark.parametrize("name,path,body,headers,status,word", BAD, ids=[b[0] for b in BAD])
def test_bad_requests(server, name, path, body, headers, status, word):
    h = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"} | (headers or {})
    if not h["Authorization"]: del h["Authorization"]
    content = b'{"model": "x", "prompt": ' if body is None else json.dumps(body).encode()
    r = httpx.post(f"{server}{path}", content=content, headers=h, timeout=60)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["code"] == status
    assert word in err["message"]
    pydantic = name == "malformed-json" or name.startswith("wrong-type")  # vLLM's own checks on the raw body are BadRequestError
    assert err["type"] == ("Bad Request" if pydantic else {400: "BadRequestError", 401: "AuthenticationError", 404: "NotFoundError"}[status])  # vLLM 0.32
    assert_idle(server)  # nothing of a bad request reached the engine (or stayed there)
    ok = httpx.post(f"{server}/v1/completions", json=OK, headers={"Authorization": f"Bearer {KEY}"}, timeout=60)
    assert ok.status_code == 200  # and the server keeps serving


def test_openai_client_errors(client, server):
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=MODEL, prompt="Hi", max_tokens=-1)
    assert e.value.status_code == 400 and "max_tokens" in str(e.value)
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="nope", prompt="Hi")
    bad = openai.OpenAI(base_url=f"{server}/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.models.list()


def test_unknown_top_level_field_ignored(server):
    "vLLM's behaviour: unknown top-level fields are ignored (with a warning in the server log), not rejected."
    r = httpx.post(f"{server}/v1/completions", json=OK | dict(not_an_openai_field=1), headers={"Authorization": f"Bearer {KEY}"}, timeout=60)
    assert r.status_code == 200


def test_health_and_metrics_need_no_key(server):
    assert httpx.get(f"{server}/health").status_code == 200
    text = httpx.get(f"{server}/metrics").text
    for name in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc", "vllm:prompt_tokens_total",
                 "vllm:generation_tokens_total", "vllm:time_to_first_token_seconds", "vllm:time_per_output_token_seconds",
                 "vllm:inter_token_latency_seconds", "vllm:e2e_request_latency_seconds", "vllm:request_success_total",
                 "litevllm:num_free_blocks", "litevllm:num_total_blocks"):
        assert name in text, name


# --- concurrency, disconnects, health under load ------------------------------------------------------------------------

PROMPTS = ["The capital of France is", "Once upon a time", "def fibonacci(n):", "Water boils at",
           "List three colors:\n1.", "In 1492,", "The quick brown fox", "My favourite food is"]


async def stream_text(c:httpx.AsyncClient, prompt, max_tokens=16, leave_after=None):
    "Stream a greedy completion; with `leave_after`, disconnect after that many chunks. The text received."
    body = dict(model=MODEL, prompt=prompt, max_tokens=max_tokens, temperature=0, stream=True)
    text, n = "", 0
    async with c.stream("POST", "/v1/completions", json=body) as r:
        assert r.status_code == 200
        async for line in r.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]": continue
            text += json.loads(line[6:])["choices"][0]["text"]
            n += 1
            if leave_after is not None and n >= leave_after: return None  # leaving the block closes the connection
    return text


def test_64_concurrent_streams_with_disconnects(client, server):
    refs = {p: client.completions.create(model=MODEL, prompt=p, max_tokens=16, temperature=0).choices[0].text for p in PROMPTS}
    before = metric_value(metrics(server), 'vllm:request_success_total{engine="0",finished_reason="abort",model_name="%s"}' % MODEL)

    async def main():
        async with httpx.AsyncClient(base_url=server, headers={"Authorization": f"Bearer {KEY}"}, timeout=120,
                                     limits=httpx.Limits(max_connections=100)) as c:
            jobs = [stream_text(c, PROMPTS[i % len(PROMPTS)], leave_after=2 if i % 4 == 3 else None) for i in range(64)]
            return await asyncio.gather(*jobs)

    got = asyncio.run(main())
    for i, text in enumerate(got):
        if i % 4 == 3: assert text is None
        else: assert text == refs[PROMPTS[i % len(PROMPTS)]], f"client {i}"
    assert_idle(server)
    m = metrics(server)
    aborted = metric_value(m, 'vllm:request_success_total{engine="0",finished_reason="abort",model_name="%s"}' % MODEL) - before
    assert aborted <= 16  # the leavers that had not finished yet were aborted, and nobody else


def test_disconnect_aborts_at_once(server):
    "A client that leaves a long stream: its request is gone within a moment, not after its 400 tokens."
    async def main():
        async with httpx.AsyncClient(base_url=server, headers={"Authorization": f"Bearer {KEY}"}, timeout=120) as c:
            body = dict(model=MODEL, prompt="Once upon a time", max_tokens=400, temperature=0, stream=True, ignore_eos=True)
            async with c.stream("POST", "/v1/completions", json=body) as r:
                n = 0
                async for line in r.aiter_lines():
                    if line.startswith("data: "): n += 1
                    if n >= 3: break
    t0 = time.monotonic()
    asyncio.run(main())
    m = wait_idle(server, timeout=10)
    assert metric_value(m, "vllm:num_requests_running") == 0
    assert time.monotonic() - t0 < 10


def test_non_streaming_disconnect_aborts(server):
    "A non-streaming client that times out: its request is aborted, not run to the end."
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{server}/v1/completions", headers={"Authorization": f"Bearer {KEY}"}, timeout=httpx.Timeout(60, read=1.0),
                   json=dict(model=MODEL, prompt="Once upon a time", max_tokens=480, ignore_eos=True))
    assert_idle(server)


def test_health_responsive_under_load(server):
    "While 32 streams keep the engine busy, /health answers (latency printed, not asserted: see nbs/42_server)."
    async def main():
        async with httpx.AsyncClient(base_url=server, headers={"Authorization": f"Bearer {KEY}"}, timeout=120,
                                     limits=httpx.Limits(max_connections=100)) as c:
            load = asyncio.gather(*[stream_text(c, PROMPTS[i % len(PROMPTS)], max_tokens=24) for i in range(32)])
            lat = []
            await asyncio.sleep(0.3)
            while not load.done():
                t = time.perf_counter()
                assert (await c.get("/health")).status_code == 200
                lat.append(time.perf_counter() - t)
                await asyncio.sleep(0.05)
            await load
            return lat
    lat = asyncio.run(main())
    assert lat
    print(f"/health under load: {len(lat)} probes, median {1e3 * sorted(lat)[len(lat) // 2]:.1f} ms, max {1e3 * max(lat):.1f} ms")


# --- shutdown -----------------------------------------------------------------------------------------------------------

def test_sigterm_exits_0_after_in_flight_request(server_proc):
    proc, base = server_proc  # the module's server, which this (last) test ends
    try:
        async def main():
            async with httpx.AsyncClient(base_url=base, headers={"Authorization": f"Bearer {KEY}"}, timeout=120) as c:
                async def one():
                    return await stream_text(c, "Once upon a time", max_tokens=32)
                task = asyncio.create_task(one())
                await asyncio.sleep(1.0)  # the request is in flight
                proc.send_signal(signal.SIGTERM)
                return await task
        text = asyncio.run(main())
        assert text  # the in-flight stream was finished, not cut
        assert proc.wait(60) == 0
        with pytest.raises(httpx.HTTPError): httpx.get(f"{base}/health", timeout=2)
    finally:
        if proc.poll() is None: proc.kill()
