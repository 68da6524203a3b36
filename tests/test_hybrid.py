"""Issue 42 (items 1, 2, 5): models whose layers need different KV caches, through the hybrid KV cache manager
(nbs/30_hybrid_kv_cache) and Gemma 3 (nbs/31_gemma3). Greedy tokens equal transformers' on random-weight Gemma 3 models,
small and at the 1B model's shapes (26 layers, 5 local : 1 global, 4 heads over 1 KV head of 256, window 512), with
chunked prefill, preemption, prefix caching on and off, prompts longer than the window, the C++ kernel's window; every
block back in the pool at the end; through the OpenAI server too."""
import asyncio, tempfile
from pathlib import Path
import httpx, pytest, torch
from transformers import AutoModelForCausalLM
from litevllm import LLM, SamplingParams
from litevllm.models.llama import save_random_model
from litevllm.hybrid_kv_cache import HybridKVCacheManager, SlidingWindowSpec, FullAttentionSpec

ENGINE_IN_PROCESS = True  # the tests look at the block pool
GREEDY = dict(temperature=0, ignore_eos=True)


def save_gemma3(path, **overrides) -> Path:
    "A random-weight Gemma 3 text model (norms away from their zero init), the default model's tokenizer."
    base = dict(num_hidden_layers=6, sliding_window=8, query_pre_attn_scalar=24, head_dim=16, num_attention_heads=4,
                num_key_value_heads=1, layer_types=["sliding_attention"] * 5 + ["full_attention"])
    path = save_random_model(path, "gemma3_text", **(base | overrides))
    m = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    with torch.no_grad():
        for n, p in m.named_parameters():
            if "norm" in n: p.normal_(0, 0.3)
    m.save_pretrained(path)
    return path


def hf_greedy(path, prompts, n):
    hf = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    with torch.no_grad(): return [hf.generate(torch.tensor([p]), max_new_tokens=n, do_sample=False)[0, len(p):].tolist() for p in prompts]


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    path = save_gemma3(tmp_path_factory.mktemp("g3") / "small")
    prompts = [list(range(100, 140)), list(range(100, 140)) + [5, 6, 7], [9, 8, 7, 6, 5, 4, 3, 2, 1, 10, 11, 12], list(range(300, 323))]
    return path, prompts, hf_greedy(path, prompts, 12)


@pytest.mark.parametrize("caching,async_scheduling", [(True, False), (False, False), (True, True)], ids=["caching", "no-caching", "async"])
def test_small_gemma3_preempted_and_chunked(small, caching, async_scheduling):
    """A pool too small for all four at once: preemption (recompute), chunks of 8, prefix caching on and off, and with the
    next step scheduled while one runs (async scheduling: blocks behind a window are freed before the step that last
    read them has run, and reused only by later steps); transformers' tokens, no leak."""
    path, prompts, want = small
    llm = LLM(str(path), dtype="float32", max_model_len=128, max_num_batched_tokens=24, long_prefill_token_threshold=8, block_size=4,
              num_gpu_blocks_override=80, enforce_eager=True, attention_backend="sdpa", enable_prefix_caching=caching,
              async_scheduling=async_scheduling)
    sched = llm.llm_engine.engine_core.scheduler
    assert isinstance(sched.kv_cache_manager, HybridKVCacheManager)
    got = llm.generate([dict(prompt_token_ids=p) for p in prompts], SamplingParams(max_tokens=12, **GREEDY))
    assert [o.outputs[0].token_ids for o in got] == want
    assert sched.num_preemptions > 0  # 6 groups of one layer each: 4 requests need more than 80 blocks at once
    assert sched.kv_cache_manager.block_pool.get_num_free_blocks() == 79  # all but the null block
    if caching:  # the same prompt twice in a row (the small pool evicted the first run's blocks): the second hits the first's
        first, again = (llm.generate([dict(prompt_token_ids=prompts[1])], SamplingParams(max_tokens=12, **GREEDY))[0] for _ in range(2))
        assert first.outputs[0].token_ids == again.outputs[0].token_ids == want[1] and again.num_cached_tokens == 40


