"Outputs at vLLM parity: incremental detokenizing, stop strings, stop reasons, output kinds, n > 1, detokenize=False."
import random, time
import pytest, torch
from litevllm import LLM, SamplingParams
from litevllm.sampling_params import RequestOutputKind
from litevllm.config import default_model_path
from litevllm.inputs import EngineCoreRequest, get_tokenizer
from litevllm.request import FinishReason
from litevllm.scheduler import EngineCoreOutput
from litevllm.output_processor import IncrementalDetokenizer, OutputProcessor, check_stop_strings

ENGINE_IN_PROCESS = True  # these tests look inside the engine core (conftest: VLLM_ENABLE_V1_MULTIPROCESSING=0)


CUM, DELTA, FINAL = RequestOutputKind.CUMULATIVE, RequestOutputKind.DELTA, RequestOutputKind.FINAL_ONLY


@pytest.fixture(scope="module")
def tok(): return get_tokenizer(default_model_path())


# ---------------------------------------------------------------- incremental detokenizing

@pytest.mark.parametrize("skip", [True, False])
def test_streamed_text_equals_decode(tok, skip):
    "Pieces join to decode(all ids), for real text with multi-byte characters and for random ids; no piece holds U+FFFD."
    rnd = random.Random(0)
    texts = ["Héllo wörld, straße 🎉🎉 naïve — 日本語 ¿qué? Ωμέγα", "<|im_start|>a<|im_end|> b 🤖<|endoftext|>x"]
    seqs = [tok(t, add_special_tokens=False).input_ids for t in texts]
    seqs += [[rnd.randrange(len(tok)) for _ in range(40)] for _ in range(20)]
    prompt = tok("Say: ü").input_ids
    for ids in seqs:
        d, pieces = IncrementalDetokenizer(tok, prompt, skip_special_tokens=skip), []
        for t in ids:
            n = d.update([t]); pieces.append(d.output_text[len(d.output_text) - n:])
        assert d.output_text == "".join(pieces) == tok.decode(ids, skip_special_tokens=skip)
    for ids in seqs[:2]:  # real text: a character split over tokens never shows as U+FFFD, even half-way
        d = IncrementalDetokenizer(tok, prompt, skip_special_tokens=skip)
        for t in ids: d.update([t]); assert "\ufffd" not in d.output_text


def test_spaces_between_special_tokens(tok):
    "The byte-level default tokenizer never spaces special tokens: both settings give decode()'s text."
    ids = tok("<|im_start|><|im_end|>hi<|im_end|><|im_start|>", add_special_tokens=False).input_ids
    for spaces in (True, False):
        d = IncrementalDetokenizer(tok, [1], skip_special_tokens=False, spaces_between_special_tokens=spaces)
        d.update(ids)
        assert d.output_text == "<|im_start|><|im_end|>hi<|im_end|><|im_start|>" == tok.decode(ids, skip_special_tokens=False)


# ---------------------------------------------------------------- stop strings, fed token by token

def feed(tok, texts, params, fin=FinishReason.LENGTH, fin_stop_reason=None, prompt="Q:"):
    "Feed each text of `texts` as one step's tokens (the last step ends with `fin`); the outputs and ids to abort."
    op = OutputProcessor(tok)
    op.add_request(EngineCoreRequest("r", tok(prompt).input_ids, params, tok.eos_token_id, time.time()))
    outs, aborted = [], []
    for i, t in enumerate(texts):
        ids = t if isinstance(t, list) else tok(t, add_special_tokens=False).input_ids
        last = i == len(texts) - 1
        r = op.process_outputs([EngineCoreOutput("r", ids, fin if last else None, fin_stop_reason if last else None)])
        outs += r.request_outputs; aborted += r.reqs_to_abort
        if not op.has_unfinished_requests(): break
    return outs, aborted


def words(tok, text): return [tok.decode([t]) for t in tok(text, add_special_tokens=False).input_ids]


