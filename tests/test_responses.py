"""Issue 28: /v1/responses (litevllm.responses) driven by the official openai client, on the default model, in process
(uvicorn in a thread). Shapes (keys, event order, error bodies) are compared with real `vllm serve` 0.32's answers in
tests/data/vllm032_responses.json (recorded by tests/data/record_vllm_responses.py)."""
import itertools, json, socket, threading, time
from typing import Literal
from pathlib import Path
import httpx, jsonschema, openai, pytest, uvicorn
import litevllm
from litevllm.server import build_app, ServerOptions
from litevllm.metrics import metric_value, parse_metrics
from litevllm.responses import ResponsesStore, add_routes
from test_vllm_bodies import detail_as_error

NAME = "SmolLM2-135M-Instruct"
TEMPLATE = str(Path(litevllm.__file__).parent / "chat_templates" / "tool_chat_template_chatml.jinja")
VLLM = {e["name"]: e for e in json.load(open(Path(__file__).parent / "data" / "vllm032_responses.json"))}
WEATHER = {"type": "function", "name": "get_weather", "description": "Current weather in a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["C", "F"]}},
                          "required": ["city", "unit"], "additionalProperties": False}}
TIME = {"type": "function", "name": "get_time", "description": "The time in a time zone",
        "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}, "required": ["tz"], "additionalProperties": False}}
SCHEMAS = {t["name"]: t["parameters"] for t in (WEATHER, TIME)}
ASK = "What is the weather in Paris, in Celsius?"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0)); return s.getsockname()[1]


def serve(app):
    "uvicorn in a daemon thread on a free port, as `litevllm serve` runs the app; (server, base url)."
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    deadline = time.monotonic() + 60
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    return server, f"http://127.0.0.1:{port}"


def with_responses(app):
    "The app with the Responses routes (build_app adds them through SERVER_EXTENSIONS)."
    if not any(getattr(r, "path", None) == "/v1/responses" for r in app.routes): add_routes(app, app.state.server)
    return app


@pytest.fixture(scope="module")
def engine(agents_engine): return agents_engine  # conftest's


@pytest.fixture(scope="module")
def plain(engine):
    "(base url, app) of a server with vLLM's defaults: no tool parser, the model's own template."
    app = with_responses(build_app(engine, [NAME]))
    server, base = serve(app)
    yield base, app
    server.should_exit = True


@pytest.fixture(scope="module")
def tools(engine):
    "(base url, app) of a server with the hermes tool parser and the tools-aware ChatML template."
    app = with_responses(build_app(engine, [NAME], options=ServerOptions(chat_template=TEMPLATE, enable_auto_tool_choice=True,
                                                                         tool_call_parser="hermes")))
    server, base = serve(app)
    yield base, app
    server.should_exit = True


def client(base): return openai.OpenAI(base_url=f"{base}/v1", api_key="x", max_retries=0, timeout=300)


def create(base, **kw): return client(base).responses.create(model=NAME, temperature=0, **kw)


