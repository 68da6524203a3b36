"""Streaming-input (resumable) requests through AsyncLLM with the engine core in a process of its own (vLLM's default):
chunk by chunk, the same tokens as one plain request; the input ending while the session waits; an abort while it waits."""
import asyncio
import pytest
from litevllm import SamplingParams
from litevllm.async_llm import AsyncLLM, AsyncEngineArgs
from litevllm.streaming_input import StreamingInput


@pytest.fixture(scope="module")
def engine():
    eng = AsyncLLM.from_engine_args(AsyncEngineArgs(max_model_len=512, dtype="float32", seed=0))
    yield eng
    eng.shutdown()


async def _collect(eng, prompt, sp, rid):
    return [o async for o in eng.generate(prompt, sp, request_id=rid)]


def test_three_chunks_equal_one_request(engine):
    "Each chunk continues from the session's computed tokens (the last sampled token of a chunk is dropped, as vLLM's)."
    tok = engine.engine.tokenizer
    parts = ["Alice has three apples.", " Bob gives her two more.", " Now Alice has"]
    ends = []
    async def chunks():
        for i, p in enumerate(parts):
            yield StreamingInput(p, SamplingParams(temperature=0, max_tokens=3 + i))
            while len(ends) <= i: await asyncio.sleep(0.01)  # the next chunk once this one has answered
    async def run():
        async for o in engine.generate(chunks(), SamplingParams(temperature=0, max_tokens=3), request_id="s"):
            if o.outputs[0].finish_reason is not None: ends.append(o)
    asyncio.run(asyncio.wait_for(run(), 60))
    assert [(o.outputs[0].finish_reason, o.finished) for o in ends] == [("stop", False), ("stop", False), ("stop", False)]
    toks = ends[-1].outputs[0].token_ids
    assert len(toks) == 3 + 4 + 5
    # the session's last chunk sees: part 0, its answer less the last token, part 1, its answer less the last token, part 2
    ids = tok(parts[0])["input_ids"] + toks[:2] + tok(parts[1], add_special_tokens=False)["input_ids"] + toks[3:6] + tok(parts[2], add_special_tokens=False)["input_ids"]
    plain = asyncio.run(_collect(engine, {"prompt_token_ids": ids}, SamplingParams(temperature=0, max_tokens=5), "p"))[-1]
    assert plain.outputs[0].token_ids == toks[7:]
    assert asyncio.run(engine.reset_prefix_cache())  # every block free


def test_abort_while_waiting(engine):
    "A client that walks away while the session waits for input: the session is aborted and its blocks freed."
    async def chunks():
        yield StreamingInput("The weather today is")
        await asyncio.sleep(3600)
    async def run():
        async for o in engine.generate(chunks(), SamplingParams(temperature=0, max_tokens=2), request_id="gone"):
            if o.outputs[0].finish_reason: break
        for _ in range(500):
            if await engine.reset_prefix_cache(): return True
            await asyncio.sleep(0.02)
        return False
    assert asyncio.run(asyncio.wait_for(run(), 60))


def test_refused():
    "vLLM's refusals: stop strings, n > 1, FINAL_ONLY."
    from litevllm.streaming_input import _check_streaming_params
    from litevllm.exceptions import VLLMValidationError
    from litevllm.sampling_params import RequestOutputKind
    for sp in (SamplingParams(stop=["."]), SamplingParams(n=2), SamplingParams(output_kind=RequestOutputKind.FINAL_ONLY)):
        with pytest.raises(VLLMValidationError, match="Input streaming"): _check_streaming_params(sp)
