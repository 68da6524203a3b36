"""Multi-LoRA: litevllm's greedy tokens equal transformers + peft's (`PeftModel`, float32) for each adapter, alone and in one batch
mixing the base model and adapters; the scheduler's max_loras rule; prefix caching never shares KV across adapters; refusals
name the field; no KV block leaks."""
import pytest, torch
from transformers import AutoConfig, AutoModelForCausalLM
from peft import PeftModel
from litevllm import LLM, SamplingParams, LoRARequest, EngineArgs
from litevllm.exceptions import VLLMValidationError
from litevllm.models.llama import save_random_model
from litevllm.lora.peft_helper import save_random_adapter

ENGINE_IN_PROCESS = True  # these tests look inside the engine core (conftest: VLLM_ENABLE_V1_MULTIPROCESSING=0)

PROMPTS = ["The capital of France is", "Once upon a time there was", "def fibonacci(n):", "Hello, my name is"]
MAX_TOKENS = 10
SP = SamplingParams(temperature=0, max_tokens=MAX_TOKENS, ignore_eos=True)
ENGINE = dict(dtype="float32", kv_cache_memory_bytes=32 * 2**20, max_model_len=256)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    "A small random Llama, three adapters (attention q/v; rsLoRA on k/o; the MLP), and PEFT's greedy tokens for each."
    d = tmp_path_factory.mktemp("lora")
    model = save_random_model(d / "model", "llama")
    cfg = AutoConfig.from_pretrained(model)
    ads = {"qv": save_random_adapter(d / "qv", cfg, ["q_proj", "v_proj"], r=8, lora_alpha=16, seed=1, std=0.3),
           "rs": save_random_adapter(d / "rs", cfg, ["k_proj", "o_proj"], r=16, lora_alpha=8, seed=2, std=0.3, use_rslora=True),
           "mlp": save_random_adapter(d / "mlp", cfg, ["gate_proj", "up_proj", "down_proj"], r=4, lora_alpha=8, seed=3, std=0.3)}
    lrs = {name: LoRARequest(name, i + 1, str(p)) for i, (name, p) in enumerate(ads.items())}
    from litevllm.inputs import get_tokenizer
    tok = get_tokenizer(model)
    ref = {}
    for name in [None, *ads]:
        m = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32)
        if name is not None: m = PeftModel.from_pretrained(m, str(ads[name]))
        m.eval()
        for p in PROMPTS:
            ids = tok(p, return_tensors="pt").input_ids
            with torch.no_grad(): out = m.generate(ids, max_new_tokens=MAX_TOKENS, min_new_tokens=MAX_TOKENS, do_sample=False)
            ref[name, p] = out[0, ids.shape[1]:].tolist()
    return model, lrs, ref


@pytest.fixture(scope="module")
def llm(setup):
    model, _, _ = setup
    return LLM(str(model), enable_lora=True, max_loras=2, max_cpu_loras=3, **ENGINE)


def no_leak(llm):
    pool = llm.llm_engine.engine_core.scheduler.kv_cache_manager.block_pool
    assert pool.get_num_free_blocks() == pool.num_blocks and all(b.ref_cnt == 0 for b in pool.blocks)


def test_adapters_change_the_output(setup):
    "The test adapters are strong enough to change greedy tokens (else parity below would prove nothing)."
    _, lrs, ref = setup
    for name in lrs: assert any(ref[name, p] != ref[None, p] for p in PROMPTS), name


@pytest.mark.parametrize("name", ["qv", "rs", "mlp"])
def test_each_adapter_alone_equals_peft(setup, llm, name):
    _, lrs, ref = setup
    outs = llm.generate(PROMPTS, SP, lora_request=lrs[name], use_tqdm=False)
    assert [o.outputs[0].token_ids for o in outs] == [ref[name, p] for p in PROMPTS]
    no_leak(llm)