def n_tokens(base, messages, tools=None) -> int:
    "The prompt length of these chat messages on the server (its /tokenize renders them with its template)."
    body = dict(model=NAME, messages=messages) | ({"tools": [{"type": "function", "function": {k: v for k, v in t.items() if k != "type"}}
                                                            for t in tools]} if tools else {})
    r = httpx.post(f"{base}/tokenize", json=body, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()["count"]


def shape_diff(want, got, path="$") -> list[str]:
    "Where two JSON values differ in shape: dict keys, list-ness, scalar kinds (null matches anything; int matches float)."
    if want is None or got is None: return []
    if isinstance(want, dict):
        if not isinstance(got, dict): return [f"{path}: object vs {type(got).__name__}"]
        out = [f"{path}: keys {sorted(set(want) ^ set(got))}"] if set(want) != set(got) else []
        return out + [d for k in set(want) & set(got) for d in shape_diff(want[k], got[k], f"{path}.{k}")]
    if isinstance(want, list):
        if not isinstance(got, list): return [f"{path}: list vs {type(got).__name__}"]
        return [d for w, g in zip(want[:1], got[:1]) for d in shape_diff(w, g, f"{path}[0]")]
    kind = lambda v: "number" if isinstance(v, (int, float)) and not isinstance(v, bool) else type(v).__name__
    return [] if kind(want) == kind(got) else [f"{path}: {kind(want)} vs {kind(got)}"]


def sse(text) -> list[dict]:
    "An SSE body as [{'event', 'data'}] (vLLM's Responses stream names each event)."
    out, event = [], None
    for line in text.splitlines():
        if line.startswith("event:"): event = line[6:].strip()
        elif line.startswith("data:"): out.append(dict(event=event, data=json.loads(line[5:]))); event = None
    return out


def runs(types):
    "Event types with consecutive repeats collapsed: the order, whatever the number of deltas."
    return [k for k, _ in itertools.groupby(types)]


# ---- text ---------------------------------------------------------------------------------------------------------------------
YES_NO = "Reply with one word: yes or no?"  # the default model answers "Yes." and stops: a completed response in 3 tokens


def test_text_string_input(plain):
    base, _ = plain
    raw = client(base).responses.with_raw_response.create(model=NAME, input=YES_NO, max_output_tokens=50, temperature=0)
    r = raw.parse()
    assert r.object == "response" and r.status == "completed" and r.incomplete_details is None
    (msg,) = r.output
    assert msg.type == "message" and msg.role == "assistant" and msg.content[0].type == "output_text" and r.output_text
    assert r.usage.input_tokens == n_tokens(base, [{"role": "user", "content": YES_NO}])
    assert r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens and r.max_output_tokens == 50
    assert shape_diff(VLLM["text_completed"]["response"], raw.http_response.json()) == []  # vLLM's keys, at every level


def test_items_instructions_and_parts(plain):
    base, _ = plain
    r = create(base, input=[{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Say hi."}]}],
               instructions="Answer in French.", max_output_tokens=2)
    assert r.instructions == "Answer in French."
    want = [{"role": "system", "content": "Answer in French."}, {"role": "user", "content": "Say hi."}]
    assert r.usage.input_tokens == n_tokens(base, want)  # the instructions are the system message


def test_max_output_tokens_incomplete(plain):
    base, _ = plain
    raw = client(base).responses.with_raw_response.create(model=NAME, input="Tell me a long story.", max_output_tokens=2, temperature=0)
    r = raw.parse()
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens" and r.usage.output_tokens == 2
    assert shape_diff(VLLM["max_output_tokens_2"]["response"], raw.http_response.json()) == []


def test_logprobs(plain):
    base, _ = plain
    e = VLLM["logprobs"]
    raw = httpx.post(f"{base}/v1/responses", json=e["request"], timeout=300).json()
    assert shape_diff(e["response"], raw) == [] and raw["top_logprobs"] == 2
    lps = raw["output"][0]["content"][0]["logprobs"]
    assert len(lps) == raw["usage"]["output_tokens"] and all(len(l["top_logprobs"]) == 2 for l in lps)
    assert "".join(l["token"] for l in lps) == raw["output"][0]["content"][0]["text"]


def test_text_format_json_schema(plain):
    base, _ = plain
    e = VLLM["text_format_json"]
    raw = httpx.post(f"{base}/v1/responses", json=e["request"], timeout=300).json()
    assert shape_diff(e["response"], raw) == [] and raw["text"] == e["response"]["text"]  # the format echoed as vLLM does
    jsonschema.validate(json.loads(raw["output"][0]["content"][0]["text"]), e["request"]["text"]["format"]["schema"])


# ---- streaming ----------------------------------------------------------------------------------------------------------------
def test_stream_events(plain):
    "vLLM's event order and keys; numbered from 0; one item id throughout; the deltas join into the final text."
    base, _ = plain
    e = VLLM["stream"]
    events = list(client(base).responses.create(**e["request"]))
    assert runs([x.type for x in events]) == runs([w["event"] for w in e["response"]])  # created, in_progress, added x2, deltas, done x3, completed
    want_by_type = {w["event"]: w["data"] for w in e["response"]}
    for x in events: assert shape_diff(want_by_type[x.type], x.to_dict()) == [], x.type
    assert [x.sequence_number for x in events] == list(range(len(events)))
    done = events[-1].response
    deltas = [x.delta for x in events if x.type == "response.output_text.delta"]
    assert len(deltas) > 1 and "".join(deltas) == done.output_text and done.status == "incomplete"
    item_id = events[2].item.id
    assert all(x.item_id == item_id for x in events if hasattr(x, "item_id")) and done.output[0].id == item_id


# ---- store, retrieve, cancel ----------------------------------------------------------------------------------------------------
def test_store_previous_response_id(plain):
    base, _ = plain
    r1 = create(base, input="My name is Ada. Say hi.", instructions="Be kind.", max_output_tokens=4)
    r2 = create(base, input="What is my name?", previous_response_id=r1.id, instructions="Be brief.", max_output_tokens=4)
    assert r2.previous_response_id == r1.id
    # the second prompt: its instructions, the first turn (without the first instructions) and its answer, the new input
    want = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "My name is Ada. Say hi."},
            {"role": "assistant", "content": r1.output_text}, {"role": "user", "content": "What is my name?"}]
    assert r2.usage.input_tokens == n_tokens(base, want)
    s = client(base).responses.create(model=NAME, input="And then?", previous_response_id=r2.id, max_output_tokens=2, stream=True)
    r3 = list(s)[-1].response  # a streamed turn continues from the stored one too
    assert r3.usage.input_tokens == n_tokens(base, want[1:] + [{"role": "assistant", "content": r2.output_text},
                                                               {"role": "user", "content": "And then?"}])


def test_retrieve_and_cancel_finished(plain):
    base, _ = plain
    r = create(base, input="Say hi.", max_output_tokens=4)
    got = client(base).responses.retrieve(r.id)
    assert got.id == r.id and got.output_text == r.output_text and got.status == r.status
    c = httpx.post(f"{base}/v1/responses/{r.id}/cancel")
    want = VLLM["store_cancel_finished"]
    assert c.status_code == want["status"] == 400 and c.json() == want["response"]  # vLLM: only a background response can be cancelled
    with pytest.raises(openai.BadRequestError): client(base).responses.cancel(r.id)


def test_store_false_is_not_kept(plain):
    base, _ = plain
    r = create(base, input="hi", max_output_tokens=2, store=False)
    assert httpx.get(f"{base}/v1/responses/{r.id}").status_code == 404


@pytest.mark.parametrize("name", ["get_unknown", "cancel_unknown", "previous_unknown", "delete_unknown"])
def test_unknown_ids(plain, name):
    base, _ = plain
    e = VLLM[name]
    r = httpx.request(e["method"], f"{base}{e['path']}", json=e["request"])
    want = e["response"] if "detail" not in e["response"] else detail_as_error(e["response"]["detail"], e["status"])  # vLLM's bare 405: ours in OpenAI's shape
    assert r.status_code == e["status"] and r.json() == want  # 404 in OpenAI's shape; DELETE is not a route: 405
    if e["status"] == 404:
        with pytest.raises(openai.NotFoundError): client(base).responses.retrieve("resp_nope")


def test_eviction_least_recently_used(plain):
    base, app = plain
    store: ResponsesStore = app.state.responses_store
    old = store.max_size
    store.max_size = 2
    try:
        a, b = (create(base, input="hi", max_output_tokens=1) for _ in range(2))
        client(base).responses.retrieve(a.id)  # a read: b is now the least recently used
        c = create(base, input="hi", max_output_tokens=1)
        assert httpx.get(f"{base}/v1/responses/{b.id}").status_code == 404
        assert {httpx.get(f"{base}/v1/responses/{x.id}").status_code for x in (a, c)} == {200}
        assert len(store) == 2
    finally: store.max_size = old


def test_store_off(engine, monkeypatch):
    "LITEVLLM_RESPONSES_STORE_SIZE=0 is vLLM's default: `store` is ignored, so GET and previous_response_id are 404s and background a 400."
    monkeypatch.setenv("LITEVLLM_RESPONSES_STORE_SIZE", "0")
    app = with_responses(build_app(engine, [NAME]))
    server, base = serve(app)
    try:
        r = create(base, input="hi", max_output_tokens=1)
        assert httpx.get(f"{base}/v1/responses/{r.id}").status_code == 404
        assert httpx.post(f"{base}/v1/responses", json=dict(model=NAME, input="hi", previous_response_id=r.id)).status_code == 404
        bg = httpx.post(f"{base}/v1/responses", json=dict(model=NAME, input="hi", background=True))
        want = VLLM["background_store_off"]["response"]["error"]
        assert bg.status_code == 400 and {k: bg.json()["error"][k] for k in ("type", "param", "code")} == {k: want[k] for k in ("type", "param", "code")}
    finally: server.should_exit = True


def test_background_and_cancel(plain):
    base, app = plain
    r = httpx.post(f"{base}/v1/responses", json=dict(model=NAME, input="Say hi.", max_output_tokens=4, temperature=0, background=True))
    assert r.status_code == 200 and shape_diff(VLLM["background"]["response"], r.json()) == []
    assert r.json()["status"] == "queued" and r.json()["background"] is True
    rid, deadline = r.json()["id"], time.monotonic() + 120
    while (got := httpx.get(f"{base}/v1/responses/{rid}").json())["status"] in ("queued", "in_progress"):
        assert time.monotonic() < deadline; time.sleep(0.05)
    assert got["status"] == "incomplete" and got["output"][0]["content"][0]["text"]
    long = httpx.post(f"{base}/v1/responses", json=dict(model=NAME, input="Tell me a long story.", max_output_tokens=1500, background=True)).json()
    c = httpx.post(f"{base}/v1/responses/{long['id']}/cancel")
    assert c.status_code == 200 and c.json()["status"] == "cancelled"
    assert httpx.get(f"{base}/v1/responses/{long['id']}").json()["status"] == "cancelled"
    assert httpx.post(f"{base}/v1/responses/{long['id']}/cancel").status_code == 400  # already cancelled
    deadline = time.monotonic() + 30  # the cancel aborted the engine request: nothing runs any more
    while metric_value(parse_metrics(httpx.get(f"{base}/metrics").text), "vllm:num_requests_running") != 0:
        assert time.monotonic() < deadline, "the cancelled request is still running"; time.sleep(0.05)


def test_background_stream_replay(plain):
    base, _ = plain
    body = dict(model=NAME, input="Say hi.", max_output_tokens=6, temperature=0, background=True, stream=True)
    first = sse(httpx.post(f"{base}/v1/responses", json=body, timeout=300).text)
    assert first[0]["event"] == "response.created" and first[-1]["event"] == "response.completed"
    rid = first[-1]["data"]["response"]["id"]
    again = sse(httpx.get(f"{base}/v1/responses/{rid}", params=dict(stream="true", starting_after=3), timeout=300).text)
    assert [e["data"] for e in again] == [e["data"] for e in first[4:]]


# ---- bad input ------------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["required_without_tools", "background_store_false", "max_output_tokens_5000", "unknown_model",
                                  "tool_choice_unknown_name"])
