"""Issue 28: tool calling and reasoning on /v1/chat/completions, as vLLM 0.32 serves them, driven by the official openai client.
Forced calls (`required`, a named function) run the real default model under the tools' JSON schema; `auto` and the
reasoning split run on scripted model outputs (a test double for the engine's generate) for each parser."""
import asyncio, json, sys
from pathlib import Path
import httpx, jsonschema, openai, pytest
from litevllm.output_processor import CompletionOutput, RequestOutput
from litevllm.sampling_params import RequestOutputKind
from litevllm.server import build_app, ServerOptions
from litevllm.reasoning import ReasoningParserManager
import litevllm

NAME = "SmolLM2-135M-Instruct"
TEMPLATE = str(Path(litevllm.__file__).parent / "chat_templates" / "tool_chat_template_chatml.jinja")
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Current weather in a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["C", "F"]}},
                          "required": ["city", "unit"], "additionalProperties": False}}}
TIME = {"type": "function", "function": {"name": "get_time", "description": "The time in a time zone",
        "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}, "required": ["tz"], "additionalProperties": False}}}
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in (WEATHER, TIME)}
ASK = [{"role": "user", "content": "What is the weather in Paris, in Celsius?"}]


@pytest.fixture(scope="module")
def engine(agents_engine): return agents_engine  # conftest's


def app_for(engine, **opts):
    return build_app(engine, [NAME], options=ServerOptions(**({"chat_template": TEMPLATE} | opts)))


def run(app, fn):
    "fn(AsyncOpenAI client) run against the app in-process."
    async def go():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t", timeout=300) as h:
            return await fn(openai.AsyncOpenAI(base_url="http://t/v1", api_key="x", http_client=h, max_retries=0))
    return asyncio.run(go())


def post(app, body):
    async def go():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t", timeout=300) as h:
            return await h.post("/v1/chat/completions", json={"model": NAME} | body)
    return asyncio.run(go())


@pytest.fixture(scope="module")
def hermes(engine): return app_for(engine, enable_auto_tool_choice=True, tool_call_parser="hermes")


def check_call(name, arguments):
    assert name in SCHEMAS, name
    jsonschema.validate(json.loads(arguments), SCHEMAS[name])  # the arguments parse and match the function's schema


def collect(chunks):
    "Streamed chat chunks -> (content, reasoning, {index: [id, name, arguments]}, finish_reason, name counts)."
    content, reasoning, calls, finish, names = "", "", {}, None, {}
    for ch in chunks:
        for c in ch.choices:
            d = c.delta
            content += d.content or ""
            reasoning += getattr(d, "reasoning", None) or (d.model_extra or {}).get("reasoning") or ""
            for tc in d.tool_calls or []:
                e = calls.setdefault(tc.index, [None, "", ""])
                if tc.id: e[0] = tc.id
                if tc.function and tc.function.name: e[1] += tc.function.name; names[tc.index] = names.get(tc.index, 0) + 1
                if tc.function and tc.function.arguments: e[2] += tc.function.arguments
            finish = c.finish_reason or finish
    return content, reasoning, calls, finish, names


# ---- forced calls on the real model -------------------------------------------------------------------------------------
@pytest.mark.parametrize("stream", [False, True])
def test_required_always_calls(hermes, stream):
    async def go(c):
        kw = dict(model=NAME, messages=ASK, tools=[WEATHER, TIME], tool_choice="required", max_tokens=60, temperature=0)
        if not stream: return await c.chat.completions.create(**kw)
        return [ch async for ch in await c.chat.completions.create(**kw, stream=True)]
    r = run(hermes, go)
    if not stream:
        ch = r.choices[0]  # the tiny model repeats calls until max_tokens: the whole ones are returned, finish_reason "length"
        assert ch.finish_reason in ("tool_calls", "length") and ch.message.content == "" and ch.message.tool_calls
        for tc in ch.message.tool_calls:
            assert tc.type == "function" and tc.id.startswith("chatcmpl-tool-")
            check_call(tc.function.name, tc.function.arguments)
    else:
        content, _, calls, finish, names = collect(r)
        assert finish in ("tool_calls", "length") and calls and content == ""
        if finish == "length": calls.pop(max(calls))  # the item max_tokens cut short
        for i, (cid, name, args) in calls.items():
            assert cid and names[i] == 1  # the id and name once per call, then arguments in pieces
            check_call(name, args)


@pytest.mark.parametrize("stream", [False, True])
def test_named_function(hermes, stream):
    choice = {"type": "function", "function": {"name": "get_time"}}
    async def go(c):
        kw = dict(model=NAME, messages=ASK, tools=[WEATHER, TIME], tool_choice=choice, max_tokens=60, temperature=0)
        if not stream: return await c.chat.completions.create(**kw)
        return [ch async for ch in await c.chat.completions.create(**kw, stream=True)]
    r = run(hermes, go)
    if not stream:
        (tc,) = r.choices[0].message.tool_calls
        assert tc.function.name == "get_time" and r.choices[0].finish_reason == "stop"  # OpenAI: a named call finishes with "stop"
        check_call("get_time", tc.function.arguments)
    else:
        _, _, calls, finish, names = collect(r)
        assert list(calls) == [0] and calls[0][1] == "get_time" and names[0] == 1 and finish == "stop"
        check_call("get_time", calls[0][2])
        assert sum(1 for ch in r for c in ch.choices for t in c.delta.tool_calls or [] if t.function.arguments) > 1  # in pieces


def test_parallel_tool_calls_false_is_one_call(hermes):
    r = post(hermes, dict(messages=ASK, tools=[WEATHER, TIME], tool_choice="required", parallel_tool_calls=False, max_tokens=120, temperature=0))
    assert r.status_code == 200 and len(r.json()["choices"][0]["message"]["tool_calls"]) == 1


def test_round_trip_with_tool_results(hermes):
    "An assistant message with tool_calls and a role 'tool' result render through the template, and the model answers."
    call = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris", "unit": "C"}'}}
    msgs = ASK + [{"role": "assistant", "content": None, "tool_calls": [call]},
                  {"role": "tool", "tool_call_id": "call_1", "content": '{"temperature": 21}'}]
    async def go(c):
        r = await c.chat.completions.create(model=NAME, messages=msgs, tools=[WEATHER], max_tokens=8, temperature=0)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=hermes), base_url="http://t") as h:
            tok = (await h.post("/tokenize", json=dict(model=NAME, messages=msgs, tools=[WEATHER]))).json()
            text = (await h.post("/detokenize", json=dict(model=NAME, tokens=tok["tokens"]))).json()["prompt"]
        return r, text
    r, text = run(hermes, go)
    assert r.choices[0].message.role == "assistant" and r.choices[0].finish_reason in ("stop", "length", "tool_calls")
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "C"}}\n</tool_call>' in text
    assert '<tool_response>\n{"temperature": 21}\n</tool_response>' in text and '"name": "get_weather"' in text.split("\n</tools>")[0]


