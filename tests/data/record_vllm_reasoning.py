"""Record what vLLM 0.32's own reasoning parsers ("deepseek_r1", "qwen3") answer on scripted model outputs, as test data
for litevllm's `reasoning` module (tests/test_reasoning.py compares against it; the tests never import vLLM).

How `tests/data/vllm032_reasoning.json` was made, from /work/main:

    HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 .vllm-venv/bin/python tests/data/record_vllm_reasoning.py tests/data/vllm032_reasoning.json

The tokenizer is the default model's (SmolLM2-135M-Instruct) with "<think>" and "</think>" added as ordinary (not special)
tokens, as DeepSeek-R1's and Qwen3's tokenizers have them: vLLM's DeepSeek-R1 parser refuses a vocabulary without them.
Each output is tokenized, then cut into deltas (one token each, or the groups `chunks` asks for); a delta's text is the
growth of the decoded text, as vLLM's incremental detokenizer gives it for ASCII.

Per case and parser:
- nonstream: extract_reasoning(text) -> [reasoning, content]
- stream: one entry per delta, extract_reasoning_streaming(...) -> {"reasoning", "content"} or null; `finish` is
  finish_streaming() where the parser has it (qwen3), else null; `ended` the per-delta is_reasoning_end_streaming(current
  ids, delta ids), `engine_ended` (qwen3) has_engine_confirmed_reasoning_end() after each delta
- is_reasoning_end, extract_content_ids, count_reasoning_tokens of the whole output's ids (a fresh parser), and
  count_after_stream: count_reasoning_tokens on the parser that streamed
- served: vLLM's serving-layer Parser (ParserManager.get_parser(reasoning_parser_name=...)) on the same deltas:
  parse_delta(..., prompt_token_ids, finished=last) per delta, and parse(text) -> [reasoning, content]
Plus `prompts`: is_reasoning_end on chat prompts' ids (the structured-output gate's first question), and `protocol`: how
vLLM's protocol models serialise (model_dump, model_dump(exclude_none=True)), random tool-call ids fixed to "ID".
"""
import json, sys
from pathlib import Path
from transformers import AutoTokenizer
from vllm.reasoning import ReasoningParserManager
from vllm.parser.parser_manager import ParserManager
from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

MODEL_DIR = Path.home()/".cache/litevllm/models/SmolLM2-135M-Instruct"
THINK_TOKENS = ["<think>", "</think>"]
PARSERS = ["deepseek_r1", "qwen3"]
PROMPT = "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"

# name, model output, chunks ("tokens": one token per delta; "all": one delta; k: k tokens per delta; [sizes]), prompt suffix
CASES = [
    ("both_tags", "<think>I think 2+2=4.</think>The answer is 4.", "tokens", ""),
    ("no_start_tag", "I think 2+2=4.</think>The answer is 4.", "tokens", "<think>\n"),
    ("no_end_tag", "<think>Let me think about this", "tokens", ""),
    ("no_tags", "Just an answer.", "tokens", ""),
    ("empty_reasoning", "<think></think>Answer.", "tokens", ""),
    ("end_tag_last", "<think>Hmm, done.</think>", "tokens", ""),
    ("newlines", "<think>\nOkay, the user asks.\n</think>\n\nHello!", "tokens", ""),
    ("whitespace_content_only", "<think>ok</think>\n\n", "tokens", ""),
    ("one_delta", "<think>abc</think>def", "all", ""),
    ("start_and_text_in_one_delta", "<think>Let me see. More</think> Done", 3, ""),
    ("end_and_text_in_one_delta", "<think>Let me see</think>The end.", [1, 3, 2, 4, 3], ""),
    ("text_before_start", "Sure. <think>why</think>because", "tokens", ""),
    ("second_end_tag", "<think>a</think>b</think>c", "tokens", ""),
    ("start_tag_in_content", "<think>a</think>b<think>c", "tokens", ""),
    ("only_end_tag", "</think>Answer", "tokens", ""),
    ("json_after_reasoning", '<think>The user wants JSON.</think>{"name": "Ada", "age": 36}', "tokens", ""),
    ("tool_call_in_reasoning", '<think>I should call a tool.<tool_call>{"name": "f"}</tool_call>', "tokens", ""),
    ("angle_brackets", "<think>is 1 < 2 > 0?</think>a <b> c", "tokens", ""),
    ("special_token_at_end", "<think>a</think>b<|im_end|>", "tokens", ""),
    ("prompt_ended_reasoning", "The answer is 4.", "tokens", "<think>\n\n</think>\n\n"),
]

PROMPTS = {  # is_reasoning_end on these prompts' ids
    "plain": PROMPT,
    "open_think": PROMPT + "<think>\n",
    "closed_think": PROMPT + "<think>\n\n</think>\n\n",
    "earlier_turn_closed": "<|im_start|>assistant\n<think>x</think>y<|im_end|>\n" + PROMPT,
    "earlier_turn_closed_no_boundary": "<think>x</think>y\n" + "Question: what?\nAnswer:",
    "empty": "",
}


def tokenizer():
    tok = AutoTokenizer.from_pretrained(str(MODEL_DIR))
    tok.add_tokens(THINK_TOKENS)
    return tok


