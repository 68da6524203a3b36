"""vLLM parity of the OpenAI server's bodies (issue 14), in process (the app over an AsyncLLM, through httpx's ASGI
transport). Expected shapes come from vLLM 0.32's source: its pydantic response models dumped with their defaults
(vllm/entrypoints/openai/{completion,chat_completion}/protocol.py), its completion serving (echo, prompt logprobs,
return_token_ids), its renderer (tool_choice, max_tokens) and its exception handlers
(vllm/entrypoints/serve/exception_handling)."""
import asyncio, json, time
import httpx, pytest, torch
from litevllm.async_llm import AsyncLLM, AsyncEngineArgs
from litevllm.server import build_app

MAX_LEN = 64
PROMPT = "The capital of France is"


@pytest.fixture(scope="module")
def app():
    engine = AsyncLLM.from_engine_args(AsyncEngineArgs(max_model_len=MAX_LEN, dtype="float32"))
    yield build_app(engine)
    engine.shutdown()


def call(app, method, path, body=None, stream=False):
    "One request: (status, json body) or, streaming, (status, list of SSE data payloads)."
    async def go():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test", timeout=120) as c:
            r = await c.request(method, path, json=body)
            if not stream: return r.status_code, r.json()
            if r.status_code != 200: return r.status_code, r.json()
            return r.status_code, [l[6:] for l in r.text.splitlines() if l.startswith("data: ")]
    return asyncio.run(go())


def cmpl(app, **kw): return call(app, "POST", "/v1/completions", dict(prompt=PROMPT, max_tokens=3, temperature=0) | kw, kw.get("stream", False))
def chat(app, **kw):
    return call(app, "POST", "/v1/chat/completions", dict(messages=[{"role": "user", "content": "Hi"}], max_tokens=3, temperature=0) | kw,
                kw.get("stream", False))


def test_completion_body_fields(app):
    # vLLM's CompletionResponse dumped with defaults: these keys, null unless asked
    s, b = cmpl(app)
    assert s == 200
    assert b["service_tier"] is None and b["system_fingerprint"].startswith("litevllm-")  # vLLM 0.32: "vllm-<version>-<hash>"
    assert b["usage"]["prompt_tokens_details"] is None and b["usage"]["completion_tokens_details"] is None
    ch = b["choices"][0]
    assert {"stop_reason", "token_ids", "prompt_logprobs", "prompt_token_ids"} <= set(ch)
    assert ch["token_ids"] is None and ch["prompt_token_ids"] is None and ch["prompt_logprobs"] is None


def test_return_token_ids(app):
    s, b = cmpl(app, return_token_ids=True)
    tok = app.state.server.tokenizer
    ch = b["choices"][0]
    assert ch["prompt_token_ids"] == tok(PROMPT).input_ids
    assert len(ch["token_ids"]) == b["usage"]["completion_tokens"] and tok.decode(ch["token_ids"]) == ch["text"]
    s, b = chat(app, return_token_ids=True)  # chat: prompt_token_ids top-level, token_ids per choice (vLLM's models)
    assert len(b["prompt_token_ids"]) == b["usage"]["prompt_tokens"] and len(b["choices"][0]["token_ids"]) == b["usage"]["completion_tokens"]


@pytest.fixture(scope="module")
def hf_prompt_logprobs(app, hf_default_model):
    "transformers' log-probabilities of each prompt token given the ones before (an independent reference)."
    ids = app.state.server.tokenizer(PROMPT).input_ids
    hf = hf_default_model  # conftest's: the float32 transformers model, loaded once per session
    with torch.no_grad(): lp = torch.log_softmax(hf(torch.tensor([ids])).logits[0].float(), -1)
    return ids, [lp[i - 1, ids[i]].item() for i in range(1, len(ids))]