def test_errors_as_vllm(plain, name):
    base, _ = plain
    e = VLLM[name]
    r = httpx.post(f"{base}/v1/responses", json=e["request"], timeout=60)
    assert r.status_code == e["status"] and r.json() == e["response"], r.text


@pytest.mark.parametrize("body, param", [
    (dict(), "body.input"),                      # pydantic's errors: vLLM's shape, the field's location as param
    (dict(input="hi", temperature="hot"), "body.temperature"),
    (dict(input="hi", max_output_tokens="many"), "body.max_output_tokens"),
    (dict(input=[{"type": "nope"}]), "input.0.type"),
    (dict(input=[{"type": "function_call", "name": "f", "arguments": "{}"}]), "input.0.call_id"),
    (dict(input=[{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]), "input.0.content.0"),
    (dict(input=[{"type": "function_call_output", "call_id": "c", "output": 3}]), "input.0.output"),
    (dict(input=[{"type": "reasoning", "encrypted_content": "xyz"}]), "input.0.encrypted_content"),
    (dict(input="hi", tools=[{"type": "web_search"}]), "tools.0.type"),
    (dict(input="hi", prompt={"id": "p"}), "prompt"),
    (dict(input="hi", text={"format": {"type": "json_schema", "name": "x"}}), "text.format"),
    (dict(input="hi", previous_response_id="resp_nope"), "response_id"),
])
def test_bad_input_names_the_field(plain, body, param):
    base, _ = plain
    r = httpx.post(f"{base}/v1/responses", json=dict(model=NAME) | body, timeout=60)
    assert r.status_code == (404 if param == "response_id" else 400), r.text
    err = r.json()["error"]
    assert err["param"] == param and err["code"] == r.status_code and err["message"], err


# ---- function tools -----------------------------------------------------------------------------------------------------------
def check_call(item):
    assert item.type == "function_call" and item.call_id and item.id.startswith("fc_") and item.status == "completed"
    jsonschema.validate(json.loads(item.arguments), SCHEMAS[item.name])  # the arguments parse and match the function's schema


def test_tool_choice_required_one_call(tools):
    "required with parallel_tool_calls false: exactly one call (the schema allows one), which validates."
    base, _ = tools
    r = create(base, input=ASK, tools=[WEATHER, TIME], tool_choice="required", parallel_tool_calls=False, max_output_tokens=60)
    (call,) = r.output
    assert r.status == "completed" and r.parallel_tool_calls is False
    check_call(call)


def test_tool_choice_required_stream(tools):
    base, _ = tools
    events = list(create(base, input=ASK, tools=[WEATHER, TIME], tool_choice="required", max_output_tokens=40, stream=True))
    r = events[-1].response
    calls = [e.item for e in events if e.type == "response.output_item.done"]
    assert calls and all(c.type == "function_call" for c in calls) and [o.id for o in r.output] == [c.id for c in calls]
    args = {}
    for e in events:
        if e.type == "response.function_call_arguments.delta": args[e.item_id] = args.get(e.item_id, "") + e.delta
    assert all(args[c.id] == c.arguments for c in calls)  # the deltas join into each call's arguments
    if r.status == "incomplete" and len(calls) > 1: calls = calls[:-1]  # the tiny model repeats calls until the limit: the last may be cut
    for c in calls: check_call(c)


@pytest.fixture(scope="module")
def named(tools):
    "A stored response whose output is one call of get_weather, forced by name."
    base, _ = tools
    return create(base, input=ASK, tools=[WEATHER, TIME], tool_choice={"type": "function", "name": "get_weather"}, max_output_tokens=40)


def test_tool_choice_named(named):
    (call,) = named.output
    assert call.name == "get_weather" and named.status == "completed" and named.tool_choice.name == "get_weather"
    check_call(call)


def test_tool_choice_named_stream_as_vllm(tools):
    "The events of a streamed call: vLLM's order and keys; the arguments come in pieces and validate."
    base, _ = tools
    e = VLLM["tool_named_stream"]
    body = e["request"] | {"tools": [WEATHER, TIME], "input": ASK, "max_output_tokens": 40}
    got = sse(httpx.post(f"{base}/v1/responses", json=body, timeout=300).text)
    assert runs([g["event"] for g in got]) == runs([w["event"] for w in e["response"]])
    assert sum(g["event"] == "response.function_call_arguments.delta" for g in got) > 1
    want_by_type = {w["event"]: w["data"] for w in e["response"]}
    for g in got:
        w, d = want_by_type[g["event"]], g["data"]
        if "response" in w:  # the tools are ours, not the recorded ones: compare the rest
            w, d = ({k: v for k, v in x["response"].items() if k != "tools"} for x in (w, d))
        assert shape_diff(w, d) == [], g["event"]
    done = got[-1]["data"]["response"]
    assert done["status"] == "completed" and done["output"][0]["name"] == "get_weather"
    jsonschema.validate(json.loads(done["output"][0]["arguments"]), SCHEMAS["get_weather"])


def test_function_call_output_round_trip(tools, named):
    base, _ = tools
    (call,) = named.output
    items = [{"role": "user", "content": ASK},
             {"type": "function_call", "call_id": call.call_id, "name": call.name, "arguments": call.arguments},
             {"type": "function_call_output", "call_id": call.call_id, "output": '{"temperature": 21}'}]
    r = create(base, input=items, tools=[WEATHER, TIME], max_output_tokens=2)
    chat = [{"role": "user", "content": ASK},
            {"role": "assistant", "content": None, "tool_calls": [{"id": call.call_id, "type": "function",
                                                                   "function": {"name": call.name, "arguments": call.arguments}}]},
            {"role": "tool", "tool_call_id": call.call_id, "content": '{"temperature": 21}'}]
    assert r.status in ("completed", "incomplete") and r.output
    assert r.usage.input_tokens == n_tokens(base, chat, [WEATHER, TIME])  # the call and its result are in the prompt
    # the same with previous_response_id: only the result is sent, the call comes from the stored response
    r2 = create(base, input=[items[2]], previous_response_id=named.id, tools=[WEATHER, TIME], max_output_tokens=2)
    assert r2.usage.input_tokens == r.usage.input_tokens


# ---- OpenAI Agents SDK ------------------------------------------------------------------------------------------------------------
def test_openai_agents(tools):
    "The OpenAI Agents SDK on this server: a plain answer, and a forced call whose tool the SDK runs (stop_on_first_tool)."
    agents = pytest.importorskip("agents")
    base, _ = tools
    agents.set_tracing_disabled(True)
    model = agents.OpenAIResponsesModel(model=NAME, openai_client=openai.AsyncOpenAI(base_url=f"{base}/v1", api_key="x", max_retries=0))
    plain_agent = agents.Agent(name="plain", model=model, model_settings=agents.ModelSettings(temperature=0, max_tokens=20))
    assert agents.Runner.run_sync(plain_agent, YES_NO, max_turns=1).final_output.strip()
    seen = []

    @agents.function_tool
    def get_weather(city: str, unit: Literal["C", "F"]) -> str:
        "Current weather in a city."
        seen.append((city, unit))
        return f"Sunny, 21 {unit} in {city}"

    agent = agents.Agent(name="weather", instructions="Use the tool.", tools=[get_weather], model=model, tool_use_behavior="stop_on_first_tool",
                         model_settings=agents.ModelSettings(tool_choice="get_weather", temperature=0, max_tokens=40))
    result = agents.Runner.run_sync(agent, ASK, max_turns=2)
    # the SDK's strict schema for the tool (unit an enum) is the grammar: the call it ran fits it
    assert len(seen) == 1 and seen[0][1] in ("C", "F") and result.final_output == f"Sunny, 21 {seen[0][1]} in {seen[0][0]}"
    kinds = [type(i).__name__ for i in result.new_items]
    assert "ToolCallItem" in kinds and "ToolCallOutputItem" in kinds

