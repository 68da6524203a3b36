"Fault isolation: a step that raises fails only its requests; a broken detokenizer fails one request; the engine goes on."
import asyncio
import pytest
from litevllm.async_llm import AsyncLLM, AsyncEngineArgs, EngineGenerateError
from litevllm.config import EngineArgs
from litevllm.engine import LLMEngine
from litevllm.sampling_params import SamplingParams

ENGINE_IN_PROCESS = True  # these tests look inside the engine core (conftest: VLLM_ENABLE_V1_MULTIPROCESSING=0)

POISON = 31999
GREEDY = SamplingParams(temperature=0, max_tokens=8)
PROMPT = "The capital of France is"


def poison(model_runner):
    "Make the model's forward raise whenever the batch holds the POISON token; returns the undo."
    model = model_runner.model
    real = model.forward
    def forward(input_ids, *a, **kw):
        if (input_ids == POISON).any(): raise RuntimeError("poisoned token")
        return real(input_ids, *a, **kw)
    model.forward = forward
    return lambda: setattr(model, "forward", real)


def run_all(eng) -> dict:
    done = {}
    while eng.has_unfinished_requests():
        for o in eng.step():
            if o.finished: done[o.request_id] = o.outputs[0].text
    return done


def all_free(pool) -> bool: return pool.get_num_free_blocks() == pool.num_blocks


@pytest.fixture(scope="module")
def engine():
    return LLMEngine.from_engine_args(EngineArgs(max_model_len=256, max_num_seqs=2, kv_cache_memory_bytes=32 * 2**20))


def test_step_failure_fails_its_requests_only(engine):
    engine.add_request("ref", PROMPT, GREEDY)
    ref = run_all(engine)["ref"]
    undo = poison(engine.engine_core.model_runner)
    engine.engine_core.isolate_failures = True
    try:
        engine.add_request("bad", {"prompt_token_ids": [1, POISON, 2]}, GREEDY)
        engine.add_request("n2", {"prompt_token_ids": [1, POISON, 3]}, SamplingParams(temperature=1.0, seed=0, max_tokens=8, n=2))
        engine.add_request("good", PROMPT, GREEDY)   # waits behind the two (max_num_seqs=2), then runs
        done, failed = run_all(engine), engine.take_failed_requests()
    finally: undo(); engine.engine_core.isolate_failures = False
    assert done == {"good": ref}
    assert sorted(failed) == ["bad", "n2"] and all("poisoned token" in w for w in failed.values())
    assert all_free(engine.engine_core.scheduler.kv_cache_manager.block_pool)
    engine.add_request("again", PROMPT, GREEDY)      # and the prefix cache holds no block of the failed step
    assert run_all(engine) == {"again": ref}


def test_step_failure_raises_without_isolation(engine):
    undo = poison(engine.engine_core.model_runner)
    try:
        engine.add_request("x", {"prompt_token_ids": [POISON]}, GREEDY)
        with pytest.raises(RuntimeError, match="poisoned token"): run_all(engine)
    finally: undo(); engine.abort_request("x")
    assert all_free(engine.engine_core.scheduler.kv_cache_manager.block_pool)


def test_broken_detokenizer_fails_one_request(engine):
    engine.add_request("ref2", "Once upon a time", GREEDY)
    ref2 = run_all(engine)["ref2"]
    engine.engine_core.isolate_failures = True
    try:
        engine.add_request("a", PROMPT, GREEDY); engine.add_request("b", "Once upon a time", GREEDY)
        engine.output_processor.request_states["a"].detok.decode_next = lambda t: 1 / 0
        done, failed = run_all(engine), engine.take_failed_requests()
    finally: engine.engine_core.isolate_failures = False
    assert done == {"b": ref2}
    assert list(failed) == ["a"] and "ZeroDivisionError" in failed["a"]
    assert all_free(engine.engine_core.scheduler.kv_cache_manager.block_pool)


def test_async_client_sees_the_error_and_engine_goes_on():
    eng = AsyncLLM.from_engine_args(AsyncEngineArgs(max_model_len=256, kv_cache_memory_bytes=32 * 2**20), log_stats=False)
    async def collect(prompt, rid):
        return [o async for o in eng.generate(prompt, GREEDY, rid)]
    async def main():
        ref = (await collect(PROMPT, "ref"))[-1].outputs[0].text
        undo = poison(eng.engine.engine_core.model_runner)
        try:
            with pytest.raises(EngineGenerateError, match="poisoned token"): await collect({"prompt_token_ids": [POISON, 5]}, "bad")
        finally: undo()
        await eng.check_health()
        assert (await collect(PROMPT, "after"))[-1].outputs[0].text == ref
        for _ in range(100):
            if all_free(eng.block_pool) and not eng.engine.has_unfinished_requests(): break
            await asyncio.sleep(0.02)
        assert all_free(eng.block_pool)
    try: asyncio.run(main())
    finally: eng.shutdown()