# ---- bad tools: a 400 naming the field ---------------------------------------------------------------------------------
@pytest.mark.parametrize("body,param,words", [
    (dict(tools=[{"type": "function", "function": {"name": "f", "parameters": {"type": "string"}}}]), "tools.0.function.parameters", "type object"),
    (dict(tools=[WEATHER, WEATHER]), "tools.1.function.name", "Duplicate tool name"),
    (dict(tools=[WEATHER], tool_choice={"type": "function", "function": {"name": "nope"}}), "tool_choice", "does not match"),
    (dict(tools=[WEATHER], tool_choice="sometimes"), "tool_choice", "Invalid value for `tool_choice`"),
    (dict(tools=[]), "tools", "must not be an empty array"),
    (dict(tool_choice="required"), "tool_choice", "`tools` must be set"),
    (dict(tools=[{"type": "function", "function": {"name": "f", "parameters": "not a schema"}}]), "body.tools.0.function.parameters", "valid dictionary"),
])
def test_bad_tools(hermes, body, param, words):
    r = post(hermes, dict(messages=ASK, max_tokens=4) | body)
    err = r.json()["error"]
    assert r.status_code == 400 and err["param"] == param and words in err["message"] and err["type"] in ("BadRequestError", "Bad Request"), err


def test_tools_need_a_parser(engine):
    "Without --tool-call-parser, vLLM's 400s: 'auto' needs the two flags, a forced choice the parser; 'none' renders the tools."
    app = app_for(engine)
    r = post(app, dict(messages=ASK, tools=[WEATHER], max_tokens=2))
    assert r.status_code == 400 and "--enable-auto-tool-choice and --tool-call-parser" in r.json()["error"]["message"]
    r = post(app, dict(messages=ASK, tools=[WEATHER], tool_choice="required", max_tokens=2))
    assert r.status_code == 400 and r.json()["error"]["message"] == 'tool_choice="required" requires --tool-call-parser to be set'
    assert post(app, dict(messages=ASK, tools=[WEATHER], tool_choice="none", max_tokens=2)).status_code == 200


def test_serve_flag_errors():
    "A bad combination of flags fails at once (exit 2), before any engine starts."
    from litevllm.cli import main
    assert main(["serve", "--enable-auto-tool-choice"]) == 2
    assert main(["serve", "--enable-auto-tool-choice", "--tool-call-parser", "nope"]) == 2
    assert main(["serve", "--reasoning-parser", "nope"]) == 2
    assert main(["serve", "--chat-template", "/no/such/template.jinja"]) == 2