def test_check_stop_strings_rules():
    assert check_stop_strings("abc", 1, ["ab"], False) is None                    # not in the new text (nor the overlap)
    assert check_stop_strings("abcd", 2, ["bc"], False) == ("bc", 1)              # the overlap finds a stop split over steps
    assert check_stop_strings("xxABCD", 4, ["CD", "AB"], False) == ("AB", 2)      # earliest-completing wins
    assert check_stop_strings("xxABCD", 4, ["BC", "ABC"], False) == ("BC", 3)     # same end: the earlier in the list
    assert check_stop_strings("xxABCD", 4, ["ABC", "BC"], False) == ("ABC", 2)
    assert check_stop_strings("xxABCD", 4, ["BC"], True) == ("BC", 5)             # kept, cut after it
    assert check_stop_strings("xxABCD", 4, ["CD"], True) == ("CD", -1)


def test_stop_string_spanning_tokens_and_held_back(tok):
    text = "Hello there, General Kenobi. You are a bold one."
    outs, ab = feed(tok, words(tok, text), SamplingParams(stop=["General Kenobi"], output_kind=DELTA))
    deltas = [o.outputs[0].text for o in outs]
    assert "".join(deltas) == "Hello there, " and ab == ["r"]
    c = outs[-1].outputs[0]
    assert (c.finish_reason, c.stop_reason, outs[-1].finished) == ("stop", "General Kenobi", True)
    sent = ""
    for d in deltas:  # never half a stop string: nothing sent ever ends with a prefix of it
        sent += d
        assert not any(sent.endswith("General Kenobi"[:k]) for k in range(1, 14)) or d == ""
    # tokens past the stop are dropped: the output ends with the token that completed it
    ids = tok(text, add_special_tokens=False).input_ids
    assert sum(len(o.outputs[0].token_ids) for o in outs) == len(tok("Hello there, General Kenobi", add_special_tokens=False).input_ids)
    assert [t for o in outs for t in o.outputs[0].token_ids] == ids[:len([t for o in outs for t in o.outputs[0].token_ids])]


def test_stop_string_ending_inside_a_token(tok):
    outs, _ = feed(tok, words(tok, "The answer is 42. Done"), SamplingParams(stop=["4"]))
    assert outs[-1].outputs[0].text == "The answer is " and outs[-1].outputs[0].stop_reason == "4"
    outs, _ = feed(tok, words(tok, "The answer is 42. Done"), SamplingParams(stop=["4"], include_stop_str_in_output=True))
    assert outs[-1].outputs[0].text == "The answer is 4"


def test_stop_string_inside_min_tokens_is_ignored(tok):
    ws = words(tok, "stop here and stop again")
    assert ws[0] == "stop"
    outs, _ = feed(tok, ws, SamplingParams(stop=["stop"], min_tokens=1))
    assert outs[-1].outputs[0].text == "stop here and " and outs[-1].outputs[0].stop_reason == "stop"
    outs, _ = feed(tok, ws, SamplingParams(stop=["stop"], min_tokens=0))
    assert outs[-1].outputs[0].text == ""


def test_two_stops_in_the_same_step(tok):
    outs, ab = feed(tok, ["wx", "yz tail", " more"], SamplingParams(stop=["z t", "xy"]))
    assert (outs[-1].outputs[0].text, outs[-1].outputs[0].stop_reason, ab) == ("w", "xy", ["r"])
    outs, _ = feed(tok, ["wxyz"], SamplingParams(stop=["yz", "xyz"]))      # same end: list order
    assert (outs[-1].outputs[0].text, outs[-1].outputs[0].stop_reason) == ("wx", "yz")


def test_stop_string_with_eos_in_the_same_step(tok):
    ids = tok("Hi there", add_special_tokens=False).input_ids
    outs, ab = feed(tok, [ids + [tok.eos_token_id]], SamplingParams(stop=[" there"], skip_special_tokens=False), fin=FinishReason.STOP)
    c = outs[-1].outputs[0]
    # the EOS after the token that completed the stop string is dropped, as vLLM 0.32's `_trim_surplus_tokens` does
    assert (c.text, c.token_ids, c.finish_reason, c.stop_reason, ab) == ("Hi", ids, "stop", " there", [])


