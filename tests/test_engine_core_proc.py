"""The engine core in a process of its own (issue 27): the clients give the in-process engine's tokens, a dead engine core
fails every request fast and leaves no process behind, unguarded scripts run, data-parallel engines share the load."""
import asyncio, os, signal, subprocess, sys, textwrap, time
import psutil, pytest
from litevllm import LLM, SamplingParams
from litevllm.config import EngineArgs
from litevllm.engine import LLMEngine
from litevllm.core_client import InprocClient, SyncMPClient, AsyncMPClient
from litevllm.async_llm import AsyncLLM, AsyncEngineArgs
from litevllm.executor import EngineDeadError

PROMPTS = ["The capital of France is", "Once upon a time", "def fibonacci(n):", "Water boils at", "The best way to learn is",
           "In 1492,", "My favourite colour is", "The quick brown fox"]
GREEDY = SamplingParams(temperature=0, max_tokens=12)
ARGS = dict(max_model_len=256, kv_cache_memory_bytes=64 * 2**20)


def engine_pids(client) -> list[int]: return client.engine_manager.pids


def wait_gone(pids, timeout=10.0) -> list[int]:
    "The pids still alive (not zombies) after `timeout` s."
    deadline = time.monotonic() + timeout
    while True:
        alive = [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
        if not alive or time.monotonic() > deadline: return alive
        time.sleep(0.1)


@pytest.fixture(scope="module")
def inproc_texts():
    with pytest.MonkeyPatch.context() as m:
        m.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        llm = LLM(**ARGS)
    assert isinstance(llm.llm_engine.engine_core, InprocClient)
    outs = llm.generate(PROMPTS, GREEDY, use_tqdm=False)
    return [o.outputs[0].token_ids for o in outs]


@pytest.fixture(scope="module")
def mp_llm():
    "An LLM over an engine core process of its own (ARGS); test_offline_engine_dead_within_2s ends it, after the tests that read it."
    llm = LLM(**ARGS)
    yield llm
    llm.llm_engine.shutdown()  # a second shutdown (after the test that killed it) is a no-op


def test_default_is_a_process_of_its_own(mp_llm):
    client = mp_llm.llm_engine.engine_core
    assert isinstance(client, SyncMPClient)
    (pid,) = engine_pids(client)
    assert pid != os.getpid() and pid in [c.pid for c in psutil.Process().children(recursive=True)]  # ours (or our fork server's)


def test_same_tokens_as_in_process(mp_llm, inproc_texts):
    outs = mp_llm.generate(PROMPTS, GREEDY, use_tqdm=False)
    assert [o.outputs[0].token_ids for o in outs] == inproc_texts


def test_logprobs_stop_strings_and_n_cross_the_socket(mp_llm):
    p = SamplingParams(temperature=0, max_tokens=8, logprobs=3, prompt_logprobs=2)
    o = mp_llm.generate(["The capital of France is"], p, use_tqdm=False)[0]
    c = o.outputs[0]
    assert len(c.logprobs) == len(c.token_ids) and all(len(d) >= 3 for d in c.logprobs)
    assert c.logprobs[0][c.token_ids[0]].rank == 1 and c.cumulative_logprob < 0
    assert o.prompt_logprobs[0] is None and len(o.prompt_logprobs) == len(o.prompt_token_ids)
    s = mp_llm.generate(["The capital of France is"], SamplingParams(temperature=0, max_tokens=30, stop=["."]), use_tqdm=False)[0]
    assert s.outputs[0].text == " Paris" and s.outputs[0].finish_reason == "stop" and s.outputs[0].stop_reason == "."
    n = mp_llm.generate(["Once upon a time"], SamplingParams(n=3, temperature=1.0, seed=1, max_tokens=5), use_tqdm=False)[0]
    assert len(n.outputs) == 3
    assert mp_llm.llm_engine.engine_core.call_utility("num_free_blocks") == mp_llm.llm_engine.num_blocks  # nothing leaked


def test_bad_request_harms_nothing(mp_llm, inproc_texts):
    with pytest.raises(ValueError): mp_llm.generate(["hi"], SamplingParams(max_tokens=0), use_tqdm=False)
    assert mp_llm.generate(PROMPTS[:1], GREEDY, use_tqdm=False)[0].outputs[0].token_ids == inproc_texts[0]


def test_offline_engine_dead_within_2s(mp_llm):
    eng = mp_llm.llm_engine  # the module's engine (ARGS, the engine core in its own process): saves a start; this test ends it
    assert isinstance(eng, LLMEngine) and not eng.has_unfinished_requests()
    (pid,) = engine_pids(eng.engine_core)
    eng.add_request("long", "Once upon a time", SamplingParams(temperature=0, max_tokens=200, ignore_eos=True))
    eng.step()
    os.kill(pid, signal.SIGKILL)
    t0 = time.monotonic()
    with pytest.raises(EngineDeadError, match="signal 9"):
        while True: eng.step()
    assert time.monotonic() - t0 < 2
    eng.shutdown()
    assert wait_gone([pid]) == []


def test_async_stream_fails_within_2s_and_nothing_is_left():
    async def main():
        e = AsyncLLM.from_engine_args(AsyncEngineArgs(**ARGS))
        assert isinstance(e.engine_core, AsyncMPClient)
        (pid,) = engine_pids(e.engine_core)
        outs, t_kill = [], None
        with pytest.raises(EngineDeadError):
            async for o in e.generate("Once upon a time", SamplingParams(temperature=0, max_tokens=500, ignore_eos=True), "s"):
                outs.append(o)
                if len(outs) == 3: os.kill(pid, signal.SIGKILL); t_kill = time.monotonic()
        assert time.monotonic() - t_kill < 2
        with pytest.raises(EngineDeadError): await e.check_health()
        with pytest.raises(EngineDeadError):
            async for _ in e.generate("Hello", GREEDY, "after"): pass
        e.shutdown()
        return pid
    pid = asyncio.run(main())
    assert wait_gone([pid]) == []


def test_async_check_health_sees_an_idle_engine_die():
    async def main():
        e = AsyncLLM.from_engine_args(AsyncEngineArgs(**ARGS))
        got = [o async for o in e.generate("The capital of France is", GREEDY, "a")]
        assert got[-1].outputs[0].text.startswith(" Paris")
        await e.check_health()
        (pid,) = engine_pids(e.engine_core)
        os.kill(pid, signal.SIGKILL)
        time.sleep(0.5)
        with pytest.raises(EngineDeadError): await e.check_health()
        e.shutdown()
    asyncio.run(main())


UNGUARDED = textwrap.dedent("""
    from litevllm import LLM, SamplingParams
    llm = LLM(max_model_len=128, kv_cache_memory_bytes=32 * 2**20{extra})
    out = llm.generate(["The capital of France is"], SamplingParams(temperature=0, max_tokens=4), use_tqdm=False)
    print("TEXT:" + out[0].outputs[0].text)
""")


@pytest.mark.parametrize("extra", ["", ", tensor_parallel_size=2"], ids=["default", "tp2"])
def test_script_without_main_guard(tmp_path, extra):
    "A vLLM user's script without `if __name__ == '__main__':` runs (fork where safe; spawn does not re-run the script)."
    script = tmp_path / "script.py"
    script.write_text(UNGUARDED.format(extra=extra))
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.count("TEXT: Paris") == 1, r.stdout  # the script ran once, not once per process


def test_script_spawned_without_main_guard(tmp_path):
    script = tmp_path / "script.py"
    script.write_text(UNGUARDED.format(extra=""))
    env = dict(os.environ, VLLM_WORKER_MULTIPROC_METHOD="spawn")
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.count("TEXT: Paris") == 1


def test_data_parallel_same_tokens_and_split(inproc_texts):
    llm = LLM(data_parallel_size=2, **ARGS)
    client = llm.llm_engine.engine_core
    assert len(engine_pids(client)) == 2
    outs = llm.generate(PROMPTS, GREEDY, use_tqdm=False)
    assert [o.outputs[0].token_ids for o in outs] == inproc_texts
    before = list(client.num_requests_sent)
    llm.generate([f"Story {i}: once upon a time" for i in range(64)], SamplingParams(temperature=0, max_tokens=4, ignore_eos=True), use_tqdm=False)
    sent = [a - b for a, b in zip(client.num_requests_sent, before)]
    assert sum(sent) == 64 and min(sent) >= 0.4 * 64, sent
    pids = engine_pids(client)
    llm.llm_engine.shutdown()
    assert wait_gone(pids) == []


def test_in_process_when_asked(monkeypatch):
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    eng = LLMEngine.from_engine_args(EngineArgs(**ARGS))
    assert isinstance(eng.engine_core, InprocClient) and eng.engine_core.scheduler is not None
    with pytest.raises(ValueError, match="data_parallel_size"): LLMEngine.from_engine_args(EngineArgs(data_parallel_size=2, **ARGS))
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "maybe")
    with pytest.raises(ValueError, match="VLLM_ENABLE_V1_MULTIPROCESSING"): LLMEngine.from_engine_args(EngineArgs(**ARGS))
