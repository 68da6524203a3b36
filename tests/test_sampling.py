"Sampling at vLLM parity: SamplingParams validation, every sampler transform against a direct computation, seeds, logprobs."
import math, random
import numpy as np, pytest, torch
from scipy import stats
from litevllm import LLM, SamplingParams
from litevllm.config import EngineArgs
from litevllm.inputs import InputProcessor, get_tokenizer
from litevllm.exceptions import VLLMValidationError
from litevllm.sampler import Sampler, make_sampling_metadata, apply_top_k_top_p, apply_min_p, gather_logprobs

ENGINE_IN_PROCESS = True  # these tests look inside the engine core (conftest: VLLM_ENABLE_V1_MULTIPROCESSING=0)


V = 40
NEG = float("-inf")


# ---------------------------------------------------------------- SamplingParams validation

@pytest.mark.parametrize("kwargs,field", [
    (dict(temperature=-0.1), "temperature"), (dict(temperature=float("nan")), "temperature"),
    (dict(top_p=0.0), "top_p"), (dict(top_p=1.01), "top_p"), (dict(top_p=-0.5), "top_p"),
    (dict(top_k=-2), "top_k"), (dict(n=0), "n"), (dict(n=-3), "n"), (dict(min_p=-0.1), "min_p"), (dict(min_p=1.5), "min_p"),
    (dict(presence_penalty=2.5), "presence_penalty"), (dict(frequency_penalty=-3), "frequency_penalty"),
    (dict(repetition_penalty=0.0), "repetition_penalty"), (dict(max_tokens=0), "max_tokens"), (dict(min_tokens=-1), "min_tokens"),
    (dict(min_tokens=4, max_tokens=3), "min_tokens"), (dict(logprobs=-2), "logprobs"), (dict(prompt_logprobs=-2), "prompt_logprobs"),
    (dict(stop=""), "stop"), (dict(stop=["ok", ""]), "stop"), (dict(stop=["x"], detokenize=False), "stop"),
    (dict(stop_token_ids=["x"]), "stop_token_ids"), (dict(bad_words=[""]), "bad_words"), (dict(allowed_token_ids=[]), "allowed_token_ids"),
    (dict(n=2, temperature=0), "n"),
])
def test_bad_values_raise_naming_the_field(kwargs, field):
    with pytest.raises(VLLMValidationError, match=field) as ei: SamplingParams(**kwargs)
    assert str(ei.value).startswith(field)  # vLLM 0.32's words, which name the field first
    # vLLM 0.32 sets `parameter` (the 400's `param`) only for these; the others' param is null, in vLLM and here
    assert ei.value.parameter == (field if field in ("temperature", "top_p", "max_tokens", "logprobs", "prompt_logprobs", "allowed_token_ids") else None)


def test_params_normalisation():
    p = SamplingParams(temperature=0, top_k=7, top_p=0.3, min_p=0.2)
    assert (p.top_k, p.top_p, p.min_p, p.sampling_type) == (0, 1.0, 0.0, "greedy")
    assert SamplingParams(top_k=-1).top_k == -1 and SamplingParams(seed=-1).seed is None  # vLLM keeps -1 (off, as 0)
    assert SamplingParams(temperature=1e-3).temperature == 0.01          # vLLM's floor for a non-zero temperature
    assert SamplingParams(stop="\n").stop == ["\n"]
    assert SamplingParams(stop=["ab", "abcde"]).output_text_buffer_length == 4


@pytest.fixture(scope="module")
def input_processor():
    cfg = EngineArgs(max_model_len=512).create_engine_config()
    return InputProcessor(cfg, get_tokenizer(cfg.model_path))


@pytest.mark.parametrize("field", ["logprobs", "prompt_logprobs"])
def test_logprobs_above_max_logprobs_raise(input_processor, field):
    input_processor.process_inputs("a", "hi", SamplingParams(**{field: 20}))  # the limit itself is fine
    with pytest.raises(ValueError, match=field): input_processor.process_inputs("b", "hi", SamplingParams(**{field: 21}))