# ---- auto and reasoning on scripted outputs ----------------------------------------------------------------------------
class Scripted:
    "A test double for AsyncLLM.generate: streams a fixed text token by token (or returns it whole)."
    def __init__(self, engine, text): self.tok, self.text = engine.tokenizer, text
    async def __call__(self, prompt, params, request_id, **kw):
        ids = self.tok(self.text, add_special_tokens=False).input_ids
        if params.output_kind == RequestOutputKind.FINAL_ONLY:
            yield RequestOutput(request_id, None, prompt["prompt_token_ids"], None,
                                [CompletionOutput(0, self.text, ids, None, None, "stop", None)], True)
            return
        prev = ""
        for k in range(1, len(ids) + 1):
            cur = self.tok.decode(ids[:k]); last = k == len(ids)
            yield RequestOutput(request_id, None, prompt["prompt_token_ids"], None,
                                [CompletionOutput(0, cur[len(prev):], ids[k - 1:k], None, None, "stop" if last else None, None)], last)
            prev = cur


HERMES_OUT = 'I will look.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "C"}}\n</tool_call>'
LLAMA_OUT = '{"name": "get_weather", "parameters": {"city": "Paris", "unit": "C"}}; {"name": "get_time", "parameters": {"tz": "CET"}}'

@pytest.mark.parametrize("parser,text,content,calls", [
    ("hermes", HERMES_OUT, "I will look.\n", [("get_weather", {"city": "Paris", "unit": "C"})]),
    ("llama3_json", LLAMA_OUT, None, [("get_weather", {"city": "Paris", "unit": "C"}), ("get_time", {"tz": "CET"})]),
])
@pytest.mark.parametrize("stream", [False, True])
def test_auto_parses_what_the_model_wrote(engine, monkeypatch, parser, text, content, calls, stream):
    app = app_for(engine, enable_auto_tool_choice=True, tool_call_parser=parser)
    monkeypatch.setattr(engine, "generate", Scripted(engine, text))
    async def go(c):
        kw = dict(model=NAME, messages=ASK, tools=[WEATHER, TIME], max_tokens=64)
        if not stream: return await c.chat.completions.create(**kw)
        return [ch async for ch in await c.chat.completions.create(**kw, stream=True)]
    r = run(app, go)
    if not stream:
        m = r.choices[0].message
        assert r.choices[0].finish_reason == "tool_calls" and m.content == content
        assert [(t.function.name, json.loads(t.function.arguments)) for t in m.tool_calls] == calls
    else:
        got_content, _, got, finish, names = collect(r)
        assert finish == "tool_calls" and got_content == (content or "")
        assert [(n, json.loads(a)) for _, n, a in got.values()] == calls and set(names.values()) == {1}


def test_auto_plain_text_is_content(engine, monkeypatch, hermes):
    monkeypatch.setattr(engine, "generate", Scripted(engine, "It is sunny in Paris."))
    r = post(hermes, dict(messages=ASK, tools=[WEATHER], max_tokens=16)).json()["choices"][0]
    assert r["finish_reason"] == "stop" and r["message"]["content"] == "It is sunny in Paris." and "tool_calls" not in r["message"]


@pytest.mark.parametrize("stream", [False, True])
def test_reasoning_then_tool_call(engine, monkeypatch, stream):
    "deepseek_r1: the thinking goes to `reasoning`, the call after it is parsed; include_reasoning=false drops it."
    app = app_for(engine, enable_auto_tool_choice=True, tool_call_parser="hermes")
    app.state.server.reasoning_parser_cls = ReasoningParserManager.get_reasoning_parser("deepseek_r1")
    monkeypatch.setattr(engine, "generate", Scripted(engine, "<think>The user wants weather.</think>" + HERMES_OUT))
    async def go(c, **extra):
        kw = dict(model=NAME, messages=ASK, tools=[WEATHER], max_tokens=64, **extra)
        if not stream: return await c.chat.completions.create(**kw)
        return [ch async for ch in await c.chat.completions.create(**kw, stream=True)]
    r = run(app, go)
    if not stream:
        m = r.choices[0].message
        assert m.model_extra["reasoning"] == "The user wants weather." and m.content == "I will look.\n"
        assert m.tool_calls[0].function.name == "get_weather" and r.choices[0].finish_reason == "tool_calls"
        hidden = run(app, lambda c: go(c, extra_body={"include_reasoning": False})).choices[0].message
        assert hidden.model_extra.get("reasoning") is None and hidden.tool_calls
    else:
        content, reasoning, calls, finish, _ = collect(r)
        assert reasoning == "The user wants weather." and content == "I will look.\n" and finish == "tool_calls"
        assert calls[0][1] == "get_weather"