def test_stop_reasons_and_special_tokens(tok):
    ids = tok("Hi there", add_special_tokens=False).input_ids
    eos = tok.eos_token_id
    # EOS: stop_reason None, its text not in the output even with skip_special_tokens=False (vLLM drops the stop token's text)
    for skip in (True, False):
        c = feed(tok, [ids, [eos]], SamplingParams(skip_special_tokens=skip), fin=FinishReason.STOP)[0][-1].outputs[0]
        assert (c.text, c.token_ids[-1], c.finish_reason, c.stop_reason) == ("Hi there", eos, "stop", None)
    c = feed(tok, [ids, [eos]], SamplingParams(skip_special_tokens=False, include_stop_str_in_output=True), fin=FinishReason.STOP)[0][-1].outputs[0]
    assert c.text == "Hi there<|im_end|>"
    # special tokens generated along the way are shown with skip_special_tokens=False
    mid = tok("<|im_start|>", add_special_tokens=False).input_ids
    c = feed(tok, [ids, mid, [eos]], SamplingParams(skip_special_tokens=False), fin=FinishReason.STOP)[0][-1].outputs[0]
    assert c.text == "Hi there<|im_start|>"
    # a stop token id: stop_reason the id, token kept in token_ids but not in the text
    stop_id = tok(".", add_special_tokens=False).input_ids[0]
    c = feed(tok, [ids, [stop_id]], SamplingParams(stop_token_ids=[stop_id]), fin=FinishReason.STOP, fin_stop_reason=stop_id)[0][-1].outputs[0]
    assert (c.text, c.token_ids[-1], c.stop_reason) == ("Hi there", stop_id, stop_id)
    c = feed(tok, [ids], SamplingParams(), fin=FinishReason.LENGTH)[0][-1].outputs[0]
    assert (c.finish_reason, c.stop_reason) == ("length", None)


def test_detokenize_false(tok):
    ids = tok("Hi there", add_special_tokens=False).input_ids
    outs, _ = feed(tok, [ids[:1], ids[1:]], SamplingParams(detokenize=False))
    c = outs[-1].outputs[0]
    assert (c.text, c.token_ids) == ("", ids)


# ---------------------------------------------------------------- the engine with the default model

@pytest.fixture(scope="module")
def llm(): return LLM(max_model_len=512, seed=0, kv_cache_memory_bytes=64 * 2**20)


def run_engine(engine, requests):
    "Add (id, prompt, params) requests, step to the end; every RequestOutput per request id, in order."
    for rid, prompt, params in requests: engine.add_request(rid, prompt, params)
    seen = {rid: [] for rid, _, _ in requests}
    while engine.has_unfinished_requests():
        for o in engine.step(): seen[o.request_id].append(o)
    return seen


def join_deltas(outs):
    "Per completion index: text, token ids and logprobs joined over DELTA outputs, and the final finish/stop reasons."
    res = {}
    for o in outs:
        for c in o.outputs:
            r = res.setdefault(c.index, dict(text="", token_ids=[], logprobs=[], finish_reason=None, stop_reason=None))
            r["text"] += c.text; r["token_ids"] += c.token_ids; r["logprobs"] += c.logprobs or []
            if c.finish_reason: r["finish_reason"], r["stop_reason"] = c.finish_reason, c.stop_reason
    return res


def test_delta_equals_cumulative_with_stops_and_n2(llm):
    "The same seeded batch (stop strings, n=2, logprobs) in CUMULATIVE, DELTA and FINAL_ONLY: the same completions."
    engine = llm.llm_engine
    prompts = {"a": "Write a short list of fruits:", "b": "The capital of France is", "c": "Once upon a time"}
    def params(kind, rid):
        base = dict(temperature=0.9, max_tokens=24, logprobs=2, output_kind=kind, seed=11)
        return SamplingParams(**base, **{"a": dict(stop=["\n\n", "an"]), "b": dict(n=2, stop=["."]), "c": dict(n=2, stop=[" the"])}[rid])
    results = {}
    for kind in (CUM, DELTA, FINAL):  # each run from an empty prefix cache: the three compute exactly the same thing
        llm.reset_prefix_cache()
        results[kind] = run_engine(engine, [(f"{kind.name}-{r}", p, params(kind, r)) for r, p in prompts.items()])
    for r in prompts:
        cum, delta, final = (results[k][f"{k.name}-{r}"] for k in (CUM, DELTA, FINAL))
        assert len(final) == 1 and final[0].finished and all(not o.finished for o in cum[:-1]) and cum[-1].finished
        n = len(final[0].outputs)
        assert n == (2 if r != "a" else 1) and [c.index for c in final[0].outputs] == list(range(n))
        joined = join_deltas(delta)
        last_cum = {}
        for o in cum:
            assert [c.index for c in o.outputs] == sorted(c.index for c in o.outputs)
            for c in o.outputs: last_cum[c.index] = c
        for c in final[0].outputs:
            j = joined[c.index]
            assert (j["text"], j["token_ids"], j["finish_reason"], j["stop_reason"]) == (c.text, c.token_ids, c.finish_reason, c.stop_reason)
            assert j["logprobs"] == c.logprobs and len(c.logprobs) == len(c.token_ids)
            lc = last_cum[c.index]
            assert (lc.text, lc.token_ids, lc.stop_reason) == (c.text, c.token_ids, c.stop_reason)
            if c.finish_reason == "stop" and c.stop_reason is not None: assert all(s not in c.text for s in params(CUM, r).stop)
        # the streamed text never showed a stop string, not even in part at its end while running
        for o in cum[:-1]:
            for c in o.outputs: assert not any(s in c.text for s in params(CUM, r).stop)
    pool = engine.engine_core.scheduler.kv_cache_manager.block_pool
    assert pool.get_num_free_blocks() == pool.num_blocks


