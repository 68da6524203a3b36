"AsyncLLM in-process: output kinds, concurrency, aborts and cancellation, engine failure."
import asyncio
import pytest
from litevllm.async_llm import AsyncLLM, AsyncEngineArgs, EngineDeadError
from litevllm.config import EngineArgs
from litevllm.sampling_params import SamplingParams, RequestOutputKind
from litevllm import LLM

ENGINE_IN_PROCESS = True  # these tests look inside the engine core (conftest: VLLM_ENABLE_V1_MULTIPROCESSING=0)


@pytest.fixture(scope="module")
def engine():
    e = AsyncLLM.from_engine_args(AsyncEngineArgs(max_model_len=512))
    yield e
    e.shutdown()


def all_free(engine) -> bool:
    pool = engine.block_pool
    return (not engine.engine.has_unfinished_requests() and engine.get_num_unfinished_requests() == 0
            and pool.get_num_free_blocks() == pool.num_blocks)


async def settle(engine, timeout=10.0):
    for _ in range(int(timeout / 0.02)):
        if all_free(engine) and engine._commands.empty(): break
        await asyncio.sleep(0.02)
    await asyncio.sleep(0.05)


async def collect(engine, prompt, params, rid):
    return [o async for o in engine.generate(prompt, params, rid)]


def test_from_engine_args_accepts_engine_args():
    assert issubclass(AsyncEngineArgs, EngineArgs)
    assert AsyncEngineArgs(max_model_len=128).max_model_len == 128


def test_output_kinds(engine):
    async def main():
        kw = dict(temperature=0, max_tokens=10)
        cum = await collect(engine, "The capital of France is", SamplingParams(**kw), "cum")
        delta = await collect(engine, "The capital of France is", SamplingParams(output_kind=RequestOutputKind.DELTA, **kw), "delta")
        final = await collect(engine, "The capital of France is", SamplingParams(output_kind=RequestOutputKind.FINAL_ONLY, **kw), "final")
        return cum, delta, final
    cum, delta, final = asyncio.run(main())
    assert len(final) == 1 and final[0].finished
    text = final[0].outputs[0].text
    assert cum[-1].outputs[0].text == text and cum[-1].finished and all(not o.finished for o in cum[:-1])
    assert [len(o.outputs[0].token_ids) for o in cum] == sorted(len(o.outputs[0].token_ids) for o in cum)  # cumulative grows
    assert "".join(o.outputs[0].text for o in delta) == text
    assert sum((o.outputs[0].token_ids for o in delta), []) == final[0].outputs[0].token_ids


def test_concurrent_matches_offline(engine):
    prompts = ["The capital of France is", "Once upon a time", "def fibonacci(n):", "Water boils at"]
    params = SamplingParams(temperature=0, max_tokens=12)
    async def main():
        outs = await asyncio.gather(*[collect(engine, p, params, f"c{i}") for i, p in enumerate(prompts)])
        return [o[-1].outputs[0].text for o in outs]
    got = asyncio.run(main())
    ref = LLM(max_model_len=512).generate(prompts, params, use_tqdm=False)
    assert got == [r.outputs[0].text for r in ref]


def test_n2_and_seed(engine):
    async def main():
        p = SamplingParams(n=2, temperature=1.0, seed=3, max_tokens=8)
        a = (await collect(engine, "Once upon a time", p, "n2a"))[-1]
        b = (await collect(engine, "Once upon a time", p, "n2b"))[-1]
        return a, b
    a, b = asyncio.run(main())
    assert sorted(c.index for c in a.outputs) == [0, 1]
    assert [c.text for c in a.outputs] == [c.text for c in b.outputs]


def test_abort_and_cancel_free_blocks(engine):
    long = SamplingParams(temperature=0, max_tokens=300, ignore_eos=True)
    async def main():
        async for out in engine.generate("Once upon a time", long, "break"):
            if len(out.outputs[0].token_ids) >= 2: break
        task = asyncio.create_task(collect(engine, "Once upon a time", long, "cancel"))
        await asyncio.sleep(0.3)
        task.cancel()
        with pytest.raises(asyncio.CancelledError): await task
        gen = engine.generate("Once upon a time", long, "abort")
        await gen.__anext__()
        await engine.abort("abort")
        rest = [o async for o in gen]
        n2 = engine.generate("Once upon a time", SamplingParams(n=2, temperature=1.0, max_tokens=300, ignore_eos=True), "abort-n2")
        await n2.__anext__()
        await engine.abort("abort-n2")
        await settle(engine)
        return rest
    asyncio.run(main())
    assert all_free(engine)


def test_bad_input_raises_before_engine(engine):
    async def main():
        with pytest.raises(ValueError, match="out of vocabulary"):
            await engine.generate({"prompt_token_ids": [10**9]}, SamplingParams(), "bad").__anext__()
        with pytest.raises(ValueError, match="longer than the maximum model length"):
            await engine.generate("hello " * 600, SamplingParams(), "too-long").__anext__()
        gen = engine.generate("Once upon a time", SamplingParams(max_tokens=50, ignore_eos=True), "dup")
        await gen.__anext__()
        with pytest.raises(ValueError, match="already in use"):
            await engine.generate("hi", SamplingParams(), "dup").__anext__()
        await gen.aclose()
        await settle(engine)
    asyncio.run(main())
    assert all_free(engine)


def test_engine_failure_reaches_clients():
    e = AsyncLLM.from_engine_args(AsyncEngineArgs(max_model_len=256))
    try:
        real_step = e.engine.engine_core.step
        calls = {"n": 0}
        def flaky():
            calls["n"] += 1
            if calls["n"] > 2: raise RuntimeError("simulated device failure")
            return real_step()
        e.engine.engine_core.step = flaky
        async def main():
            results = await asyncio.gather(*[collect(e, "Once upon a time", SamplingParams(max_tokens=50, ignore_eos=True), f"r{i}")
                                             for i in range(3)], return_exceptions=True)
            assert all(isinstance(r, EngineDeadError) for r in results), results
            assert "simulated device failure" in str(results[0])
            with pytest.raises(EngineDeadError): await e.check_health()
            with pytest.raises(EngineDeadError): await collect(e, "Hi", SamplingParams(), "late")
        asyncio.run(asyncio.wait_for(main(), 60))  # never a silent hang
        assert e.errored and not e.is_running
        pool = e.block_pool
        assert pool.get_num_free_blocks() == pool.num_blocks
    finally:
        e.shutdown()


def test_shutdown_fails_live_requests():
    e = AsyncLLM.from_engine_args(AsyncEngineArgs(max_model_len=256))
    async def main():
        gen = e.generate("Once upon a time", SamplingParams(max_tokens=400, ignore_eos=True), "live")
        await gen.__anext__()
        e.shutdown()
        with pytest.raises(EngineDeadError): [o async for o in gen]
    asyncio.run(asyncio.wait_for(main(), 60))
    assert e.is_stopped