def test_gemma3_1b_shapes_with_the_cpu_kernel(tmp_path):
    """Gemma 3 1B's attention shapes (26 layers 5:1, 4 heads over 1 KV head of 256, window 512, its rope bases; hidden and MLP
    cut to 256/512 to keep the suite short), a 600-token prompt in chunks of 256: the C++ kernel's window and the blocks
    freed behind it; transformers' tokens."""
    path = save_gemma3(tmp_path / "g3-1b", num_hidden_layers=26, num_attention_heads=4, num_key_value_heads=1, head_dim=256,
                       hidden_size=256, intermediate_size=512, sliding_window=512, query_pre_attn_scalar=256, layer_types=None,
                       max_position_embeddings=2048)
    g = torch.Generator().manual_seed(0)
    prompt = torch.randint(10, 40000, (600,), generator=g).tolist()
    hf = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    with torch.no_grad(): lp = hf(torch.tensor([prompt])).logits[0].log_softmax(-1)
    want_lp = lp[torch.arange(599), torch.tensor(prompt[1:])]  # each prompt token's logprob: every position, in and past the window
    want = hf_greedy(path, [prompt], 8)[0]
    llm = LLM(str(path), dtype="float32", max_model_len=1024, max_num_batched_tokens=256, enforce_eager=True,
              attention_backend="cpu", kv_cache_memory_bytes=64 * 2**20)
    runner, sched = llm.llm_engine.engine_core.model_runner, llm.llm_engine.engine_core.scheduler
    specs = [type(gr.kv_cache_spec) for gr in runner.kv_cache_groups]
    assert specs.count(FullAttentionSpec) == 1 and specs.count(SlidingWindowSpec) == 6  # 4 global layers, 22 local in 6 groups
    assert runner.attn.backends[0].name == "cpu"
    out = llm.generate([dict(prompt_token_ids=prompt)], SamplingParams(max_tokens=8, prompt_logprobs=0, **GREEDY))[0]
    assert out.outputs[0].token_ids == want
    got_lp = torch.tensor([d[t].logprob for d, t in zip(out.prompt_logprobs[1:], prompt[1:])])
    torch.testing.assert_close(got_lp, want_lp, atol=2e-3, rtol=0)
    assert sched.kv_cache_manager.block_pool.get_num_free_blocks() == sched.kv_cache_manager.block_pool.num_blocks - 1


def test_server_serves_gemma3(small):
    "POST /v1/completions on a Gemma 3 model: transformers' greedy tokens; a bad request still gets OpenAI's 400."
    from litevllm.async_llm import AsyncLLM, AsyncEngineArgs
    from litevllm.server import build_app
    path, prompts, want = small
    eng = AsyncLLM.from_engine_args(AsyncEngineArgs(model=str(path), dtype="float32", max_model_len=128, block_size=4,
                                                    kv_cache_memory_bytes=8 * 2**20, attention_backend="sdpa"), served_model_name="g3")
    try:
        app = build_app(eng, ["g3"])
        async def go():
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t", timeout=120) as c:
                ok = await c.post("/v1/completions", json=dict(model="g3", prompt=prompts[0], max_tokens=12, return_token_ids=True, **GREEDY))
                bad = await c.post("/v1/completions", json=dict(model="g3", prompt=prompts[0], max_tokens=1000))
                return ok, bad
        ok, bad = asyncio.run(go())
        assert ok.status_code == 200, ok.text
        assert ok.json()["choices"][0]["token_ids"] == want[0]
        assert bad.status_code == 400 and bad.json()["error"]["type"] == "BadRequestError"
    finally: eng.shutdown()


def test_refused_with_what_it_cannot_serve_yet(small):
    "Tensor parallelism, speculative decoding, LoRA with a sliding-window model: a ValueError naming the option."
    from litevllm.config import EngineArgs
    path = small[0]
    for kw, name in ((dict(tensor_parallel_size=2), "tensor_parallel_size"), (dict(enable_lora=True), "enable_lora"),
                     (dict(speculative_config=dict(method="ngram", num_speculative_tokens=2, prompt_lookup_max=2)), "speculative_config")):
        with pytest.raises(ValueError, match=name): EngineArgs(model=str(path), max_model_len=128, **kw).create_engine_config()


