"""The reasoning parsers against vLLM 0.32's own (tests/data/vllm032_reasoning.json, recorded by
tests/data/record_vllm_reasoning.py): every split, delta by delta, the token-id questions, the token counts, the protocol
models' JSON. Then the text mode (the default model's vocabulary, where `</think>` is three tokens): the same reasoning and
content however the output is cut into deltas. Then the structured-output manager keeping a grammar off the reasoning:
scripted token by token, and in a real engine (its engine core in a process of its own)."""
import json, random, re
from pathlib import Path
import jsonschema, pytest
from litevllm.config import default_model_path
from litevllm.exceptions import VLLMValidationError
from litevllm.inputs import get_tokenizer
from litevllm.reasoning import (DeepSeekR1ReasoningParser, DeltaFunctionCall, DeltaMessage, DeltaToolCall, ExtractedToolCallInformation,
                                FunctionCall, Qwen3ReasoningParser, ReasoningEnd, ReasoningParserManager, ToolCall, make_tool_call_id)
from litevllm.request import Request
from litevllm.sampling_params import SamplingParams, StructuredOutputsParams as SO
from litevllm.structured_output import StructuredOutputManager

DATA = json.loads((Path(__file__).parent/"data"/"vllm032_reasoning.json").read_text())
CASES = DATA["cases"]
PARSERS = ["deepseek_r1", "qwen3"]
V = 49152  # the default model's logits width
PERSON = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12}, "age": {"type": "integer"}}, "required": ["name", "age"]}


@pytest.fixture(scope="module")
def plain(): return get_tokenizer(default_model_path())


@pytest.fixture(scope="module")
def think():
    "The default model's tokenizer with the markers as tokens, as the recorder made it."
    t = get_tokenizer(default_model_path())
    t.add_tokens(["<think>", "</think>"])
    assert {k: t.get_vocab()[k] for k in DATA["added_tokens"]} == DATA["added_tokens"]
    return t


def dm(d): return None if d is None else {"reasoning": d.reasoning, "content": d.content}


def feed(p, deltas) -> list:
    "Parser `p`'s answer to each (text, ids) delta, then its finish_streaming."
    prev_t, prev_i, out = "", [], []
    for text, ids in deltas:
        out.append(dm(p.extract_reasoning_streaming(prev_t, prev_t + text, text, prev_i, prev_i + ids, ids)))
        prev_t, prev_i = prev_t + text, prev_i + ids
    return out + [dm(p.finish_streaming())]


def joined(answers) -> tuple[str, str]: return tuple("".join((a or {}).get(k) or "" for a in answers) for k in ("reasoning", "content"))


def cut(t, text:str, sizes) -> list[tuple[str, list[int]]]:
    "`text`'s deltas in runs of `sizes` tokens (the last size repeats), as an incremental detokenizer gives them."
    ids, out, prev, i, k = t.encode(text, add_special_tokens=False), [], "", 0, 0
    while i < len(ids):
        n = sizes[min(k, len(sizes) - 1)]; k += 1
        cur = t.decode(ids[:i + n], skip_special_tokens=False)
        out.append((cur[len(prev):], ids[i:i + n])); prev, i = cur, i + n
    return out


@pytest.mark.parametrize("name", PARSERS)
@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_like_vllm(think, case, name):
    "Marker tokens in the vocabulary: every answer as vLLM's parser gave it."
    r, cls = case["parsers"][name], ReasoningParserManager.get_reasoning_parser(name)
    assert think.encode(case["text"], add_special_tokens=False) == case["ids"]
    assert list(cls(think).extract_reasoning(case["text"], None)) == r["nonstream"]
    p, prev_i, stream, ended, engine_ended = cls(think), [], [], [], []
    prev_t = ""
    for d in case["deltas"]:
        cur_t, cur_i = prev_t + d["text"], prev_i + d["ids"]
        stream.append(dm(p.extract_reasoning_streaming(prev_t, cur_t, d["text"], prev_i, cur_i, d["ids"])))
        ended.append(p.is_reasoning_end_streaming(cur_i, d["ids"]))
        engine_ended.append(p.has_engine_confirmed_reasoning_end())
        prev_t, prev_i = cur_t, cur_i
    assert stream == r["stream"]
    assert dm(p.finish_streaming()) == r["finish"]
    assert ended == r["ended"]
    if name == "qwen3": assert engine_ended == r["engine_ended"]
    assert p.count_reasoning_tokens(case["ids"]) == r["count_after_stream"]
    f = cls(think)
    assert f.is_reasoning_end(case["ids"]) == r["is_reasoning_end"]
    assert f.extract_content_ids(case["ids"]) == r["extract_content_ids"]
    assert f.count_reasoning_tokens(case["ids"]) == r["count_reasoning_tokens"]


@pytest.mark.parametrize("name", PARSERS)
def test_prompts_like_vllm(think, plain, name):
    "is_reasoning_end on chat prompts (a closed <think>, an earlier turn's): ids and, without marker tokens, text give vLLM's answer."
    cls = ReasoningParserManager.get_reasoning_parser(name)
    for k, want in DATA["prompt_is_reasoning_end"][name].items():
        assert cls(think).is_reasoning_end(DATA["prompts"][k]["ids"]) == want, k
        assert cls(plain).is_reasoning_end(plain.encode(DATA["prompts"][k]["text"], add_special_tokens=False)) == want, k