def test_mixed_batch_equals_peft(setup, llm):
    "One batch: base, qv, rs, base, mlp ... (three adapters over two slots: the scheduler splits them over steps)."
    _, lrs, ref = setup
    names = [None, "qv", "rs", None, "mlp", "qv", "rs", "mlp"]
    prompts = [PROMPTS[i % len(PROMPTS)] for i in range(len(names))]
    outs = llm.generate(prompts, SP, lora_request=[lrs[n] if n else None for n in names], use_tqdm=False)
    assert [o.outputs[0].token_ids for o in outs] == [ref[n, p] for n, p in zip(names, prompts)]
    runner = llm.llm_engine.engine_core.model_runner
    assert len(runner.lora_manager.list_adapters()) <= 3 and len([s for s in runner.lora_manager.slots if s]) <= 2
    no_leak(llm)


def test_one_step_mixes_base_and_two_adapters(setup, llm):
    "The first step of base + qv + rs runs all three requests in one forward: tokens of slot -1, and of two slots."
    _, lrs, ref = setup
    eng = llm.llm_engine
    for i, n in enumerate([None, "qv", "rs"]): eng.add_request(f"mix{i}", PROMPTS[0], SP, lora_request=lrs[n] if n else None)
    eng.step()
    slots = eng.engine_core.model_runner.lora_manager.last_token_slots
    assert len(set(slots.tolist())) == 3 and -1 in slots.tolist()
    done = {}
    while eng.has_unfinished_requests():
        for o in eng.step():
            if o.finished: done[o.request_id] = o.outputs[0].token_ids
    assert [done[f"mix{i}"] for i in range(3)] == [ref[n, PROMPTS[0]] for n in [None, "qv", "rs"]]


def test_max_loras_one_runs_three_adapters(setup):
    "max_loras=1, three adapters' requests: all complete, PEFT's tokens, and no step ever ran two adapters."
    model, lrs, ref = setup
    llm1 = LLM(str(model), enable_lora=True, max_loras=1, **ENGINE)
    sched = llm1.llm_engine.engine_core.scheduler
    seen, deferred, schedule = [], [], sched.schedule
    def recording():
        so = schedule()
        seen.append({sched.requests[r].lora_request.lora_int_id for r in so.num_scheduled_tokens
                     if r in sched.requests and sched.requests[r].lora_request is not None})
        deferred.append(sched.make_stats().num_skipped_waiting_reqs)  # waiting for their adapter's turn: vLLM's "deferred"
        return so
    sched.schedule = recording
    names = ["qv", "rs", "mlp", "qv", None, "mlp"]
    outs = llm1.generate([PROMPTS[0]] * len(names), SP, lora_request=[lrs[n] if n else None for n in names], use_tqdm=False)
    assert [o.outputs[0].token_ids for o in outs] == [ref[n, PROMPTS[0]] for n in names]
    assert seen and max(len(s) for s in seen) == 1 and set().union(*seen) == {1, 2, 3}
    assert max(deferred) > 0 and deferred[-1] == 0 and not sched.deferred_waiting
    assert llm1.llm_engine.list_loras() == {3}  # max_cpu_loras = max_loras = 1: the last one used
    no_leak(llm1)


def test_chunked_prefill_and_preemption(setup):
    "A small KV pool (preemption, recompute) and a small token budget (prompts in chunks), adapters mixed: still PEFT's tokens."
    model, lrs, ref = setup
    small = LLM(str(model), enable_lora=True, max_loras=2, block_size=8, num_gpu_blocks_override=5, max_num_batched_tokens=8,
                max_model_len=40, dtype="float32")
    names = ["qv", None, "rs", "mlp", "qv", "rs", None, "mlp"]
    prompts = [PROMPTS[i % len(PROMPTS)] for i in range(len(names))]
    outs = small.generate(prompts, SP, lora_request=[lrs[n] if n else None for n in names], use_tqdm=False)
    assert [o.outputs[0].token_ids for o in outs] == [ref[n, p] for n, p in zip(names, prompts)]
    assert small.llm_engine.engine_core.scheduler.num_preemptions > 0
    no_leak(small)