# ---------------------------------------------------------------- the transforms against a direct computation

def md_for(params, outs=None, prompts=None, gens=None, eos=1):
    outs = outs if outs is not None else [[] for _ in params]
    prompts = prompts if prompts is not None else [[0] for _ in params]
    return make_sampling_metadata(params, prompts, outs, gens or {}, V, [eos] * len(params))


def reference_processed(logits, params, prompts, outs, bad_words, eos):
    "vLLM's logits processors in order, one request and one token at a time in plain Python."
    res = logits.clone()
    for b, p in enumerate(params):
        row, out = res[b].tolist(), outs[b]
        if p.allowed_token_ids: row = [x if t in p.allowed_token_ids else NEG for t, x in enumerate(row)]
        for w in bad_words.get(b, []):
            if out[len(out) - (len(w) - 1):] == w[:-1] or len(w) == 1: row[w[-1]] = NEG
        if len(out) < p.min_tokens:
            for t in set(p.stop_token_ids) | {eos}: row[t] = NEG
        for t, v in (p.logit_bias or {}).items(): row[t] += v
        for t in range(V):
            if t in prompts[b] or t in out:
                row[t] = row[t] / p.repetition_penalty if row[t] > 0 else row[t] * p.repetition_penalty
            row[t] -= p.frequency_penalty * out.count(t) + p.presence_penalty * (t in out)
        res[b] = torch.tensor(row)
    return res


def test_logits_processors_match_direct_computation():
    torch.manual_seed(0); rnd = random.Random(0)
    B = 6
    logits = torch.randn(B, V) * 3
    params = [SamplingParams(temperature=0.8, repetition_penalty=1.3, frequency_penalty=0.4, presence_penalty=0.7),
              SamplingParams(temperature=0, repetition_penalty=0.7, presence_penalty=-0.5),
              SamplingParams(temperature=1, allowed_token_ids=[3, 5, 8, 13], frequency_penalty=1.0),
              SamplingParams(temperature=1, min_tokens=5, stop_token_ids=[7, 9], logit_bias={2: 5.0, 9: 1.0}),
              SamplingParams(temperature=1, min_tokens=2, ignore_eos=True),   # EOS still masked below min_tokens (vLLM)
              SamplingParams(temperature=0.5)]
    bad = {5: [[4], [11, 12], [20, 21, 22]]}
    params[5]._bad_words_token_ids = bad[5]
    prompts = [[rnd.randrange(V) for _ in range(rnd.randrange(1, 9))] for _ in range(B)]
    outs = [[rnd.randrange(V) for _ in range(rnd.randrange(0, 7))] for _ in range(B)]
    outs[3], outs[4] = outs[3][:3], outs[4][:1]  # below their min_tokens
    outs[5] = [3, 20, 21]  # ends with the prefix of the third bad word, not of the second
    got = Sampler().apply_logits_processors(logits, md_for(params, outs, prompts))
    want = reference_processed(logits, params, prompts, outs, bad, eos=1)
    torch.testing.assert_close(got, want)
    assert got[5, 22] == NEG and got[5, 4] == NEG and got[5, 12] != NEG
    assert got[4, 1] == NEG and got[3, 7] == NEG and got[3, 1] == NEG


def test_greedy_is_argmax_of_processed_logits():
    torch.manual_seed(1)
    logits = torch.randn(3, V)
    params = [SamplingParams(temperature=0, repetition_penalty=2.0), SamplingParams(temperature=0, logit_bias={5: 50.0}),
              SamplingParams(temperature=0.7, top_k=1)]
    outs = [[int(logits[0].argmax())], [], []]
    md = md_for(params, outs)
    processed = Sampler().apply_logits_processors(logits, md)
    got = Sampler(torch.Generator().manual_seed(0))(logits, md).sampled_token_ids
    assert got.tolist() == processed.argmax(-1).tolist() and got[1] == 5


