"""Async scheduling (vLLM's AsyncScheduler and batch queue) with the engine core in a process of its own: the same tokens as
the synchronous scheduler through AsyncLLM's streamed outputs (nbs/28_async_scheduler compares LLM's, in-process, on more
kinds of request); the flag and what it is refused with."""
import asyncio
import pytest
from litevllm import SamplingParams
from litevllm.async_llm import AsyncLLM, AsyncEngineArgs
from litevllm.config import EngineArgs

def test_async_llm_streams():
    "Streamed (DELTA) outputs put together give the same tokens, one output per token."
    from litevllm.sampling_params import RequestOutputKind
    async def run(eng):
        sp = SamplingParams(temperature=0, max_tokens=12, output_kind=RequestOutputKind.DELTA)
        return [t async for o in eng.generate("The capital of France is", sp, request_id="r") for t in o.outputs[0].token_ids]
    res = []
    for a in (False, True):
        eng = AsyncLLM.from_engine_args(AsyncEngineArgs(max_model_len=256, dtype="float32", async_scheduling=a))
        res.append(asyncio.run(run(eng))); eng.shutdown()
    assert res[0] == res[1] and len(res[0]) == 12


def test_refused_with():
    for kw, name in (({"speculative_config": {"method": "ngram", "num_speculative_tokens": 2}}, "async_scheduling"),
                     ({"kv_offloading_size": 1.0}, "async_scheduling")):
        with pytest.raises(ValueError, match=name): EngineArgs(async_scheduling=True, **kw)
