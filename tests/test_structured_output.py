"""Structured output end to end on the default model (CPU, float32): JSON schemas, regex, choice, n=4 sampling, mixed
batches, the grammar compile off the engine loop, a bad grammar failing only its own request, preemption, the server."""
import asyncio, json, re, threading
import httpx, jsonschema, pytest
from litevllm import LLM, SamplingParams
from litevllm.sampling_params import StructuredOutputsParams as SO
from litevllm.request import RequestStatus
import litevllm.engine, litevllm.server, litevllm.structured_output as so_mod

ENGINE_IN_PROCESS = True  # these tests look inside the engine core (conftest: VLLM_ENABLE_V1_MULTIPROCESSING=0)

SCHEMAS = {
    "flat": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 16},
                                              "age": {"type": "integer", "minimum": 0, "maximum": 120}}, "required": ["name", "age"]},
    "nested_enum": {"type": "object", "properties": {"city": {"type": "object", "properties": {
        "name": {"type": "string", "maxLength": 16}, "country": {"type": "string", "enum": ["France", "Italy", "Spain"]}},
        "required": ["name", "country"]}}, "required": ["city"]},
    "array": {"type": "object", "properties": {"colors": {"type": "array", "items": {"type": "string", "enum": ["red", "green", "blue"]},
                                                          "minItems": 1, "maxItems": 3}}, "required": ["colors"]},
    "bounded_numbers": {"type": "object", "properties": {"temp": {"type": "number", "minimum": -50, "maximum": 60},
                                                         "level": {"type": "integer", "minimum": 3, "maximum": 7}, "ok": {"type": "boolean"}},
                        "required": ["temp", "level", "ok"]},
}


@pytest.fixture(scope="module")
def llm():
    return LLM(model=None, dtype="float32", max_model_len=512, max_num_seqs=8)


def chat(llm, q):
    return llm.get_tokenizer().apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True, tokenize=False)


def check_json(text, schema):
    jsonschema.validate(json.loads(text), schema)  # raises on a parse error or a schema violation


def idle(llm):
    core = llm.llm_engine.engine_core
    pool = core.scheduler.kv_cache_manager.block_pool
    return not core.has_unfinished_requests() and pool.get_num_free_blocks() == pool.num_blocks


def test_params_validation():
    with pytest.raises(ValueError, match="exactly one kind"): SO(json={"type": "object"}, regex="a")
    with pytest.raises(ValueError, match="exactly one kind"): SO()
    with pytest.raises(ValueError, match="choice"): SO(choice=[])
    with pytest.raises(TypeError, match="guided_decoding"): SamplingParams(guided_decoding={"regex": "a"})  # removed in vLLM 0.32
    with pytest.raises(ValueError, match="structured_outputs"): SamplingParams(structured_outputs={"regex": "a"})


def test_json_schemas_greedy(llm):
    prompts = [chat(llm, q) for q in ["Describe a person as JSON.", "Give a city as JSON.", "List colors as JSON.", "Weather as JSON."]]
    params = [SamplingParams(temperature=0, max_tokens=80, structured_outputs=SO(json=s)) for s in SCHEMAS.values()]
    outs = llm.generate(prompts, params, use_tqdm=False)
    for (name, schema), o in zip(SCHEMAS.items(), outs):
        c = o.outputs[0]
        assert c.finish_reason == "stop", (name, c.text)
        check_json(c.text, schema)
    assert idle(llm)


@pytest.mark.parametrize("name", ["flat", "bounded_numbers"])
def test_n4_temperature1_every_sample_conforms(llm, name):
    sp = SamplingParams(n=4, temperature=1.0, seed=7, max_tokens=120, structured_outputs=SO(json=SCHEMAS[name], disable_any_whitespace=True))
    outs = llm.generate([chat(llm, "Answer in JSON.")], sp, use_tqdm=False)[0].outputs
    assert len(outs) == 4
    for c in outs:
        assert c.finish_reason == "stop", c.text
        check_json(c.text, SCHEMAS[name])
    assert len({c.text for c in outs}) > 1  # really sampled


def test_regex_choice_json_object(llm):
    pat = r"\d{3}-\d{4}"
    ps = [SamplingParams(n=4, temperature=1.0, seed=3, max_tokens=20, structured_outputs=SO(regex=pat)),
          SamplingParams(n=4, temperature=1.0, seed=4, max_tokens=10, structured_outputs=SO(choice=["yes", "no", "maybe so"])),
          SamplingParams(temperature=0, max_tokens=60, structured_outputs=SO(json_object=True))]
    outs = llm.generate([chat(llm, "A phone number?"), chat(llm, "Is it raining?"), chat(llm, "Anything")], ps, use_tqdm=False)
    for c in outs[0].outputs: assert re.fullmatch(pat, c.text) and c.finish_reason == "stop", c.text
    for c in outs[1].outputs: assert c.text in ("yes", "no", "maybe so") and c.finish_reason == "stop", c.text
    assert outs[2].outputs[0].finish_reason == "stop" and isinstance(json.loads(outs[2].outputs[0].text), dict)


