"""Prompts given as embeddings (vLLM's `{"prompt_embeds": tensor}` with `enable_prompt_embeds=True`), end to end.

A prompt's own embeddings (rows of the embedding table) must give token for token the greedy output of its ids, whatever
the road: the engine core in this process or in its own (the tensor crossing as MessagePack), prefill split over steps,
the prefix cache (keyed on the embeddings, never on the placeholder ids), preemption and recompute. The engines: float32,
a 16-token step budget (every 40-token prompt is chunked), a 6-block pool (two long requests preempt each other)."""
import asyncio, glob
import pytest, torch
from safetensors import safe_open
from litevllm import LLM, SamplingParams
from litevllm.async_llm import AsyncLLM, AsyncEngineArgs
from litevllm.config import EngineArgs, default_model_path
from litevllm.exceptions import VLLMValidationError

ENGINE = dict(dtype="float32", enable_prompt_embeds=True, max_model_len=64, max_num_batched_tokens=16,
              num_gpu_blocks_override=6, block_size=16)
PROMPTS = ["The capital of France is", "Once upon a time", "def fibonacci(n):", "Water boils at"]


@pytest.fixture(scope="module")
def table():
    "The default model's embedding table (float32), read from its checkpoint."
    with safe_open(glob.glob(str(default_model_path()/"*.safetensors"))[0], "pt") as f: return f.get_tensor("model.embed_tokens.weight")


def make_llm(multiprocess:bool) -> LLM:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "1" if multiprocess else "0")
        return LLM(**ENGINE)


@pytest.fixture(scope="module")
def llm():
    "The engine core in this process (its scheduler and pool can be looked at)."
    llm = make_llm(multiprocess=False)
    yield llm
    llm.llm_engine.shutdown()


