"""`litevllm serve` under a huge prompt and a SIGTERM: /health stays fast while 12 MB are tokenized (off the event loop), a
trusted request chat template renders, and the graceful drain (503 to new requests, in-flight requests finish, the rest
get an error event and [DONE], exit 0)."""
import json, signal, statistics, threading, time
import httpx, pytest
from test_server import start_server, stop_server

SHUTDOWN_TIMEOUT = 3


@pytest.fixture(scope="module")
def server():
    proc, base = start_server("--trust-request-chat-template", "--shutdown-timeout", str(SHUTDOWN_TIMEOUT))
    yield proc, base
    stop_server(proc)


def test_health_answers_while_a_huge_prompt_is_tokenized(server):
    proc, base = server
    res = {}
    with httpx.Client(base_url=base, timeout=60) as c:
        def timed() -> float:
            t = time.perf_counter(); r = c.get("/health")
            assert r.status_code == 200
            return time.perf_counter() - t
        for _ in range(5): timed()
        idle = statistics.median(timed() for _ in range(30))
        def big():
            # /tokenize counts any length (as vLLM's): 12 MB tokenized (~5 s on a Zen 5), off the event loop (completions refuse it on its length first)
            res["r"] = httpx.post(f"{base}/tokenize", json=dict(prompt="hello world " * (12 * 2**20 // 12)), timeout=300)
            res["t"] = time.perf_counter()
        th = threading.Thread(target=big); th.start()
        time.sleep(2.0)  # the 12 MB are sent and parsed; tokenizing them takes seconds
        during = []
        for _ in range(20): during.append(timed()); time.sleep(0.05)
        t_end = time.perf_counter()
        th.join(300)
    print(f"idle /health {1e3 * idle:.2f} ms; while tokenizing: max {1e3 * max(during):.2f} ms, median {1e3 * statistics.median(during):.2f} ms")
    r = res["r"]
    assert r.status_code == 200 and r.json()["count"] > 2_000_000, r.text[:300]
    assert res["t"] > t_end, "the prompt was tokenized before the polls ended: nothing was measured"
    # ratios to an idle /health (about 0.4 ms here; 100 ms would be 250 times it): before the thread pool, 7-8 s
    assert statistics.median(during) < 20 * idle and max(during) < 250 * idle, (idle, during)


def test_trusted_request_chat_template_renders(server):
    proc, base = server
    body = dict(messages=[{"role": "user", "content": "The capital of France is"}], max_tokens=4, temperature=0,
                chat_template="{% for m in messages %}{{ m['content'] }}{% endfor %}")
    r = httpx.post(f"{base}/v1/chat/completions", json=body, timeout=60)
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["prompt_tokens"] == 5   # the request's template: the content alone, no chat markup


def test_sigterm_drains_then_exits_0(server):
    proc, base = server
    events, started = {}, {k: threading.Event() for k in ("short", "long")}
    def stream(name, max_tokens):
        body = dict(prompt="Once upon a time", max_tokens=max_tokens, temperature=0, ignore_eos=True, stream=True)
        events[name] = []
        with httpx.stream("POST", f"{base}/v1/completions", json=body, timeout=120) as r:
            for line in r.iter_lines():
                if line.startswith("data:"): events[name].append(line[5:].strip()); started[name].set()
    threads = [threading.Thread(target=stream, args=("short", 12)), threading.Thread(target=stream, args=("long", 480))]
    for t in threads: t.start()
    assert all(e.wait(60) for e in started.values())
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    r = httpx.post(f"{base}/v1/completions", json=dict(prompt="hi", max_tokens=2), timeout=10)
    assert r.status_code == 503 and r.json()["error"]["type"] == "ServiceUnavailableError", r.text
    assert httpx.get(f"{base}/health", timeout=10).status_code == 503
    for t in threads: t.join(60)
    assert proc.wait(30) == 0
    assert time.monotonic() - t0 < SHUTDOWN_TIMEOUT + 10
    short, long = events["short"], events["long"]
    assert short[-1] == "[DONE]" and json.loads(short[-2])["choices"][0]["finish_reason"] == "length"   # finished in time
    assert not any('"error"' in e for e in short)
    assert long[-1] == "[DONE]"
    err = json.loads(long[-2])["error"]
    assert err["code"] == 503 and "--shutdown-timeout" in err["message"], err