def test_mixed_batch_leaves_free_requests_alone(llm):
    free = ["The capital of France is", "Once upon a time", "def fibonacci(n):"]
    greedy = SamplingParams(temperature=0, max_tokens=24)
    alone = [o.outputs[0].token_ids for o in llm.generate(free, greedy, use_tqdm=False)]
    structured = [SamplingParams(temperature=0, max_tokens=40, structured_outputs=SO(json=SCHEMAS["flat"])),
                  SamplingParams(temperature=1.0, seed=1, max_tokens=10, structured_outputs=SO(regex=r"[a-z]+"))]
    mixed = llm.generate([free[0], chat(llm, "A person as JSON."), free[1], "Word:", free[2]],
                         [greedy, structured[0], greedy, structured[1], greedy], use_tqdm=False)
    assert [mixed[i].outputs[0].token_ids for i in (0, 2, 4)] == alone
    check_json(mixed[1].outputs[0].text, SCHEMAS["flat"])
    assert re.fullmatch(r"[a-z]+", mixed[3].outputs[0].text)


def test_compile_runs_while_others_step(llm, monkeypatch):
    "The grammar compiles in the pool: the free request keeps generating while the structured one waits in WAITING_FOR_FSM."
    release, started = threading.Event(), threading.Event()
    real = so_mod.XgrammarBackend.compile_grammar
    def slow(self, *a, **kw):
        started.set(); assert release.wait(60); return real(self, *a, **kw)
    monkeypatch.setattr(so_mod.XgrammarBackend, "compile_grammar", slow)
    eng = llm.llm_engine
    eng.add_request("free", "Once upon a time", SamplingParams(temperature=0, max_tokens=12))
    eng.add_request("json", chat(llm, "A person as JSON."), SamplingParams(temperature=0, max_tokens=60, structured_outputs=SO(json=SCHEMAS["flat"])))
    sched = eng.engine_core.scheduler
    req = sched.requests["json"]
    assert started.wait(30)
    free_tokens = 0
    for _ in range(5):
        for o in eng.step():
            if o.request_id == "free": free_tokens = len(o.outputs[0].token_ids)
        assert req.status == RequestStatus.WAITING_FOR_FSM and req.num_computed_tokens == 0
    assert free_tokens >= 4  # the free request stepped meanwhile
    release.set()
    done = {}
    while eng.has_unfinished_requests():
        for o in eng.step():
            if o.finished: done[o.request_id] = o
    check_json(done["json"].outputs[0].text, SCHEMAS["flat"])
    assert done["free"].outputs[0].finish_reason == "length" and idle(llm)


def test_bad_grammar_fails_only_its_own_request(llm, monkeypatch):
    # at the front door: a ValueError naming the problem, nothing added
    with pytest.raises(ValueError, match='Unsupported type "foo"'):
        llm.generate(["hi"], SamplingParams(structured_outputs=SO(json={"type": "foo"})), use_tqdm=False)
    with pytest.raises(ValueError, match="parenthesis"):
        llm.generate(["hi"], SamplingParams(structured_outputs=SO(regex="(ab")), use_tqdm=False)
    assert idle(llm)
    # in the engine (validation skipped): its compile fails, it ends with "error"; the others are untouched
    good = SamplingParams(temperature=0, max_tokens=16)
    alone = llm.generate(["The capital of France is"], good, use_tqdm=False)[0].outputs[0].token_ids
    monkeypatch.setattr(litevllm.structured_output, "validate_structured_output", lambda p: None)
    outs = llm.generate(["The capital of France is", "bad", "A choice:"],
                        [good, SamplingParams(max_tokens=8, structured_outputs=SO(grammar="root ::= undefined_rule")),
                         SamplingParams(temperature=0, max_tokens=8, structured_outputs=SO(choice=["a", "b"]))], use_tqdm=False)
    assert outs[0].outputs[0].token_ids == alone
    assert outs[1].outputs[0].finish_reason == "error" and outs[1].outputs[0].token_ids == []
    assert outs[2].outputs[0].text in ("a", "b")
    assert idle(llm)