@pytest.mark.parametrize("name", PARSERS)
@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_text_mode_same_split(plain, think, case, name):
    "No marker tokens: the recorded deltas' texts, then the default model's own tokens in runs of any length, split as vLLM's stream."
    r, cls = case["parsers"][name], ReasoningParserManager.get_reasoning_parser(name)
    assert cls(plain).start_token_id is None and cls(plain).end_token_id is None
    want = joined(r["stream"] + [r["finish"]])
    if name == "deepseek_r1" and case["name"] == "start_and_text_in_one_delta":
        assert want[0].startswith("<think>")   # vLLM keeps <think> inside a multi-token delta; the text mode drops the marker
        want = (want[0].removeprefix("<think>"), want[1])
    assert list(cls(plain).extract_reasoning(case["text"], None)) == r["nonstream"]
    assert joined(feed(cls(plain), [(d["text"], d["ids"]) for d in case["deltas"]])) == want
    if any(len(d["ids"]) > 1 for d in case["deltas"]): return   # vLLM's answer was for those runs: compared above
    rng = random.Random(case["name"])
    for sizes in ([1], [2], [3], [7], [rng.randint(1, 4) for _ in range(40)]):
        assert joined(feed(cls(plain), cut(plain, case["text"], sizes))) == want, sizes
    ids = plain.encode(case["text"], add_special_tokens=False)
    p = cls(plain)
    assert p.is_reasoning_end(ids) == r["is_reasoning_end"]
    assert p.count_reasoning_tokens(ids) == r["count_reasoning_tokens"]
    assert plain.decode(p.extract_content_ids(ids), skip_special_tokens=False) == think.decode(r["extract_content_ids"], skip_special_tokens=False)


def test_text_mode_marker_split_across_deltas(plain):
    "`</think>` as `</`, `think`, `>`: held back, never shown; a tail still held when the output ends comes from finish_streaming."
    for cls in (DeepSeekR1ReasoningParser, Qwen3ReasoningParser):
        ans = feed(cls(plain), cut(plain, "<think>Hmm</think>4", [1]))
        assert "".join(json.dumps(a) for a in ans).count("think") == 0 and joined(ans) == ("Hmm", "4")
        assert feed(cls(plain), cut(plain, "<think>a</", [1]))[-1] == {"reasoning": "</", "content": None}
        assert feed(cls(plain), cut(plain, "a<think>", [1]))[-2:] == [None, None]   # a whole marker is not held back


def test_protocol_models_serialise_like_vllm():
    P = DATA["protocol"]
    fc = FunctionCall(id="native-1", name="get_weather", arguments='{"city": "Paris"}')
    objs = {"delta_content": DeltaMessage(content="Hi"), "delta_reasoning": DeltaMessage(reasoning="Hmm", role="assistant"),
            "delta_tool_call": DeltaMessage(tool_calls=[DeltaToolCall(index=0, id="ID", type="function", function=DeltaFunctionCall(name="get_weather"))]),
            "delta_tool_args": DeltaMessage(tool_calls=[DeltaToolCall(index=1, function=DeltaFunctionCall(arguments='{"ci'))]),
            "function_call": fc, "tool_call": ToolCall(id="ID", function=fc),
            "extracted": ExtractedToolCallInformation(tools_called=True, tool_calls=[ToolCall(id="ID", function=fc)], content="ok"),
            "extracted_none": ExtractedToolCallInformation(tools_called=False, tool_calls=[], content=None)}
    for k, o in objs.items():
        assert (o.model_dump(), o.model_dump(exclude_none=True), o.model_dump_json()) == (P[k]["dump"], P[k]["dump_exclude_none"], P[k]["json"]), k
    shape = re.compile(r"chatcmpl-tool-[0-9a-f]{16}")
    assert shape.fullmatch(P["tool_call_id_example"]) and shape.fullmatch(make_tool_call_id()) and make_tool_call_id() != make_tool_call_id()
    assert shape.fullmatch(ToolCall(function=fc).id) and fc.id == "native-1"


def test_registry():
    assert {"deepseek_r1", "qwen3"} <= set(ReasoningParserManager.list_registered())
    assert ReasoningParserManager.get_reasoning_parser("qwen3") is Qwen3ReasoningParser
    with pytest.raises(KeyError, match="Reasoning parser 'deepseek' not found. Available parsers: .*deepseek_r1"):
        ReasoningParserManager.get_reasoning_parser("deepseek")


def test_qwen3_tool_call_token_is_an_implicit_end(plain):
    t = get_tokenizer(default_model_path())
    t.add_tokens(["<think>", "</think>", "<tool_call>"])
    q = Qwen3ReasoningParser(t)
    assert q.find_reasoning_end(t.encode("Call f.<tool_call>{", add_special_tokens=False)) == ReasoningEnd(3, True)
    assert q.is_reasoning_end(t.encode("<think>Call f.<tool_call>", add_special_tokens=False))
    assert q.extract_reasoning("<think>Call f.<tool_call>{}", None) == ("Call f.", "<tool_call>{}")