def test_smollm3_3b_shapes(tmp_path):
    """SmolLM3 3B's attention shapes (36 layers, 16 heads over 4 KV heads of 128, no rotary embedding on every 4th layer:
    NoPE; hidden and MLP cut to 256/512): one group of full attention, Part I's manager; prompt logprobs and greedy tokens
    equal transformers'."""
    from litevllm.kv_cache import KVCacheManager
    nope = [0 if (i + 1) % 4 == 0 else 1 for i in range(36)]
    path = save_random_model(tmp_path / "smollm3-3b", "smollm3", num_hidden_layers=36, num_attention_heads=16, num_key_value_heads=4,
                             head_dim=128, hidden_size=256, intermediate_size=512, no_rope_layers=nope, max_position_embeddings=1024)
    prompt = torch.randint(10, 40000, (300,), generator=torch.Generator().manual_seed(1)).tolist()
    hf = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    with torch.no_grad(): want_lp = hf(torch.tensor([prompt])).logits[0].log_softmax(-1)[torch.arange(299), torch.tensor(prompt[1:])]
    want = hf_greedy(path, [prompt], 8)[0]
    llm = LLM(str(path), dtype="float32", max_model_len=512, max_num_batched_tokens=128, enforce_eager=True, kv_cache_memory_bytes=256 * 2**20)
    assert type(llm.llm_engine.engine_core.scheduler.kv_cache_manager) is KVCacheManager
    assert [l.self_attn.use_rope for l in llm.llm_engine.engine_core.model_runner.model.layers[:8]] == [True] * 3 + [False] + [True] * 3 + [False]
    out = llm.generate([dict(prompt_token_ids=prompt)], SamplingParams(max_tokens=8, prompt_logprobs=0, **GREEDY))[0]
    assert out.outputs[0].token_ids == want
    got_lp = torch.tensor([d[t].logprob for d, t in zip(out.prompt_logprobs[1:], prompt[1:])])
    # 36 layers of random weights give logprobs of ~16 nats that float32 matmuls in another order move by up to ~0.06
    # (the same with every layer rotary, and with the torch backend); a NoPE layer given a rotation moves them by nats
    torch.testing.assert_close(got_lp, want_lp, atol=0.1, rtol=0)


def test_qwen2_with_its_window_switched_on(tmp_path):
    "Qwen2 with `use_sliding_window` (layers from `max_window_layers` on windowed): Part I's model, two groups; transformers' tokens."
    path = save_random_model(tmp_path / "qwen2-sw", "qwen2", num_hidden_layers=4, use_sliding_window=True, sliding_window=6, max_window_layers=2)
    prompts = [list(range(200, 230)), [4, 3, 2, 1] * 5]
    want = hf_greedy(path, prompts, 10)
    llm = LLM(str(path), dtype="float32", max_model_len=128, block_size=4, max_num_batched_tokens=16, num_gpu_blocks_override=64,
              enforce_eager=True, attention_backend="torch")
    groups = llm.llm_engine.engine_core.model_runner.kv_cache_groups
    assert [(type(g.kv_cache_spec).__name__, g.layer_names) for g in groups] == [("FullAttentionSpec", [0, 1]), ("SlidingWindowSpec", [2, 3])]
    got = llm.generate([dict(prompt_token_ids=p) for p in prompts], SamplingParams(max_tokens=10, **GREEDY))
    assert [o.outputs[0].token_ids for o in got] == want


@pytest.mark.skipif(not torch.cuda.is_available() and __import__("os").environ.get("TRITON_INTERPRET") != "1",
                    reason="needs CUDA or TRITON_INTERPRET=1 (set by conftest.py on CPU)")