def test_prefix_cache_never_crosses_adapters(setup, llm):
    "The same 40-token prompt: a hit within one adapter, never across adapters or with the base model."
    _, lrs, _ = setup
    prompt = {"prompt_token_ids": list(range(1000, 1040))}
    one = lambda lr: llm.generate([prompt], SP, lora_request=lr, use_tqdm=False)[0].num_cached_tokens
    assert one(lrs["qv"]) == 0
    assert one(lrs["rs"]) == 0      # same tokens, other adapter: no hit
    assert one(None) == 0           # nor the base model
    assert one(lrs["qv"]) == 32     # same adapter: its two full blocks hit
    assert one(None) == 32 and one(lrs["rs"]) == 32
    no_leak(llm)


def test_abort_frees_blocks(setup, llm):
    _, lrs, _ = setup
    eng = llm.llm_engine
    eng.add_request("ab0", PROMPTS[1], SamplingParams(max_tokens=50), lora_request=lrs["mlp"])
    eng.add_request("ab1", PROMPTS[2], SamplingParams(max_tokens=50), lora_request=lrs["qv"])
    eng.step(); eng.step()
    eng.abort_request(["ab0", "ab1"])
    assert not eng.has_unfinished_requests()
    no_leak(llm)


def refusal(llm, path, tmp):
    with pytest.raises(VLLMValidationError) as e: llm.generate(["x"], SP, lora_request=LoRARequest("bad", 9, str(path)), use_tqdm=False)
    return e.value.parameter


def test_refusals_name_the_field(setup, llm, tmp_path):
    model, _, _ = setup
    cfg = AutoConfig.from_pretrained(model)
    assert refusal(llm, save_random_adapter(tmp_path / "dora", cfg, use_dora=True), tmp_path) == "use_dora"
    assert refusal(llm, save_random_adapter(tmp_path / "big", cfg, r=32), tmp_path) == "r"
    assert refusal(llm, save_random_adapter(tmp_path / "bias", cfg, bias="lora_only"), tmp_path) == "bias"
    assert refusal(llm, save_random_adapter(tmp_path / "mts", cfg, modules_to_save=["lm_head"]), tmp_path) == "modules_to_save"
    assert refusal(llm, tmp_path / "nowhere", tmp_path) == "lora_path"
    from peft import LoraConfig
    from safetensors.torch import save_file
    LoraConfig(r=4, target_modules=["q_proj", "embed_tokens"]).save_pretrained(str(tmp_path / "emb"))
    save_file({"base_model.model.model.embed_tokens.lora_embedding_A": torch.zeros(4, 49152)}, str(tmp_path / "emb/adapter_model.safetensors"))
    assert refusal(llm, tmp_path / "emb", tmp_path) == "target_modules"
    no_leak(llm)


def test_lora_off_and_engine_args(setup):
    model, lrs, _ = setup
    with pytest.raises(ValueError, match="max_loras"): EngineArgs(max_loras=0)
    with pytest.raises(ValueError, match="max_lora_rank"): EngineArgs(max_lora_rank=7)
    with pytest.raises(ValueError, match="max_cpu_loras"): EngineArgs(max_loras=4, max_cpu_loras=2)
    with pytest.raises(ValueError, match="enable_lora"): EngineArgs(enable_lora=True, tensor_parallel_size=2)
    plain = LLM(str(model), **ENGINE)
    with pytest.raises(VLLMValidationError, match="LoRA is not enabled"): plain.generate(["x"], SP, lora_request=lrs["qv"])
    with pytest.raises(VLLMValidationError, match="lengths of prompts"): plain.generate(["x", "y"], SP, lora_request=[None])


def test_add_remove_list(setup, llm):
    _, lrs, _ = setup
    eng = llm.llm_engine
    assert eng.add_lora(lrs["mlp"]) in (True, False)
    assert 3 in eng.list_loras()
    assert eng.remove_lora(3) is True and 3 not in eng.list_loras()
    assert eng.remove_lora(3) is False
    with pytest.raises(VLLMValidationError): eng.add_lora(LoRARequest("no", 7, "/nowhere"))


# --- the server: /v1/models, model=<adapter>, load/unload at runtime (VLLM_ALLOW_RUNTIME_LORA_UPDATING), unknown adapter 404