def thinking_request(t, rid:str, prompt_end:str="<think>\n", schema=PERSON) -> Request:
    prompt = t.apply_chat_template([{"role": "user", "content": "A person as JSON."}], add_generation_prompt=True, tokenize=False)
    return Request(rid, t.encode(prompt + prompt_end, add_special_tokens=False), SamplingParams(structured_outputs=SO(json=schema)),
                   eos_token_id=t.eos_token_id)


@pytest.mark.parametrize("name", PARSERS)
@pytest.mark.parametrize("markers", ["text", "tokens"])
def test_manager_keeps_the_grammar_off_the_reasoning(plain, think, name, markers):
    "Token by token: every row free while thinking (the marker's last token included), the matcher fed only the answer."
    mgr = StructuredOutputManager(tokenizer=plain, vocab_size=V, max_num_seqs=2, reasoning_parser=name)
    t = plain if markers == "text" else think
    if markers == "tokens": mgr._reasoner = mgr.reasoner_cls(think)   # marker tokens for the parser; the grammar keeps the model's vocabulary
    thinking = t.encode("Ada, 36.</think>", add_special_tokens=False)
    answer = plain.encode('{"name": "Ada", "age": 36}', add_special_tokens=False) + [plain.eos_token_id]
    r = thinking_request(t, "r"); mgr.grammar_init(r); g = r.structured_output_request._grammar.result(timeout=60)
    free = []
    for tok_id in thinking + answer:
        free.append(bool((mgr.grammar_bitmask({"r": r}, ["r"]) == -1).all()))
        r.append_output_token_ids(tok_id)
        assert mgr.accept_tokens(r, [tok_id])
    assert free == [True] * len(thinking) + [False] * len(answer)
    assert (g.num_processed_tokens, g.is_terminated()) == (len(answer), True)
    r2 = thinking_request(t, "r2"); mgr.grammar_init(r2); g2 = r2.structured_output_request._grammar.result(timeout=60)
    r2.append_output_token_ids(thinking + answer[:3])   # several tokens in one step: only those after the marker are fed
    assert mgr.accept_tokens(r2, thinking + answer[:3]) and g2.num_processed_tokens == 3
    r3 = thinking_request(t, "r3", "<think>\n\n</think>\n\n"); mgr.grammar_init(r3); r3.structured_output_request._grammar.result(timeout=60)
    assert not (mgr.grammar_bitmask({"r3": r3}, ["r3"]) == -1).all()   # the template closed the reasoning: constrained at once


def test_unknown_reasoning_parser_is_refused(plain):
    with pytest.raises(VLLMValidationError, match="deepseek_r1") as e: StructuredOutputManager(tokenizer=plain, reasoning_parser="deepseek")
    assert (e.value.parameter, e.value.value) == ("reasoning_parser", "deepseek")


@pytest.fixture(scope="module")
def llm():
    from litevllm import LLM
    llm = LLM(kv_cache_memory_bytes=256 * 2**20, max_model_len=512, reasoning_parser="deepseek_r1")
    yield llm
    llm.llm_engine.shutdown()


def test_engine_grammar_waits_for_the_reasoning(llm):
    """The engine core (in its own process: the setting travels with the config): a JSON request that thinks first samples
    exactly as an unconstrained one while thinking; one that closes its thinking (a few-shot prompt makes the small model write
    `</think>`) answers in JSON; one whose prompt closed the thinking is JSON from its first token."""
    tok = llm.get_tokenizer()
    chat = tok.apply_chat_template([{"role": "user", "content": "Give a person as JSON."}], add_generation_prompt=True, tokenize=False)
    few_shot = 'Q: x\nA: <think>hmm</think>{"a": 1}\nQ: y\nA: <think>hmm</think>{"a": 2}\nQ: z\nA: <think>hmm'
    a_schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    sp = lambda n, schema=None: SamplingParams(temperature=0, max_tokens=n, structured_outputs=SO(json=schema) if schema else None)
    outs = llm.generate([chat + "<think>\n", chat + "<think>\n", few_shot, few_shot, chat + "<think>\nA person.\n</think>\n\n"],
                        [sp(8), sp(8, PERSON), sp(16), sp(16, a_schema), sp(24, PERSON)], use_tqdm=False)
    free_open, json_open, free_shot, json_shot, closed = [o.outputs[0] for o in outs]
    assert json_open.token_ids == free_open.token_ids and "</think>" not in json_open.text   # no grammar while thinking
    reasoning, content = DeepSeekR1ReasoningParser(tok).extract_reasoning(json_shot.text, None)
    assert json_shot.finish_reason == "stop" and content is not None, json_shot.text
    jsonschema.validate(json.loads(content), a_schema)
    assert free_shot.text.startswith(json_shot.text) and len(free_shot.text) > len(json_shot.text)   # unconstrained, it runs on
    assert closed.finish_reason == "stop", closed.text
    jsonschema.validate(json.loads(closed.text), PERSON)