def test_small_gemma3_through_the_triton_kernels(small):
    "The Triton kernels' window inside the engine (interpreted on CPU): transformers' tokens, chunked prefill past the window."
    path, prompts, want = small
    llm = LLM(str(path), dtype="float32", max_model_len=128, block_size=16, max_num_batched_tokens=16, num_gpu_blocks_override=48,
              enforce_eager=True, attention_backend="triton")
    assert llm.llm_engine.engine_core.model_runner.attn.name == "hybrid-triton"
    got = llm.generate([dict(prompt_token_ids=p) for p in prompts[:2]], SamplingParams(max_tokens=12, **GREEDY))
    assert [o.outputs[0].token_ids for o in got] == want[:2]


# Issue 42 item 3: Qwen3.5, Gated DeltaNet layers whose state is one block per request (MambaSpec, MambaManager)
QWEN35_SMALL = dict(num_hidden_layers=4, linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16,
                    linear_value_head_dim=16, num_attention_heads=4, num_key_value_heads=2, head_dim=16)


@pytest.fixture(scope="module")
def qwen35(tmp_path_factory):
    path = save_random_model(tmp_path_factory.mktemp("q35") / "small", "qwen3_5_text", **QWEN35_SMALL)
    prompts = [list(range(100, 120)), [9, 8, 7, 6, 5, 4, 3], list(range(300, 325)), [42] * 18]
    return path, prompts, hf_greedy(path, prompts, 50)


@pytest.mark.parametrize("async_scheduling", [False, True], ids=["sync", "async"])
def test_small_qwen3_5_preempted_and_chunked(qwen35, async_scheduling):
    """Four requests growing past what a pool of 14 blocks holds: preemption (the state recomputed from zero tokens), prompts
    in chunks of 8 (the state carried from chunk to chunk in its block), decode rows batched; transformers' tokens, no leak;
    prefix caching asked for and off (vLLM's mamba_cache_mode 'none')."""
    from litevllm.hybrid_kv_cache import MambaSpec
    path, prompts, want = qwen35
    llm = LLM(str(path), dtype="float32", max_model_len=128, max_num_batched_tokens=16, long_prefill_token_threshold=8,
              num_gpu_blocks_override=14, enforce_eager=True, attention_backend="torch", async_scheduling=async_scheduling)
    sched, runner = llm.llm_engine.engine_core.scheduler, llm.llm_engine.engine_core.model_runner
    mgr = sched.kv_cache_manager
    assert [type(g.kv_cache_spec) for g in runner.kv_cache_groups] == [MambaSpec] * 3 + [FullAttentionSpec]
    assert mgr.block_size == 32 and runner.kernel_blocks_per_block == 2 and not mgr.enable_caching
    got = llm.generate([dict(prompt_token_ids=p) for p in prompts], SamplingParams(max_tokens=50, **GREEDY))
    assert [o.outputs[0].token_ids for o in got] == want
    assert sched.num_preemptions > 0
    assert mgr.block_pool.get_num_free_blocks() == 13
    again = llm.generate([dict(prompt_token_ids=prompts[0])], SamplingParams(max_tokens=50, **GREEDY))[0]
    assert again.outputs[0].token_ids == want[0] and again.num_cached_tokens == 0