@pytest.fixture(scope="module")
def async_engine(setup):
    from litevllm.async_llm import AsyncLLM, AsyncEngineArgs
    model, _, _ = setup
    eng = AsyncLLM.from_engine_args(AsyncEngineArgs(model=str(model), enable_lora=True, max_loras=2, **ENGINE))
    yield eng
    eng.shutdown()


def run(coro):
    import asyncio
    return asyncio.run(coro)


def test_server_lora(setup, async_engine, monkeypatch):
    import httpx
    from litevllm.server import build_app, LoRAModulePath
    model, lrs, ref = setup
    tok = async_engine.tokenizer
    monkeypatch.setenv("VLLM_ALLOW_RUNTIME_LORA_UPDATING", "true")
    app = build_app(async_engine, ["base"], lora_modules=[LoRAModulePath("qv", lrs["qv"].lora_path)])

    async def go():
        c = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test")
        cards = (await c.get("/v1/models")).json()["data"]
        assert [(m["id"], m["parent"]) for m in cards] == [("base", None), ("qv", "base")] and cards[1]["root"] == lrs["qv"].lora_path
        assert (await c.get("/v1/models/qv")).json()["parent"] == "base"
        body = dict(prompt=PROMPTS[0], max_tokens=MAX_TOKENS, temperature=0, ignore_eos=True, return_token_ids=True)
        async def ids(name):
            r = await c.post("/v1/completions", json=body | dict(model=name))
            assert r.status_code == 200, r.text
            return tok(r.json()["choices"][0]["text"], add_special_tokens=False).input_ids
        assert await ids("qv") == tok(tok.decode(ref["qv", PROMPTS[0]]), add_special_tokens=False).input_ids
        assert await ids("base") == tok(tok.decode(ref[None, PROMPTS[0]]), add_special_tokens=False).input_ids
        r = await c.post("/v1/completions", json=body | dict(model="mlp"))  # not loaded yet: vLLM's 404 naming it
        assert r.status_code == 404 and r.json()["error"]["type"] == "NotFoundError" and "`mlp` does not exist" in r.json()["error"]["message"]
        r = await c.post("/v1/load_lora_adapter", json=dict(lora_name="mlp", lora_path=lrs["mlp"].lora_path))
        assert r.status_code == 200 and r.text == "Success: LoRA adapter 'mlp' added successfully."
        assert "mlp" in [m["id"] for m in (await c.get("/v1/models")).json()["data"]]
        chat = await c.post("/v1/chat/completions", json=dict(model="mlp", messages=[{"role": "user", "content": "Hi"}], max_tokens=3))
        assert chat.status_code == 200 and chat.json()["model"] == "mlp"
        assert await ids("mlp") == tok(tok.decode(ref["mlp", PROMPTS[0]]), add_special_tokens=False).input_ids
        r = await c.post("/v1/load_lora_adapter", json=dict(lora_name="mlp", lora_path=lrs["mlp"].lora_path))
        assert r.status_code == 400 and "already been loaded" in r.json()["error"]["message"]
        r = await c.post("/v1/load_lora_adapter", json=dict(lora_name="gone", lora_path="/no/such/adapter"))
        assert r.status_code == 404 and r.json()["error"]["message"] == "Loading lora gone failed: No adapter found for /no/such/adapter"
        r = await c.post("/v1/unload_lora_adapter", json=dict(lora_name="mlp"))
        assert r.status_code == 200 and r.text == "Success: LoRA adapter 'mlp' removed successfully."
        assert (await c.post("/v1/completions", json=body | dict(model="mlp"))).status_code == 404
        r = await c.post("/v1/unload_lora_adapter", json=dict(lora_name="mlp"))
        assert r.status_code == 404 and r.json()["error"]["message"] == "The lora adapter 'mlp' cannot be found."
    run(go())

    monkeypatch.delenv("VLLM_ALLOW_RUNTIME_LORA_UPDATING")
    plain = build_app(async_engine, ["base"])
    async def refused():
        c = httpx.AsyncClient(transport=httpx.ASGITransport(app=plain), base_url="http://test")
        r = await c.post("/v1/load_lora_adapter", json=dict(lora_name="mlp", lora_path=lrs["mlp"].lora_path))
        assert r.status_code == 404  # no such route without VLLM_ALLOW_RUNTIME_LORA_UPDATING
        assert (await c.post("/v1/completions", json=dict(model="qv", prompt="x", max_tokens=1))).status_code == 404
    run(refused())
    with pytest.raises(VLLMValidationError): build_app(async_engine, ["base"], lora_modules=[LoRAModulePath("bad", "/nowhere")])