def deltas(tok, ids, chunks):
    "[(delta_text, delta_ids)] as an incremental detokenizer gives them."
    if chunks == "tokens": sizes = [1] * len(ids)
    elif chunks == "all": sizes = [len(ids)]
    elif isinstance(chunks, int): sizes = [chunks] * -(-len(ids) // chunks)
    else: sizes = list(chunks) + [1] * (len(ids) - sum(chunks))
    out, start, prev = [], 0, ""
    for n in sizes:
        if start >= len(ids): break
        end = min(len(ids), start + n)
        cur = tok.decode(ids[:end], skip_special_tokens=False)
        assert cur.startswith(prev), (prev, cur)
        out.append((cur[len(prev):], ids[start:end]))
        start, prev = end, cur
    return out


def dm(d):
    if d is None: return None
    return {"reasoning": d.reasoning, "content": d.content}


def protocol():
    "vLLM's protocol models, serialised."
    from vllm.entrypoints.generate.base.protocol import (DeltaFunctionCall, DeltaMessage, DeltaToolCall,
                                                         ExtractedToolCallInformation, FunctionCall, ToolCall)
    from vllm.renderers.chat_utils import make_tool_call_id
    fc = FunctionCall(id="native-1", name="get_weather", arguments='{"city": "Paris"}')
    objs = {"delta_content": DeltaMessage(content="Hi"), "delta_reasoning": DeltaMessage(reasoning="Hmm", role="assistant"),
            "delta_tool_call": DeltaMessage(tool_calls=[DeltaToolCall(index=0, id="ID", type="function",
                                                                      function=DeltaFunctionCall(name="get_weather"))]),
            "delta_tool_args": DeltaMessage(tool_calls=[DeltaToolCall(index=1, function=DeltaFunctionCall(arguments='{"ci'))]),
            "function_call": fc, "tool_call": ToolCall(id="ID", function=fc),
            "extracted": ExtractedToolCallInformation(tools_called=True, tool_calls=[ToolCall(id="ID", function=fc)], content="ok"),
            "extracted_none": ExtractedToolCallInformation(tools_called=False, tool_calls=[], content=None)}
    out = {k: {"dump": o.model_dump(), "dump_exclude_none": o.model_dump(exclude_none=True), "json": o.model_dump_json()}
           for k, o in objs.items()}
    out["tool_call_id_example"] = make_tool_call_id()
    return out


def record():
    tok = tokenizer()
    think_ids = {t: tok.get_vocab()[t] for t in THINK_TOKENS}
    prompts = {k: tok.encode(v, add_special_tokens=False) for k, v in PROMPTS.items()}
    out = dict(vllm_version=__import__("vllm").__version__, model=MODEL_DIR.name, added_tokens=think_ids,
               prompts={k: {"text": PROMPTS[k], "ids": ids} for k, ids in prompts.items()}, prompt_is_reasoning_end={},
               protocol=protocol(), cases=[])
    for name in PARSERS:
        cls = ReasoningParserManager.get_reasoning_parser(name)
        out["prompt_is_reasoning_end"][name] = {k: cls(tok).is_reasoning_end(ids) for k, ids in prompts.items()}
    for case, text, chunks, prompt_suffix in CASES:
        ids = tok.encode(text, add_special_tokens=False)
        assert tok.decode(ids, skip_special_tokens=False) == text, case
        ds = deltas(tok, ids, chunks)
        prompt_ids = tok.encode(PROMPT + prompt_suffix, add_special_tokens=False)
        entry = dict(name=case, text=text, ids=ids, prompt=PROMPT + prompt_suffix, prompt_ids=prompt_ids,
                     deltas=[{"text": t, "ids": i} for t, i in ds], parsers={})
        for name in PARSERS:
            cls = ReasoningParserManager.get_reasoning_parser(name)
            r = {"nonstream": list(cls(tok).extract_reasoning(text, None))}
            p, prev_t, prev_i, stream, ended, engine_ended = cls(tok), "", [], [], [], []
            for t, i in ds:
                cur_t, cur_i = prev_t + t, prev_i + i
                stream.append(dm(p.extract_reasoning_streaming(prev_t, cur_t, t, prev_i, cur_i, i)))
                ended.append(p.is_reasoning_end_streaming(cur_i, i))
                if hasattr(p, "has_engine_confirmed_reasoning_end"): engine_ended.append(p.has_engine_confirmed_reasoning_end())
                prev_t, prev_i = cur_t, cur_i
            r.update(stream=stream, finish=dm(p.finish_streaming()) if hasattr(p, "finish_streaming") else None,
                     ended=ended, count_after_stream=p.count_reasoning_tokens(ids))
            if name == "qwen3": r["engine_ended"] = engine_ended
            f = cls(tok)
            r.update(is_reasoning_end=f.is_reasoning_end(ids), extract_content_ids=f.extract_content_ids(ids),
                     count_reasoning_tokens=f.count_reasoning_tokens(ids))
            r["served"] = served(tok, name, text, ds, prompt_ids)
            entry["parsers"][name] = r
        out["cases"].append(entry)
    return out


def served(tok, name, text, ds, prompt_ids):
    "vLLM's serving layer on these deltas: the chat completion's parser with only a reasoning parser."
    cls = ParserManager.get_parser(reasoning_parser_name=name)
    req = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "What is 2+2?"}])
    p = cls(tok, None, chat_template_kwargs=None)
    stream = [dm(p.parse_delta(t, list(i), req, prompt_token_ids=prompt_ids, finished=k == len(ds) - 1))
              for k, (t, i) in enumerate(ds)]
    reasoning, content, _ = cls(tok, None, chat_template_kwargs=None).parse(text, req, model_output_token_ids=tok.encode(text, add_special_tokens=False))
    return dict(stream=stream, parse=[reasoning, content])


if __name__ == "__main__":
    data = record()
    Path(sys.argv[1]).write_text(json.dumps(data, indent=1) + "\n")
    print(f"{len(data['cases'])} cases recorded into {sys.argv[1]}")