def ref_keep(row, k, p, min_p=0.0):
    "The token ids min-p, then top-k, then top-p keep: sort-based, written independently of the sampler."
    probs = row.double().softmax(-1).tolist()
    top = max(probs)
    cand = [i for i in range(len(probs)) if probs[i] >= min_p * top]
    if min_p > 0:  # min-p works on logits: the survivors are renormalised before top-k / top-p
        z = sum(probs[i] for i in cand); probs = [q / z if i in cand else 0.0 for i, q in enumerate(probs)]
    order = sorted(cand, key=lambda i: -probs[i])[:k]
    mass, kept, c = sum(probs[i] for i in order), [], 0.0
    for i in order:
        kept.append(i); c += probs[i] / mass
        if c >= p - 1e-9: break
    return sorted(kept)


def test_top_k_top_p_min_p_masks_match_sort_reference():
    torch.manual_seed(2)
    B = 32
    logits = torch.randn(B, V) * 2
    ks = torch.randint(1, V + 1, (B,)); ks[::4] = V
    ps = torch.rand(B) * 0.9 + 0.1; ps[1::4] = 1.0
    mps = torch.rand(B) * 0.3; mps[2::4] = 0.0
    got = apply_top_k_top_p(apply_min_p(logits, mps), ks, ps)
    for b in range(B):
        assert torch.isfinite(got[b]).nonzero().flatten().tolist() == ref_keep(logits[b], int(ks[b]), float(ps[b]), float(mps[b])), b
    kept = torch.isfinite(got)
    assert torch.equal(got[kept], logits[kept])  # survivors keep their logits


def test_sampling_matches_target_distribution():
    "Chi-square over 30,000 draws: temperature 0.6 with top-k 5, top-p 0.85 and min-p 0.05 on an 8-token vocabulary."
    logits = torch.tensor([1.0, 2.2, 0.3, 1.7, -0.5, 0.9, 2.0, -2.0])
    p = SamplingParams(temperature=0.6, top_k=5, top_p=0.85, min_p=0.05)
    N = 30000
    md = make_sampling_metadata([p] * N, [[0]] * N, [[] for _ in range(N)], {}, 8, [None] * N)
    draws = Sampler(torch.Generator().manual_seed(1))(logits.expand(N, 8).clone(), md).sampled_token_ids
    counts = np.bincount(draws.numpy(), minlength=8)
    kept = ref_keep(logits / 0.6, 5, 0.85, 0.05)
    assert set(np.nonzero(counts)[0].tolist()) == set(kept)
    target = (logits / 0.6).double().softmax(-1)[kept]
    chi = stats.chisquare(counts[kept], (target / target.sum() * N).numpy())
    assert chi.pvalue > 1e-3, chi


def test_seeded_rows_ignore_the_rest_of_the_batch():
    "A row with a seed draws the same tokens, step after step, alone or among other rows (seeded or not)."
    torch.manual_seed(3)
    logits = torch.randn(5, V)
    def run(rows, pos):
        gens = {i: torch.Generator().manual_seed(100 + r) for i, r in enumerate(rows) if r % 2 == 0}
        params = [SamplingParams(temperature=1.0, seed=100 + r if r % 2 == 0 else None) for r in rows]
        s, toks = Sampler(torch.Generator().manual_seed(len(rows))), []
        for _ in range(20): toks.append(s(logits[rows], md_for(params, gens=gens)).sampled_token_ids[pos].item())
        return toks
    alone = run([2], 0)
    assert run([0, 1, 2, 3, 4], 2) == alone and run([4, 2], 1) == alone and run([3, 1, 0, 2], 3) == alone
    assert len(set(alone)) > 1


