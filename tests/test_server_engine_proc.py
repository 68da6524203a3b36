"""`litevllm serve` with its engine core in processes of its own (issue 27): data-parallel engines behind one front end,
per-engine metrics, and a killed engine core failing every stream within 2 s, /health 503, no process left behind."""
import asyncio, json, os, signal, time
import httpx, psutil, pytest
from litevllm.metrics import parse_metrics, metric_value
from test_server import start_server, stop_server, wait_idle, MODEL


def engine_core_pids(server_pid: int) -> list[int]:
    "The server's engine-core processes: its children (but multiprocessing's helpers), or its fork server's."
    kids = psutil.Process(server_pid).children()
    helper = lambda k, name: f"multiprocessing.{name}" in " ".join(k.cmdline())
    fork_servers = [k for k in kids if helper(k, "forkserver")]
    return [k.pid for k in kids if not helper(k, "forkserver") and not helper(k, "resource_tracker")] + \
           [c.pid for s in fork_servers for c in s.children()]


def all_gone(pids, timeout=15.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]: return True
        time.sleep(0.1)
    return False


@pytest.fixture(scope="module")
def dp_server():
    """A data-parallel server (two engine cores), started once (~5 s): test_data_parallel_server reads it, then
    test_server_exit_leaves_no_engine_process (the last test) stops it."""
    proc, base = start_server("--data-parallel-size", "2", "--kv-cache-memory-bytes", str(64 * 2**20))
    yield proc, base
    stop_server(proc)  # a no-op once the last test has stopped it


def test_data_parallel_server(dp_server):
    proc, base = dp_server
    pids = engine_core_pids(proc.pid)
    assert len(pids) == 2, pids
    prompts = [f"Story {i}: once upon a time" for i in range(16)]
    async def main():
        async with httpx.AsyncClient(timeout=120) as c:
            rs = await asyncio.gather(*[c.post(f"{base}/v1/completions", json=dict(model=MODEL, prompt=p, max_tokens=6, temperature=0))
                                        for p in prompts])
            return [r.json()["choices"][0]["text"] for r in rs]
    texts = asyncio.run(main())
    alone = [httpx.post(f"{base}/v1/completions", json=dict(model=MODEL, prompt=p, max_tokens=6, temperature=0), timeout=60).json()["choices"][0]["text"]
             for p in prompts[:3]]
    assert texts[:3] == alone
    m = wait_idle(base)
    done = {k: v for k, v in m.items() if k.startswith("vllm:request_success_total") and 'finished_reason="length"' in k}
    per_engine = {e: sum(v for k, v in done.items() if f'engine="{e}"' in k) for e in ("0", "1")}
    assert sum(per_engine.values()) == 19 and min(per_engine.values()) >= 4, per_engine  # both engines served
    blocks = [k for k in m if k.startswith("litevllm:num_total_blocks")]
    assert sorted('engine="0"' in k for k in blocks) == [False, True] and len(blocks) == 2
    assert metric_value(m, "litevllm:num_free_blocks") == metric_value(m, "litevllm:num_total_blocks")


def test_killed_engine_core_fails_streams_fast_and_leaves_nothing():
    proc, base = start_server("--kv-cache-memory-bytes", str(64 * 2**20))
    try:
        (pid,) = engine_core_pids(proc.pid)
        async def stream():
            t_kill, end = None, None
            async with httpx.AsyncClient(timeout=60) as c:
                payload = dict(model=MODEL, prompt="Once upon a time", max_tokens=400, ignore_eos=True, stream=True)
                async with c.stream("POST", f"{base}/v1/completions", json=payload) as r:
                    assert r.status_code == 200
                    n, errors = 0, []
                    async for line in r.aiter_lines():
                        if not line.startswith("data: ") or line == "data: [DONE]": continue
                        body = json.loads(line[6:])
                        if "error" in body: errors.append(body["error"]); break
                        n += 1
                        if n == 3: os.kill(pid, signal.SIGKILL); t_kill = time.monotonic()
                    end = time.monotonic()
            return end - t_kill, errors
        dt, errors = asyncio.run(stream())
        assert dt < 2, dt
        assert errors and errors[0]["code"] >= 500, errors  # the stream ends with an error event, not silently
        r = httpx.get(f"{base}/health", timeout=5)
        assert r.status_code == 503 and "dead" in r.json()["error"]["message"]
        r = httpx.post(f"{base}/v1/completions", json=dict(model=MODEL, prompt="Hi", max_tokens=2), timeout=10)
        assert r.status_code >= 500
    finally:
        kids = [k.pid for k in psutil.Process(proc.pid).children(recursive=True)] if proc.poll() is None else []
        stop_server(proc)
    assert all_gone(kids + [proc.pid])


def test_server_exit_leaves_no_engine_process(dp_server):
    proc, base = dp_server  # the module's data-parallel server: this test stops it
    try: pids = engine_core_pids(proc.pid)
    finally: stop_server(proc)  # even if the assertion below fails: no server left behind
    assert len(pids) == 2
    assert all_gone(pids)