def test_qwen3_5_0_8b_shapes_with_the_cpu_kernel(tmp_path):
    """Qwen3.5 0.8B's layer shapes (24 layers 3:1, 8 heads over 2 KV heads of 256, a quarter of each rotated, 16 DeltaNet
    heads of 128×128: a 1.1 MB state per layer; hidden and MLP cut to 256/512, vocabulary to 49152, to keep the suite
    short): a 300-token prompt in chunks of 128 with the C++ attention kernel; prompt logprobs and greedy tokens equal
    transformers'."""
    from litevllm.bench.datasets import MODEL_SHAPES
    shape = {k: v for k, v in MODEL_SHAPES["qwen3.5-0.8b"].items() if k not in ("model_type", "vocab_size", "max_position_embeddings")}
    path = save_random_model(tmp_path / "q35-08b", "qwen3_5_text", **(shape | dict(hidden_size=256, intermediate_size=512, max_position_embeddings=1024)))
    prompt = torch.randint(10, 40000, (300,), generator=torch.Generator().manual_seed(2)).tolist()
    hf = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    with torch.no_grad(): want_lp = hf(torch.tensor([prompt])).logits[0].log_softmax(-1)[torch.arange(299), torch.tensor(prompt[1:])]
    want = hf_greedy(path, [prompt], 8)[0]
    llm = LLM(str(path), dtype="float32", max_model_len=512, max_num_batched_tokens=128, enforce_eager=True,
              attention_backend="cpu", kv_cache_memory_bytes=256 * 2**20)
    runner, mgr = llm.llm_engine.engine_core.model_runner, llm.llm_engine.engine_core.scheduler.kv_cache_manager
    assert runner.attn.name == "hybrid-cpu" and len(runner.kv_cache_groups) == 4  # 6 attention layers; 18 DeltaNet in 3 groups
    out = llm.generate([dict(prompt_token_ids=prompt)], SamplingParams(max_tokens=8, prompt_logprobs=0, **GREEDY))[0]
    assert out.outputs[0].token_ids == want
    got_lp = torch.tensor([d[t].logprob for d, t in zip(out.prompt_logprobs[1:], prompt[1:])])
    torch.testing.assert_close(got_lp, want_lp, atol=2e-3, rtol=0)
    assert mgr.block_pool.get_num_free_blocks() == mgr.block_pool.num_blocks - 1


def test_server_serves_qwen3_5(qwen35):
    "POST /v1/completions on a Qwen3.5 model: transformers' greedy tokens, two requests at once."
    from litevllm.async_llm import AsyncLLM, AsyncEngineArgs
    from litevllm.server import build_app
    path, prompts, want = qwen35
    eng = AsyncLLM.from_engine_args(AsyncEngineArgs(model=str(path), dtype="float32", max_model_len=128,
                                                    kv_cache_memory_bytes=8 * 2**20, attention_backend="sdpa"), served_model_name="q35")
    try:
        app = build_app(eng, ["q35"])
        async def go():
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t", timeout=120) as c:
                return await asyncio.gather(*(c.post("/v1/completions", json=dict(model="q35", prompt=p, max_tokens=20, return_token_ids=True, **GREEDY))
                                              for p in prompts[:2]))
        for r, w in zip(asyncio.run(go()), want):
            assert r.status_code == 200, r.text
            assert r.json()["choices"][0]["token_ids"] == w[:20]
    finally: eng.shutdown()


def test_qwen3_5_refused_with_what_it_cannot_serve_yet(qwen35):
    "Tensor parallelism, speculative decoding, LoRA with a linear-attention model: a ValueError naming the option."
    from litevllm.config import EngineArgs
    for kw, name in ((dict(tensor_parallel_size=2), "tensor_parallel_size"), (dict(enable_lora=True), "enable_lora"),
                     (dict(speculative_config=dict(method="ngram", num_speculative_tokens=2, prompt_lookup_max=2)), "speculative_config")):
        with pytest.raises(ValueError, match=f"{name}.*linear-attention"): EngineArgs(model=str(qwen35[0]), max_model_len=128, **kw).create_engine_config()


@pytest.mark.skipif(not torch.cuda.is_available() and __import__("os").environ.get("TRITON_INTERPRET") != "1",
                    reason="needs CUDA or TRITON_INTERPRET=1 (set by conftest.py on CPU)")
def test_small_qwen3_5_through_the_triton_kernels(qwen35):
    "Qwen3.5's attention layers through the Triton kernels (interpreted on CPU), blocks of 2 kernel blocks each: transformers' tokens."
    path, prompts, want = qwen35
    llm = LLM(str(path), dtype="float32", max_model_len=128, max_num_batched_tokens=16, enforce_eager=True, attention_backend="triton")
    runner = llm.llm_engine.engine_core.model_runner
    assert runner.attn.name == "hybrid-triton" and runner.kernel_blocks_per_block == 2
    got = llm.generate([dict(prompt_token_ids=p) for p in prompts[:2]], SamplingParams(max_tokens=12, **GREEDY))
    assert [o.outputs[0].token_ids for o in got] == [w[:12] for w in want[:2]]
