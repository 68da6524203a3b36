"Speculative decoding end to end: greedy output is exactly the output without it (ngram, draft model), sampled output keeps the model's distribution, stops and aborts mid-run, no KV leaks, no block hashed from a rejected draft."
import json, shutil
import numpy as np, pytest, torch
from litevllm import LLM, SamplingParams
from litevllm.config import default_model_path
from litevllm.exceptions import VLLMValidationError

ENGINE_IN_PROCESS = True  # the tests look inside the engine (scheduler, block pool)
KW = dict(kv_cache_memory_bytes=256 * 2**20, dtype="float32", max_model_len=1024, seed=0)
NGRAM = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 1}
PROMPTS = ["Repeat exactly: the quick brown fox jumps over the lazy dog. the quick brown fox",
           "def add(a, b):\n    return a + b\n\n# the same function, renamed to plus\ndef plus(a, b):",
           "The capital of France is",
           "Colors: red, green, blue, red, green, blue, red, green,"]
GREEDY = SamplingParams(temperature=0, max_tokens=32)


def core_of(llm): return llm.llm_engine.engine_core.engine_core  # the InprocClient's EngineCore


class DraftCounter:
    "Counts the drafts the scheduler verifies (wraps its `_observe_drafts`): drafted and accepted tokens, and steps with drafts."
    def __init__(self, llm):
        self.sched, self.drafts, self.drafted, self.accepted = core_of(llm).scheduler, 0, 0, 0
        orig = type(self.sched)._observe_drafts
        def observe(request, num_draft, num_accepted):
            self.drafts += 1; self.drafted += num_draft; self.accepted += num_accepted
            orig(self.sched, request, num_draft, num_accepted)
        self.sched._observe_drafts = observe
    def __enter__(self): return self
    def __exit__(self, *a): del self.sched._observe_drafts


def assert_no_leak(llm):
    pool = core_of(llm).scheduler.kv_cache_manager.block_pool
    assert pool.get_num_free_blocks() == pool.num_blocks


@pytest.fixture(scope="module")
def base():
    llm = LLM(**KW); yield llm; llm.llm_engine.engine_core.shutdown()


@pytest.fixture(scope="module")
def ngram():
    llm = LLM(speculative_config=NGRAM, **KW); yield llm; llm.llm_engine.engine_core.shutdown()


@pytest.fixture(scope="module")
def reference(base):
    return [o.outputs[0].token_ids for o in base.generate(PROMPTS, GREEDY, use_tqdm=False)]


def test_ngram_greedy_is_exact(ngram, reference):
    with DraftCounter(ngram) as c: outs = ngram.generate(PROMPTS, GREEDY, use_tqdm=False)
    assert [o.outputs[0].token_ids for o in outs] == reference
    assert c.drafts > 0 and 0 < c.accepted < c.drafted  # drafts were checked; some accepted, some not
    assert_no_leak(ngram)


def test_ngram_chunked_prefill_prefix_hits_and_preemption(reference):
    # a 24-token budget chunks the prompts; 10 blocks of 16 tokens for 4 requests of ~55 tokens force preemptions; the second
    # round hits the prefix cache
    llm = LLM(speculative_config=NGRAM, max_num_batched_tokens=24, num_gpu_blocks_override=10, **{**KW, "max_model_len": 128})
    sched = core_of(llm).scheduler
    cached = []
    for _ in range(2):
        outs = llm.generate(PROMPTS, GREEDY, use_tqdm=False)
        assert [o.outputs[0].token_ids for o in outs] == reference
        cached.append(sum(o.num_cached_tokens for o in outs))
    assert sched.num_preemptions > 0 and cached[1] > 0
    assert_no_leak(llm)
    # every cached block holds known tokens of a request at its own place: none was hashed from a rejected draft
    seqs = [p + o.outputs[0].token_ids for p, o in zip([llm.get_tokenizer()(x).input_ids for x in PROMPTS], llm.generate(PROMPTS, GREEDY, use_tqdm=False))]
    bs = sched.block_size
    cached = list(sched.kv_cache_manager.block_pool.cached_block_hash_to_block)
    assert cached
    for h in cached:
        assert any(tuple(s[i * bs:(i + 1) * bs]) == tuple(h.token_ids) for s in seqs for i in range(len(s) // bs)), h
    llm.llm_engine.engine_core.shutdown()


def test_target_as_its_own_draft_accepts_every_draft(reference):
    llm = LLM(speculative_config={"model": str(default_model_path()), "num_speculative_tokens": 3}, **KW)
    with DraftCounter(llm) as c: outs = llm.generate(PROMPTS, GREEDY, use_tqdm=False)
    assert [o.outputs[0].token_ids for o in outs] == reference
    assert c.drafted > 0 and c.accepted == c.drafted  # the model agrees with itself: every draft accepted (3 + 1 tokens a step)
    assert_no_leak(llm)
    llm.llm_engine.engine_core.shutdown()


@pytest.fixture(scope="module")
def tiny_draft(tmp_path_factory):
    "A random 2-layer model with the default model's tokenizer and vocabulary: its drafts are mostly wrong."
    from transformers import LlamaConfig, LlamaForCausalLM
    src = default_model_path()
    cfg = json.loads((src/"config.json").read_text())
    cfg.update(num_hidden_layers=2, hidden_size=128, intermediate_size=256, num_attention_heads=2, num_key_value_heads=1, head_dim=64)
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**{k: v for k, v in cfg.items() if k not in ("architectures", "model_type")}))
    out = tmp_path_factory.mktemp("tiny_draft")
    model.save_pretrained(out)
    for f in src.iterdir():
        if f.name.startswith(("tokenizer", "special_tokens", "vocab", "merges")): shutil.copy(f, out/f.name)
    return out