def greedy(n): return SamplingParams(temperature=0, max_tokens=n, ignore_eos=True)
def tokens(outs): return [o.outputs[0].token_ids for o in outs]
def ids_of(llm, text): return llm.get_tokenizer()(text).input_ids
def long_ids(seed:int, n:int=40): return torch.randint(100, 10000, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def all_blocks_free(llm) -> bool:
    e = llm.llm_engine
    if e.engine_core.multiprocess: return e.num_free_blocks == e.num_blocks  # as the last step reported
    pool = e.engine_core.scheduler.kv_cache_manager.block_pool
    return not e.has_unfinished_requests() and pool.get_num_free_blocks() == pool.num_blocks


def test_mixed_batch_matches_ids(llm, table):
    ids = [ids_of(llm, p) for p in PROMPTS]
    embeds = [{"prompt_embeds": table[i]} for i in ids]
    outs = llm.generate([{"prompt_token_ids": i} for i in ids] + embeds + ["Hello"], greedy(6), use_tqdm=False)
    assert tokens(outs[4:8]) == tokens(outs[:4])           # embeds and ids in one batch: the same tokens
    assert [o.outputs[0].text for o in outs[4:8]] == [o.outputs[0].text for o in outs[:4]]
    assert [(o.prompt, o.prompt_token_ids) for o in outs[4:8]] == [(None, [0] * len(i)) for i in ids]  # vLLM's placeholders
    assert all_blocks_free(llm)


def test_chunked_prefill(llm, table):
    ids = long_ids(1)  # 40 tokens over a 16-token budget: three steps of prefill
    a, b = llm.generate([{"prompt_token_ids": ids}, {"prompt_embeds": table[ids]}], greedy(6), use_tqdm=False)
    assert b.outputs[0].token_ids == a.outputs[0].token_ids
    assert all_blocks_free(llm)


def test_prefix_cache_keyed_on_embeddings(llm, table):
    ids, other = long_ids(2), long_ids(3)
    e = table[ids]
    first, again = (llm.generate({"prompt_embeds": e.clone()}, greedy(4), use_tqdm=False)[0] for _ in range(2))
    assert again.outputs[0].token_ids == first.outputs[0].token_ids
    assert (first.num_cached_tokens, again.num_cached_tokens) == (0, 32)  # 40 rows: its two full blocks hit
    half = torch.cat([e[:16], table[other][16:]])                         # the first block's rows, then others
    assert llm.generate({"prompt_embeds": half}, greedy(4), use_tqdm=False)[0].num_cached_tokens == 16
    assert llm.generate({"prompt_embeds": table[other]}, greedy(4), use_tqdm=False)[0].num_cached_tokens == 0  # same length, other rows
    placeholders = llm.generate({"prompt_token_ids": [0] * 40}, greedy(4), use_tqdm=False)[0]
    assert placeholders.num_cached_tokens == 0                            # the ids under the embeddings share nothing
    assert all_blocks_free(llm)


def test_preemption_recomputes_from_embeddings(llm, table):
    ids = [long_ids(10 + i) for i in range(2)]  # 2 x (40 + 20) tokens: 8 blocks wanted, 6 in the pool
    want = tokens(llm.generate([{"prompt_token_ids": i} for i in ids], greedy(20), use_tqdm=False))
    before = llm.llm_engine.get_stats().num_preemptions
    got = tokens(llm.generate([{"prompt_embeds": table[i]} for i in ids], greedy(20), use_tqdm=False))
    assert llm.llm_engine.get_stats().num_preemptions > before
    assert got == want
    assert all_blocks_free(llm)


def test_errors(llm, table):
    e = table[:5]
    for bad, msg in [(e[0], "prompt_embeds must be of shape"), (e[:, :100], "hidden_size 100 does not match"),
                     (e.long(), "not a floating-point type"), (table[:64], "maximum model length of 64"), (e[:0], "cannot be empty")]:
        with pytest.raises(VLLMValidationError, match=msg): llm.generate(["fine", {"prompt_embeds": bad}], greedy(2), use_tqdm=False)
    assert llm.generate({"prompt_embeds": e[None]}, greedy(2), use_tqdm=False)[0].outputs[0].token_ids  # (1, tokens, hidden): squeezed
    assert all_blocks_free(llm)


def test_engine_add_request(llm, table):
    engine, ids = llm.llm_engine, ids_of(llm, PROMPTS[0])
    engine.add_request("emb", {"prompt_embeds": table[ids]}, greedy(5))
    engine.add_request("ids", {"prompt_token_ids": ids}, greedy(5))
    done = {}
    while engine.has_unfinished_requests():
        for o in engine.step():
            if o.finished: done[o.request_id] = o.outputs[0].token_ids
    assert done["emb"] == done["ids"] and len(done["ids"]) == 5
    assert all_blocks_free(llm)


def test_flag_off(table):
    "Refused without `enable_prompt_embeds`, with vLLM's message, before any engine exists (`InputProcessor` is the gate)."
    from litevllm.inputs import InputProcessor, get_tokenizer
    cfg = EngineArgs(max_model_len=64).create_engine_config()
    with pytest.raises(ValueError, match="You must set `--enable-prompt-embeds` to input `prompt_embeds`"):
        InputProcessor(cfg, get_tokenizer(cfg.model_path)).process_inputs("x", {"prompt_embeds": table[:3]}, greedy(2))


def test_engine_core_process(table):
    "The tensor crosses to the engine core's process as a MessagePack extension; prefix hits come back in the outputs."
    llm = make_llm(multiprocess=True)
    try:
        ids = long_ids(5)
        a, b = llm.generate([{"prompt_token_ids": ids}, {"prompt_embeds": table[ids]}], greedy(6), use_tqdm=False)
        assert b.outputs[0].token_ids == a.outputs[0].token_ids
        again = llm.generate({"prompt_embeds": table[ids]}, greedy(6), use_tqdm=False)[0]
        assert (again.outputs[0].token_ids, again.num_cached_tokens) == (b.outputs[0].token_ids, 32)
        assert all_blocks_free(llm)
    finally: llm.llm_engine.shutdown()


def test_async_llm(table):
    engine = AsyncLLM.from_engine_args(AsyncEngineArgs(**ENGINE), multiprocess_mode=False)
    ids = long_ids(4, n=20)
    async def final(prompt, rid): return [o async for o in engine.generate(prompt, greedy(6), rid)][-1]
    async def main(): return await asyncio.gather(final({"prompt_token_ids": ids}, "ids"), final({"prompt_embeds": table[ids]}, "emb"))
    try:
        a, b = asyncio.run(asyncio.wait_for(main(), 60))
        assert b.outputs[0].token_ids == a.outputs[0].token_ids and b.prompt_token_ids == [0] * 20
    finally: engine.shutdown()