def test_unseeded_rows_use_the_engine_generator():
    logits = torch.randn(4, V)
    md = md_for([SamplingParams(temperature=1.0)] * 4)
    draws = lambda: [Sampler(torch.Generator().manual_seed(9))(logits, md).sampled_token_ids.tolist() for _ in range(1)]
    assert draws() == draws()


def test_logprobs_are_raw_with_vllm_ranks():
    "Logprobs of the raw logits whatever the transforms; sampled token first; rank = tokens at least as likely."
    torch.manual_seed(4)
    logits = torch.randn(3, V)
    params = [SamplingParams(temperature=0.5, top_k=3, logprobs=4, repetition_penalty=1.5),
              SamplingParams(temperature=0, logit_bias={7: 30.0}, logprobs=0), SamplingParams(temperature=1.0)]
    out = Sampler(torch.Generator().manual_seed(0))(logits, md_for(params, outs=[[1, 2], [], []]))
    lp = out.logprobs_tensors
    raw = logits.double().log_softmax(-1)
    for b in range(3):
        tok = int(out.sampled_token_ids[b])
        assert lp.logprob_token_ids[b, 0] == tok
        assert math.isclose(lp.logprobs[b, 0], raw[b, tok], abs_tol=1e-5)
        assert lp.selected_token_ranks[b] == int((raw[b] >= raw[b, tok]).sum())
        top = raw[b].argsort(descending=True)[:4].tolist()
        assert lp.logprob_token_ids[b, 1:].tolist() == top
    assert out.sampled_token_ids[1] == 7 and lp.selected_token_ranks[1] > 1  # biased to 7, ranked by the raw model
    assert gather_logprobs(torch.tensor([[-1.0, -1.0, -3.0]]), 1, torch.tensor([0])).selected_token_ranks.item() == 2


# ---------------------------------------------------------------- end to end with the default model

@pytest.fixture(scope="module")
def llm():
    return LLM(max_model_len=512, seed=0, kv_cache_memory_bytes=64 * 2**20, dtype="float32")  # compared with transformers in float32


@pytest.fixture(scope="module")
def hf_model(hf_default_model): return hf_default_model  # conftest's: loaded once per session


def test_logprobs_and_prompt_logprobs_match_transformers(llm, hf_model, monkeypatch):
    tok = llm.get_tokenizer()
    prompt = "The capital of France is"
    params = SamplingParams(temperature=0, max_tokens=8, logprobs=3, prompt_logprobs=2)
    out = llm.generate(prompt, params, use_tqdm=False)[0]
    c = out.outputs[0]
    ids = out.prompt_token_ids + c.token_ids
    with torch.no_grad(): ref = hf_model(torch.tensor([ids])).logits[0].double().log_softmax(-1)  # (tokens, vocab)
    P = len(out.prompt_token_ids)
    assert len(c.logprobs) == len(c.token_ids) == 8
    for i, (t, d) in enumerate(zip(c.token_ids, c.logprobs)):
        row = ref[P - 1 + i]
        top = row.argsort(descending=True)[:3].tolist()
        assert next(iter(d)) == t and set(d) == {t, *top}
        for tid, lp in d.items():
            assert abs(lp.logprob - row[tid].item()) < 2e-3
            assert lp.decoded_token == tok.decode([tid])
        assert d[t].rank == int((row > row[t] + 1e-4).sum()) + 1
        assert [d[x].rank for x in top] == [1, 2, 3]
    assert math.isclose(c.cumulative_logprob, sum(d[t].logprob for t, d in zip(c.token_ids, c.logprobs)), rel_tol=1e-6)
    plp = out.prompt_logprobs
    assert plp[0] is None and len(plp) == P
    for j in range(1, P):
        row, t, d = ref[j - 1], out.prompt_token_ids[j], plp[j]
        top = row.argsort(descending=True)[:2].tolist()
        assert next(iter(d)) == t and set(d) == {t, *top}
        assert abs(d[t].logprob - row[t].item()) < 2e-3 and d[t].rank == int((row > row[t] + 1e-4).sum()) + 1
        assert d[t].decoded_token == tok.decode([t])
    # the same prompt in chunks of 2 tokens (chunked prefill) gives the same prompt logprobs
    monkeypatch.setattr(llm.llm_engine.engine_core.scheduler, "max_num_batched_tokens", 2)
    chunked = llm.generate(prompt, SamplingParams(temperature=0, max_tokens=1, prompt_logprobs=2), use_tqdm=False)[0]
    assert len(chunked.prompt_logprobs) == P
    for a, b in zip(plp[1:], chunked.prompt_logprobs[1:]):
        assert list(a) == list(b)
        for t in a: assert abs(a[t].logprob - b[t].logprob) < 1e-4 and a[t].rank == b[t].rank