def test_random_draft_model_is_still_exact(tiny_draft, reference):
    llm = LLM(speculative_config={"method": "draft_model", "model": str(tiny_draft), "num_speculative_tokens": 3}, **KW)
    assert [o.outputs[0].token_ids for o in llm.generate(PROMPTS, GREEDY, use_tqdm=False)] == reference
    assert_no_leak(llm)
    llm.llm_engine.engine_core.shutdown()


def test_stops_inside_the_accepted_run(ngram, base):
    # stop strings, stop token ids and max_tokens land where they land without speculation, even inside a run of accepted drafts
    sps = [SamplingParams(temperature=0, max_tokens=40, stop=["lazy"]), SamplingParams(temperature=0, max_tokens=40, stop=["blue, red"]),
           SamplingParams(temperature=0, max_tokens=7), SamplingParams(temperature=0, max_tokens=40, stop_token_ids=[28]),
           SamplingParams(temperature=0, max_tokens=20, logprobs=2)]
    # every setting in one generate per engine (each prompt once per setting): one engine run instead of five, the same checks
    prompts, params = [p for _ in sps for p in PROMPTS], [sp for sp in sps for _ in PROMPTS]
    want, got = base.generate(prompts, params, use_tqdm=False), ngram.generate(prompts, params, use_tqdm=False)
    for sp, w, g in zip(params, want, got):
        assert (g.outputs[0].text, g.outputs[0].token_ids, g.outputs[0].finish_reason, g.outputs[0].stop_reason) == \
               (w.outputs[0].text, w.outputs[0].token_ids, w.outputs[0].finish_reason, w.outputs[0].stop_reason), sp
        if sp.logprobs:
            assert len(g.outputs[0].logprobs) == len(w.outputs[0].logprobs)
            for a, b in zip(g.outputs[0].logprobs, w.outputs[0].logprobs):
                assert a.keys() == b.keys() and all(abs(a[t].logprob - b[t].logprob) < 1e-3 for t in a)
    assert_no_leak(ngram)


def test_abort_mid_run(ngram):
    eng = ngram.llm_engine
    eng.add_request("a", PROMPTS[0], SamplingParams(temperature=0, max_tokens=64))
    eng.add_request("b", PROMPTS[3], SamplingParams(temperature=0, max_tokens=64))
    for _ in range(4): eng.step()
    eng.abort_request(["a"])
    done = {}
    while eng.has_unfinished_requests():
        for o in eng.step():
            if o.finished: done[o.request_id] = o
    assert set(done) == {"b"} and len(done["b"].outputs[0].token_ids) == 64
    assert_no_leak(ngram)


def test_structured_output_with_drafts(ngram, base):
    from litevllm.sampling_params import StructuredOutputsParams
    schema = {"type": "object", "properties": {"colors": {"type": "array", "items": {"type": "string"}, "maxItems": 3}}, "required": ["colors"]}
    sp = SamplingParams(temperature=0, max_tokens=48, structured_outputs=StructuredOutputsParams(json=schema))
    prompt = ['Colors: "red", "green", "blue", "red", "green", "blue". As JSON: {"colors": ["red", "green", "blue", "red",']
    want, got = base.generate(prompt, sp, use_tqdm=False)[0].outputs[0], ngram.generate(prompt, sp, use_tqdm=False)[0].outputs[0]
    assert got.token_ids == want.token_ids
    json.loads(got.text)  # whole and valid
    assert_no_leak(ngram)


def test_sampled_distribution_is_the_models(ngram, base):
    "The 2nd-4th sampled tokens (drafts are checked there) follow the same distribution with and without speculation (chi-square)."
    from scipy.stats import chi2_contingency
    prompt = "one two three one two three one two three one two"
    N = 300
    sp = SamplingParams(temperature=1.0, max_tokens=4)
    with DraftCounter(ngram) as c:
        runs = [[tuple(o.outputs[0].token_ids[1:4]) for o in llm.generate([prompt] * N, sp, use_tqdm=False)] for llm in (base, ngram)]
    assert c.drafted > N and c.accepted > 0  # drafts were checked
    for pos in range(3):
        a, b = [np.array([t[pos] if len(t) > pos else -1 for t in r]) for r in runs]
        top = [v for v, c in zip(*np.unique(np.concatenate([a, b]), return_counts=True)) if c >= 10]
        table = np.array([[np.sum(x == v) for v in top] + [np.sum(~np.isin(x, top))] for x in (a, b)])
        table = table[:, table.sum(0) > 0]
        assert chi2_contingency(table).pvalue > 1e-3, (pos, table)


def test_refused_configs():
    for d, field in [({"method": "eagle", "num_speculative_tokens": 2}, "method"), ({"method": "ngram", "num_speculative_tokens": 0}, "num_speculative_tokens"),
                     ({"method": "draft_model", "model": "/no/such/model", "num_speculative_tokens": 2}, "model")]:
        with pytest.raises(VLLMValidationError) as e: LLM(speculative_config=d, **KW)
        assert e.value.parameter == f"speculative_config.{field}"


def test_refused_draft_with_another_vocabulary(tmp_path):
    cfg = json.loads((default_model_path()/"config.json").read_text())
    (tmp_path/"config.json").write_text(json.dumps({**cfg, "vocab_size": 32000}))
    with pytest.raises(VLLMValidationError, match="vocabulary") as e:
        LLM(speculative_config={"method": "draft_model", "model": str(tmp_path), "num_speculative_tokens": 2}, **KW)
    assert e.value.parameter == "speculative_config.model"