def test_echo_with_logprobs(app, hf_prompt_logprobs):
    # vLLM: echo + logprobs returns prompt and completion logprobs as one list; the first prompt token has none
    ids, ref = hf_prompt_logprobs
    s, b = cmpl(app, echo=True, logprobs=1)
    assert s == 200, b
    ch = b["choices"][0]
    assert ch["text"].startswith(PROMPT)
    lps = ch["logprobs"]
    n = len(ids)
    assert len(lps["tokens"]) == n + b["usage"]["completion_tokens"]
    assert lps["token_logprobs"][0] is None and lps["top_logprobs"][0] is None
    assert lps["token_logprobs"][1:n] == pytest.approx(ref, abs=1e-3)
    assert "".join(lps["tokens"]) == ch["text"] and lps["text_offset"][0] == 0


def test_prompt_logprobs(app, hf_prompt_logprobs):
    ids, ref = hf_prompt_logprobs
    s, b = cmpl(app, prompt_logprobs=2)
    plp = b["choices"][0]["prompt_logprobs"]
    assert len(plp) == len(ids) and plp[0] is None
    assert [plp[i][str(ids[i])]["logprob"] for i in range(1, len(ids))] == pytest.approx(ref, abs=1e-3)
    assert all(len(d) >= 2 and {"logprob", "rank", "decoded_token"} == set(next(iter(d.values()))) for d in plp[1:])
    s, b = chat(app, prompt_logprobs=1)  # chat: top-level
    assert len(b["prompt_logprobs"]) == b["usage"]["prompt_tokens"] and b["prompt_logprobs"][0] is None
    s, b = cmpl(app, prompt_logprobs=1, stream=True)  # vLLM: prompt logprobs are not streamed
    assert s == 400 and b["error"]["param"] == "prompt_logprobs"


def test_best_of_accepted(app):
    # vLLM 0.32's CompletionRequest has no best_of field: it is ignored (a warning), never refused
    for kw in (dict(best_of=1), dict(best_of=3, n=2, temperature=0.8, seed=1)):
        s, b = cmpl(app, **kw)
        assert s == 200 and len(b["choices"]) == kw.get("n", 1)


def test_max_tokens_capped(app):
    # vLLM 0.32: get_max_tokens caps max_tokens to max_model_len - prompt length; only max_tokens > max_model_len is refused
    s, b = cmpl(app, max_tokens=MAX_LEN, ignore_eos=True)
    assert s == 200, b
    assert b["choices"][0]["finish_reason"] == "length"
    assert b["usage"]["completion_tokens"] == MAX_LEN - b["usage"]["prompt_tokens"]
    s, b = cmpl(app, max_tokens=MAX_LEN + 1)
    assert s == 400 and b["error"]["param"] == "max_tokens"
    assert b["error"]["message"] == (f"max_tokens={MAX_LEN + 1} cannot be greater than max_model_len={MAX_LEN}. Please request fewer output tokens. "
                                     f"(parameter=max_tokens, value={MAX_LEN + 1})")


def test_chat_message_fields(app):
    # vLLM's ChatCompletionResponse dumped with defaults: message has refusal/annotations/audio/function_call null, no tool_calls
    s, b = chat(app)
    m = b["choices"][0]["message"]
    assert m["role"] == "assistant" and isinstance(m["content"], str)
    assert all(m[k] is None for k in ("refusal", "annotations", "audio", "function_call"))
    assert "tool_calls" not in m
    assert b["service_tier"] is None and isinstance(b["system_fingerprint"], str) and b["prompt_logprobs"] is None
    assert "stop_reason" in b["choices"][0] and b["choices"][0]["token_ids"] is None


@pytest.mark.parametrize("kind", ["completions", "chat"])
def test_stream_usage_only_on_usage_chunk(app, kind):
    body = dict(stream=True, stream_options={"include_usage": True})
    s, data = cmpl(app, **body) if kind == "completions" else chat(app, **body)
    assert s == 200 and data[-1] == "[DONE]"
    chunks = [json.loads(d) for d in data[:-1]]
    assert all("usage" not in c for c in chunks[:-1])  # vLLM: content chunks carry no usage key
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["total_tokens"] > 0
    body["stream_options"]["continuous_usage_stats"] = True  # then every chunk has it
    s, data = cmpl(app, **body) if kind == "completions" else chat(app, **body)
    assert all("usage" in json.loads(d) for d in data[:-1])