def test_n_children_share_the_prompt_blocks(llm):
    llm.reset_prefix_cache()
    engine = llm.llm_engine
    engine.get_stats()  # reset the prefix-cache counters
    prompt = "Here is a long prompt that fills more than one block of sixteen tokens, so the children can share it: go"
    out = llm.generate(prompt, SamplingParams(temperature=1.0, n=3, max_tokens=4, seed=3), use_tqdm=False)
    assert len(out) == 1 and [c.index for c in out[0].outputs] == [0, 1, 2]
    assert len({tuple(c.token_ids) for c in out[0].outputs}) > 1
    stats = engine.get_stats().prefix_cache_stats
    bs = engine.vllm_config.block_size
    assert stats.hits >= 2 * ((len(out[0].prompt_token_ids) - 1) // bs) * bs > 0  # children 1 and 2 hit child 0's blocks


def test_lengths(llm):
    tok = llm.get_tokenizer()
    ids = tok("hello " * 600, add_special_tokens=False).input_ids[:505]
    o = llm.generate([{"prompt_token_ids": ids}, "Count: 1, 2, 3,"],
                     [SamplingParams(temperature=0, max_tokens=50, ignore_eos=True), SamplingParams(temperature=0, max_tokens=3)], use_tqdm=False)
    assert (len(o[0].outputs[0].token_ids), o[0].outputs[0].finish_reason) == (512 - 505, "length")     # max_model_len
    assert (len(o[1].outputs[0].token_ids), o[1].outputs[0].finish_reason, o[1].outputs[0].stop_reason) == (3, "length", None)


def test_end_to_end_stop_token_ids_eos_and_detokenize(llm):
    tok = llm.get_tokenizer()
    chat = [{"role": "user", "content": "Say hello."}]
    # every run a full prefill: in bfloat16 a prefix-cache hit (a shorter prefill) rounds differently and can flip a tie
    # (on a Zen 4 CPU, this prompt's second token: two logits exactly equal after a full prefill, not after a cached one)
    def chat_(params): llm.reset_prefix_cache(); return llm.chat(chat, params, use_tqdm=False)[0].outputs[0]
    greedy = chat_(SamplingParams(temperature=0, max_tokens=60, skip_special_tokens=False))
    assert greedy.finish_reason == "stop" and greedy.stop_reason is None and greedy.token_ids[-1] == tok.eos_token_id
    assert "<|im_end|>" not in greedy.text and greedy.text == tok.decode(greedy.token_ids[:-1], skip_special_tokens=False)
    i = next(i for i in range(1, len(greedy.token_ids)) if greedy.token_ids[i] not in greedy.token_ids[:i])
    stop_id = greedy.token_ids[i]
    c = chat_(SamplingParams(temperature=0, max_tokens=60, stop_token_ids=[stop_id]))
    assert (c.token_ids, c.stop_reason, c.finish_reason) == (greedy.token_ids[:i + 1], stop_id, "stop")
    assert c.text == tok.decode(greedy.token_ids[:i])
    raw = chat_(SamplingParams(temperature=0, max_tokens=60, detokenize=False, logprobs=1))
    assert raw.text == "" and raw.token_ids == greedy.token_ids
    assert all(lp.decoded_token is None for d in raw.logprobs for lp in d.values())