def test_seed_end_to_end(llm):
    p = "Once upon a time"
    sp = SamplingParams(temperature=1.0, seed=123, max_tokens=10)
    others = ["Hello", "def f(x):", "1, 2, 3,", "The weather today", "Paris is"]
    alone = llm.generate(p, sp, use_tqdm=False)[0].outputs[0]
    mixed = llm.generate(others[:2] + [p] + others[2:], [SamplingParams(temperature=1.0, max_tokens=12)] * 2 + [sp] +
                         [SamplingParams(temperature=0.8, seed=7, max_tokens=6)] * 3, use_tqdm=False)[2].outputs[0]
    assert (mixed.token_ids, mixed.text) == (alone.token_ids, alone.text)
    # n=2 with a seed: two different completions (seeds 123, 124), the same pair every time
    two = llm.generate(p, SamplingParams(temperature=1.0, seed=123, max_tokens=10, n=2), use_tqdm=False)[0].outputs
    assert [c.index for c in two] == [0, 1] and two[0].token_ids == alone.token_ids and two[0].token_ids != two[1].token_ids
    again = llm.generate(p, SamplingParams(temperature=1.0, seed=123, max_tokens=10, n=2), use_tqdm=False)[0].outputs
    assert [c.token_ids for c in again] == [c.token_ids for c in two]
    # no seed: the engine's generator (LLM(seed=...)), so re-seeding it replays the same text
    gen = llm.llm_engine.engine_core.model_runner.sampler.generator
    assert gen.initial_seed() == 0
    unseeded = SamplingParams(temperature=1.0, max_tokens=10)
    gen.manual_seed(5); a = llm.generate(p, unseeded, use_tqdm=False)[0].outputs[0].token_ids
    gen.manual_seed(5); b = llm.generate(p, unseeded, use_tqdm=False)[0].outputs[0].token_ids
    assert a == b


def test_prompt_logprobs_sent_once_across_a_preemption(llm):
    "A request recomputed after a preemption neither loses nor repeats its prompt logprobs, nor changes its tokens."
    engine, prompt = llm.llm_engine, "The quick brown fox jumps over"
    sp = SamplingParams(temperature=0, max_tokens=6, prompt_logprobs=1)
    ref = llm.generate(prompt, sp, use_tqdm=False)[0]
    engine.add_request("pre", prompt, sp)
    outs = []
    for step in range(50):
        outs += engine.step()
        if step == 1: engine.engine_core.scheduler._preempt(0)  # recompute from scratch
        if not engine.has_unfinished_requests(): break
    assert engine.get_stats().num_preemptions >= 1
    final = outs[-1]
    assert final.finished and final.outputs[0].token_ids == ref.outputs[0].token_ids
    assert len(final.prompt_logprobs) == len(ref.prompt_logprobs) == len(ref.prompt_token_ids)
    for a, b in zip(final.prompt_logprobs[1:], ref.prompt_logprobs[1:]):
        assert list(a) == list(b) and all(abs(a[t].logprob - b[t].logprob) < 1e-4 for t in a)