# ---- what agent frameworks send ----------------------------------------------------------------------------------------
def test_langchain_round_trip(hermes):
    "LangChain's ChatOpenAI: bind_tools with a forced tool, then the AIMessage / ToolMessage sequence it builds for the next turn."
    lc = pytest.importorskip("langchain_openai")
    from langchain_core.messages import HumanMessage, ToolMessage
    async def go():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=hermes), base_url="http://t", timeout=300) as h:
            llm = lc.ChatOpenAI(model=NAME, base_url="http://t/v1", api_key="x", http_async_client=h, temperature=0, max_tokens=40, max_retries=0)
            bound = llm.bind_tools([WEATHER, TIME], tool_choice="get_weather")
            history = [HumanMessage(ASK[0]["content"])]
            ai = await bound.ainvoke(history)
            history += [ai, ToolMessage('{"temperature": 21}', tool_call_id=ai.tool_calls[0]["id"])]
            return ai, await llm.bind_tools([WEATHER, TIME]).ainvoke(history)
    ai, answer = asyncio.run(go())
    (call,) = ai.tool_calls
    assert call["name"] == "get_weather" and call["id"].startswith("chatcmpl-tool-")
    jsonschema.validate(call["args"], SCHEMAS["get_weather"])
    assert answer.type == "ai" and (answer.content or answer.tool_calls)


# ---- against real vLLM 0.32 (tests/data/vllm032_tools.json, recorded by tests/data/record_vllm_tools.py) --------------
RECORDED = {e["name"]: e for e in json.loads((Path(__file__).parent / "data" / "vllm032_tools.json").read_text())}
# deliberate departures: vLLM 0.32 serves these with 200 and a call that cannot be made; litevllm refuses them (issue 28)
DEPARTS = {"dup_names": "tools.1.function.name", "params_type_string": "tools.0.function.parameters"}
# vLLM 0.32's hermes parser forces calls with an xgrammar structural tag in the model's own <tool_call> format, which on the
# default model does not hold the arguments to the schema (its recorded answers end at max_tokens with text, no call);
# litevllm forces vLLM's JSON-schema format (the rule), so there the comparison is of shapes, not values
FORCED = {"required", "required_stream", "required_one", "named", "named_stream"}

def delta_shape(d):
    "A delta's keys, and each tool-call piece's keys (function's too), without values."
    shape = sorted(d)
    for tc in d.get("tool_calls", []): shape.append(tuple(sorted(tc)) + tuple(sorted(tc.get("function") or {})))
    return shape

@pytest.mark.parametrize("name", sorted(RECORDED))
def test_same_answer_as_vllm(hermes, name):
    e = RECORDED[name]
    r = post(hermes, {k: v for k, v in e["request"].items() if k != "model"})
    if name in DEPARTS:
        assert r.status_code == 400 and r.json()["error"]["param"] == DEPARTS[name]; return
    assert r.status_code == e["status"], r.text
    if e["status"] != 200:
        got, want = r.json()["error"], e["response"]["error"]
        assert (got["message"], got["type"], got["param"], got["code"]) == (want["message"], want["type"], want["param"], want["code"])
        return
    if not e["stream"]:
        got, want = r.json()["choices"][0], e["response"]["choices"][0]
        assert list(got["message"]) == list(want["message"]) or name in FORCED  # the same keys, in vLLM's order
        if name not in FORCED: assert (got["message"]["content"], got["finish_reason"]) == (want["message"]["content"], want["finish_reason"])
        return
    chunks = [json.loads(l[5:]) for l in r.text.splitlines() if l.startswith("data:") and l[5:].strip() != "[DONE]"]
    want = [c for c in e["response"] if c != "[DONE]"]
    got_d = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    want_d = [c["choices"][0]["delta"] for c in want if c["choices"]]
    assert got_d[0] == want_d[0] == {"role": "assistant", "content": ""}
    if name in FORCED:  # a call streams as vLLM's does: content null, the id/type/name once, then arguments in pieces
        first = next(d for d in got_d if d.get("tool_calls"))
        assert first["content"] is None and {"id", "type", "index", "function"} <= set(first["tool_calls"][0])
        assert all(delta_shape(d)[:1] == ["content"] for d in got_d[1:] if d.get("tool_calls"))
    else:
        assert [delta_shape(d) for d in got_d] == [delta_shape(d) for d in want_d]
        assert "".join(d.get("content") or "" for d in got_d) == "".join(d.get("content") or "" for d in want_d)