TOOL = {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}


def test_tools_without_tool_parser(app):
    # vLLM's online renderer without --tool-call-parser: these messages, 400 BadRequestError
    s, b = chat(app, tools=[TOOL])
    assert s == 400 and b["error"]["message"] == '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'
    assert b["error"]["type"] == "BadRequestError"
    s, b = chat(app, tools=[TOOL], tool_choice="required")
    assert s == 400 and b["error"]["message"] == 'tool_choice="required" requires --tool-call-parser to be set'
    s, b = chat(app, tools=[TOOL], tool_choice={"type": "function", "function": {"name": "get_weather"}})
    assert s == 400 and b["error"]["message"] == 'tool_choice=function "get_weather" requires --tool-call-parser to be set'
    s, b = chat(app, tool_choice="required")
    assert s == 400 and b["error"]["param"] == "tool_choice"
    s, b = chat(app, tools=[TOOL], tool_choice="none")  # the tools reach the template; plain text comes back
    assert s == 200 and isinstance(b["choices"][0]["message"]["content"], str)


def test_error_shapes(app):
    # vLLM 0.32 (recorded) answers unknown routes and wrong methods with FastAPI's own {"detail": ...}; litevllm answers them
    # in OpenAI's error shape, with the same status and words (issue 39: no client-reachable answer outside that shape)
    s, b = call(app, "GET", "/v1/nope")
    assert (s, b) == (404, {"error": {"message": "Not Found", "type": "Not Found", "param": None, "code": 404}})
    s, b = call(app, "GET", "/v1/completions")
    assert (s, b) == (405, {"error": {"message": "Method Not Allowed", "type": "Method Not Allowed", "param": None, "code": 405}})
    # vLLM's validation_exception_handler: "N validation error(s):" + one line per error, param = the location
    s, b = cmpl(app, max_tokens="ten")
    e = b["error"]
    assert s == 400 and (e["type"], e["param"], e["code"]) == ("Bad Request", "body.max_tokens", 400)
    assert e["message"].startswith("1 validation error:\n  {") and "'loc': 'body.max_tokens'" in e["message"]
    s, b = call(app, "POST", "/v1/completions", dict(prompt="x", max_tokens="ten", n="two"))  # several errors
    assert s == 400 and b["error"]["message"].startswith("2 validation errors:")
    s, b = call(app, "POST", "/v1/completions", dict(max_tokens="ten"))  # vLLM's own check on the raw body runs first
    assert s == 400 and b["error"] == {"message": "Either prompt or prompt_embeds must be provided and non-empty. (parameter=prompt)",
                                       "type": "BadRequestError", "param": "prompt", "code": 400}