def test_preemption_keeps_the_matcher_consistent():
    "A pool too small for six JSON requests: some are preempted and recomputed; every matcher stays at num_output_tokens."
    llm = LLM(model=None, dtype="float32", max_model_len=128, block_size=16, num_gpu_blocks_override=12, max_num_seqs=6)
    eng, sched = llm.llm_engine, llm.llm_engine.engine_core.scheduler
    sp = SamplingParams(temperature=1.0, seed=11, max_tokens=70, structured_outputs=SO(json=SCHEMAS["flat"]))
    for i in range(6): eng.add_request(str(i), chat(llm, f"Person number {i} as JSON."), sp)
    done, checked = {}, 0
    while eng.has_unfinished_requests():
        for o in eng.step():
            if o.finished: done[o.request_id] = o.outputs[0]
        for r in sched.requests.values():
            g = r.structured_output_request.grammar
            if g is not None and not isinstance(g, Exception):
                assert g.num_processed_tokens == r.num_output_tokens, (r, g.num_processed_tokens)
                checked += r.num_preemptions > 0
    assert sched.num_preemptions > 0 and checked > 0  # preempted requests were seen, with their matcher in step
    for c in done.values():
        if c.finish_reason == "stop": check_json(c.text, SCHEMAS["flat"])
        else: assert c.finish_reason == "length"
    assert sum(c.finish_reason == "stop" for c in done.values()) >= 4


def test_server_response_format(monkeypatch):
    from litevllm.async_llm import AsyncLLM, AsyncEngineArgs
    from litevllm.server import build_app
    async def main():
        engine = AsyncLLM.from_engine_args(AsyncEngineArgs(max_model_len=512, dtype="float32"))
        try:
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=build_app(engine)), base_url="http://t", timeout=120) as c:
                m = "SmolLM2-135M-Instruct"
                msgs = [{"role": "user", "content": "Describe a person in JSON."}]
                r = await c.post("/v1/chat/completions", json=dict(model=m, messages=[{"role": "user", "content": "Anything"}], temperature=0, max_tokens=60,
                                                                  response_format={"type": "json_object"}))
                assert r.status_code == 200 and r.json()["choices"][0]["finish_reason"] == "stop"
                assert isinstance(json.loads(r.json()["choices"][0]["message"]["content"]), dict)
                rf = {"type": "json_schema", "json_schema": {"name": "person", "schema": SCHEMAS["flat"], "strict": True}}
                r = await c.post("/v1/chat/completions", json=dict(model=m, messages=msgs, temperature=0, max_tokens=60, response_format=rf))
                check_json(r.json()["choices"][0]["message"]["content"], SCHEMAS["flat"])
                r = await c.post("/v1/completions", json=dict(model=m, prompt="A person:", temperature=0, max_tokens=60, response_format=rf))
                check_json(r.json()["choices"][0]["text"], SCHEMAS["flat"])
                r = await c.post("/v1/completions", json=dict(model=m, prompt="Code:", max_tokens=10, structured_outputs={"regex": "[A-Z]{3}"}))
                assert re.fullmatch("[A-Z]{3}", r.json()["choices"][0]["text"])
                r = await c.post("/v1/chat/completions", json=dict(model=m, messages=msgs, max_tokens=10, structured_outputs={"choice": ["x", "y"]}))
                assert r.json()["choices"][0]["message"]["content"] in ("x", "y")
                r = await c.post("/v1/completions", json=dict(model=m, prompt="Hi", max_tokens=10,
                                                             structured_outputs={"grammar": 'root ::= "a" | "b" b', "regex": None}))
                assert r.status_code == 400 and r.json()["error"]["param"] == "structured_outputs" and "not defined" in r.json()["error"]["message"]
                bad = {"type": "json_schema", "json_schema": {"name": "p", "schema": {"type": "object", "properties": {"a": {"type": "nope"}}}}}
                for path, body in [("/v1/completions", dict(prompt="Hi")), ("/v1/chat/completions", dict(messages=msgs))]:
                    r = await c.post(path, json=dict(model=m, max_tokens=5, response_format=bad, **body))
                    err = r.json()["error"]
                    assert r.status_code == 400 and err["code"] == 400 and err["param"] == "response_format", r.json()
                    assert 'Unsupported type "nope"' in err["message"]
                # a grammar that gets past validation but fails to compile in the engine: a 500, as vLLM's finish reason "error"
                monkeypatch.setattr(litevllm.structured_output, "validate_structured_output", lambda p: None)
                monkeypatch.setattr(litevllm.entrypoints.openai.protocol, "validate_structured_output", lambda p: None)  # where the server calls it
                r = await c.post("/v1/completions", json=dict(model=m, prompt="Hi", max_tokens=5, structured_outputs={"grammar": "root ::= nope"}))
                assert r.status_code == 500 and "failed in the engine" in r.json()["error"]["message"], r.json()
                r = await c.post("/v1/completions", json=dict(model=m, prompt="Code:", max_tokens=10, structured_outputs={"regex": "[A-Z]{3}"}))
                assert r.status_code == 200 and re.fullmatch("[A-Z]{3}", r.json()["choices"][0]["text"])  # the engine is fine
        finally:
            engine.shutdown()
    asyncio.run(main())