def test_triton_kernels_through_the_engine(setup, llm):
    "The CUDA path (kernels/lora.py's Triton SGMV kernels) in the whole engine; on a CPU interpreted (TRITON_INTERPRET=1): PEFT's tokens."
    _, lrs, ref = setup
    punica = llm.llm_engine.engine_core.model_runner.lora_manager.punica
    was, punica.use_triton = punica.use_triton, True
    try: outs = llm.generate(PROMPTS[:3], SamplingParams(temperature=0, max_tokens=4, ignore_eos=True),
                             lora_request=[lrs["qv"], None, lrs["rs"]], use_tqdm=False)
    finally: punica.use_triton = was
    assert [o.outputs[0].token_ids for o in outs] == [ref[n, p][:4] for n, p in zip(["qv", None, "rs"], PROMPTS[:3])]


def test_bench_lora_mix(setup, tmp_path, capsys):
    "`litevllm bench throughput --lora-mix N`: the base model's run, then the same workload over N adapters, and their ratio."
    import json
    from litevllm.cli import main
    model, _, _ = setup
    out = tmp_path / "b.json"
    assert main(["bench", "throughput", "--model", str(model), "--workload", "custom", "--num-requests", "6", "--input-len-range", "8", "24",
                 "--output-len-range", "4", "8", "--ttft-prompt-len", "0", "--kv-cache-memory-bytes", str(32 * 2**20), "--dtype", "float32",
                 "--lora-mix", "3", "--lora-rank", "8", "--lora-targets", "q_proj", "down_proj", "--output-json", str(out)]) == 0
    rows = json.loads(out.read_text())["results"]
    assert [r["engine"] for r in rows] == ["litevllm", "litevllm, 3 LoRAs"] and rows[0]["output_tokens"] == rows[1]["output_tokens"]
    assert rows[1]["lora_vs_base"] == pytest.approx(rows[1]["output_tok_s"] / rows[0]["output_tok_s"])
    assert "LoRA mix: 6 requests over 3 adapters" in capsys.readouterr().out


def test_adapters_with_speculative_decoding(setup):
    "A batch mixing base and adapters with n-gram speculation (drafts checked through each request's adapter): PEFT's tokens still."
    model, lrs, ref = setup
    llm = LLM(str(model), enable_lora=True, max_loras=3, speculative_config={"method": "ngram", "num_speculative_tokens": 3,
              "prompt_lookup_max": 2, "prompt_lookup_min": 1}, **ENGINE)
    names = [None, "qv", "rs", "mlp"]
    outs = llm.generate(PROMPTS, SP, lora_request=[lrs.get(n) for n in names], use_tqdm=False)
    assert [o.outputs[0].token_ids for o in outs] == [ref[n, p] for n, p in zip(names, PROMPTS)]
    no_leak(llm)


def test_through_the_engine_core_process(setup, monkeypatch):
    "The LoRARequest rides the EngineCoreRequest over the socket to an engine core in its own process (msgspec, no pickle); utilities too."
    model, lrs, ref = setup
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "1")
    mp = LLM(str(model), enable_lora=True, max_loras=2, **ENGINE)
    try:
        assert mp.llm_engine.engine_core.multiprocess
        assert mp.llm_engine.add_lora(lrs["rs"]) is True and mp.llm_engine.list_loras() == {2}
        names = [None, "qv", "mlp"]
        outs = mp.generate([PROMPTS[1]] * 3, SP, lora_request=[lrs[n] if n else None for n in names], use_tqdm=False)
        assert [o.outputs[0].token_ids for o in outs] == [ref[n, PROMPTS[1]] for n in names]
        assert mp.llm_engine.remove_lora(1) is True and mp.llm_engine.list_loras() == {3}  # max_cpu_loras = 2: rs was evicted first
    finally: mp.llm_engine.shutdown()