def test_metrics_families(app):
    # vLLM 0.32's PrometheusStatLogger (v1/metrics/loggers.py): these families, labels model_name and engine,
    # every finish reason (stop, length, abort, error, repetition) present from the start
    from litevllm.metrics import parse_metrics, metric_value
    cmpl(app, max_tokens=4, ignore_eos=True)
    call(app, "POST", "/v1/completions", dict(prompt=PROMPT, max_tokens=2, n=2, temperature=0.5, seed=0))
    def finished(m): return sum(v for k, v in m.items() if k.startswith("vllm:request_success_total") and 'finished_reason="abort"' not in k)
    for _ in range(100):  # the engine thread records a step's stats just after handing its outputs out: let the last one land
        text = asyncio.run(httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test").get("/metrics")).text
        m = parse_metrics(text)
        if metric_value(m, "vllm:request_num_preemptions_count") == finished(m) >= 3: break
        time.sleep(0.05)
    for fam in ("vllm:request_queue_time_seconds", "vllm:request_prefill_time_seconds", "vllm:request_decode_time_seconds",
                "vllm:request_inference_time_seconds", "vllm:iteration_tokens_total", "vllm:request_params_n",
                "vllm:request_params_max_tokens", "vllm:request_prefill_kv_computed_tokens", "vllm:request_max_num_generation_tokens"):
        assert metric_value(m, fam + "_count") >= 1, fam
    assert "vllm:prompt_tokens_cached_total" in text and "vllm:cache_config_info{" in text
    reasons = {k.split('finished_reason="')[1].split('"')[0] for k in m if k.startswith("vllm:request_success_total")}
    assert reasons == {"stop", "length", "abort", "error", "repetition"}
    assert all('engine="0"' in k and 'model_name="SmolLM2-135M-Instruct"' in k for k in m
               if k.startswith("vllm:") and "cache_config" not in k and "admission_rejections" not in k)
    # vLLM 0.32's newer families, with their extra label (every value from the start) and values that add up
    def by(name, label): return {k.split(f'{label}="')[1].split('"')[0]: v for k, v in m.items() if k.startswith(name + "{")}
    waiting = by("vllm:num_requests_waiting_by_reason", "reason")
    assert list(waiting) == ["capacity", "deferred"] and sum(waiting.values()) == metric_value(m, "vllm:num_requests_waiting") == 0
    src = by("vllm:prompt_tokens_by_source_total", "source")
    assert list(src) == ["local_compute", "local_cache_hit", "external_kv_transfer"] and src["external_kv_transfer"] == 0
    assert sum(src.values()) == metric_value(m, "vllm:prompt_tokens_total") > 0
    assert src["local_cache_hit"] == metric_value(m, "vllm:prompt_tokens_cached_total")  # (short prompts: no full block, no hit)
    tiers = by("vllm:prompt_tokens_cached_by_source_total", "source")
    assert list(tiers) == ["device", "host", "p2p", "disk", "external_unspecified"]
    assert tiers["device"] == sum(tiers.values()) == metric_value(m, "vllm:prefix_cache_hits_total")
    assert metric_value(m, "vllm:request_num_preemptions_count") == finished(m) >= 3  # one observation per finished request
    assert metric_value(m, "vllm:request_num_preemptions_sum") == metric_value(m, "vllm:num_preemptions_total")
    assert 'vllm:request_num_preemptions_bucket{engine="0",le="20.0",model_name="SmolLM2-135M-Instruct"}' in m
    assert {k: v for k, v in m.items() if k.startswith("vllm:admission_rejections")} == {  # the front end's: no engine label
        'vllm:admission_rejections_total{model_name="SmolLM2-135M-Instruct",reason="max_num_queued_reqs"}': 0,
        'vllm:admission_rejections_total{model_name="SmolLM2-135M-Instruct",reason="max_num_queued_tokens"}': 0}
    assert metric_value(m, "vllm:request_params_n_sum") >= 3  # at least the n=1 and the n=2 request
    # the phases add up: queue + inference = e2e (within the recording's clock granularity)
    assert metric_value(m, "vllm:request_queue_time_seconds_sum") + metric_value(m, "vllm:request_inference_time_seconds_sum") <= \
        metric_value(m, "vllm:e2e_request_latency_seconds_sum") + 1e-3


def test_echo_with_logprobs_streamed(app, hf_prompt_logprobs):
    # vLLM's completion stream: with echo and logprobs the first chunk carries the prompt, its tokens and their logprobs
    ids, ref = hf_prompt_logprobs
    s, data = cmpl(app, echo=True, logprobs=1, stream=True)
    assert s == 200 and data[-1] == "[DONE]"
    chunks = [json.loads(d) for d in data[:-1]]
    first = chunks[0]["choices"][0]
    assert first["text"].startswith(PROMPT)
    lp = first["logprobs"]
    assert lp["token_logprobs"][0] is None and lp["token_logprobs"][1:len(ids)] == pytest.approx(ref, abs=1e-3)
    text = "".join(c["choices"][0]["text"] for c in chunks if c["choices"])
    s, full = cmpl(app, echo=True, logprobs=1)
    assert text == full["choices"][0]["text"]
    streamed = [t for c in chunks if c["choices"] and c["choices"][0]["logprobs"] for t in c["choices"][0]["logprobs"]["token_logprobs"]]
    assert streamed[1:] == pytest.approx(full["choices"][0]["logprobs"]["token_logprobs"][1:], abs=1e-4)
