"""Issue 26: the vLLM 0.32 server details that the recorded bodies (test_vllm_bodies) do not pin down by value:
truncation, beam search, prompt limits before tokenizing, list limits, the model card route, /load, token-id logprobs,
and vLLM-style launch commands driven end to end with the official openai client."""
import asyncio, base64, io, json, time
import httpx, openai, pytest, torch
from litevllm.async_llm import AsyncLLM, AsyncEngineArgs
from litevllm.server import build_app, ServerOptions, ServerLimits, prepare_completion, CompletionRequest
from test_server import start_server, stop_server

ENGINE_IN_PROCESS = True
NAME = "SmolLM2-135M-Instruct"

@pytest.fixture(scope="module")
def env():
    eng = AsyncLLM.from_engine_args(AsyncEngineArgs(max_model_len=8192, dtype="float32", seed=0, enable_prompt_embeds=True, kv_cache_memory_bytes=400 * 2**20), served_model_name=NAME)
    app = build_app(eng, [NAME], options=ServerOptions(enable_server_load_tracking=True))
    yield eng, app
    eng.shutdown()

def call(app, method, path, **kw):
    async def go():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t", timeout=300) as c:
            return await c.request(method, path, **kw)
    return asyncio.run(go())

def cmpl(**kw): return dict(model=NAME, prompt="The capital of France is", max_tokens=4, temperature=0) | kw

def test_truncate_prompt_tokens(env):
    _, app = env
    long = "one two three four five six seven eight nine ten " * 3
    r = call(app, "POST", "/v1/completions", json=cmpl(prompt=long, truncate_prompt_tokens=5)).json()
    assert r["usage"]["prompt_tokens"] == 5
    # the kept tokens are the last five: the same completion as sending those five ids
    ids = call(app, "POST", "/tokenize", json=dict(model=NAME, prompt=long)).json()["tokens"]
    same = call(app, "POST", "/v1/completions", json=cmpl(prompt=ids[-5:])).json()
    assert r["choices"][0]["text"] == same["choices"][0]["text"]
    chat = call(app, "POST", "/v1/chat/completions", json=dict(model=NAME, messages=[{"role": "user", "content": long}], max_tokens=2,
                                                               truncate_prompt_tokens=7)).json()
    assert chat["usage"]["prompt_tokens"] == 7
    tok = call(app, "POST", "/tokenize", json=dict(model=NAME, prompt=long, truncate_prompt_tokens=3)).json()
    assert tok["tokens"] == ids[-3:] and tok["count"] == 3
    right = call(app, "POST", "/v1/completions", json=cmpl(prompt=long, truncate_prompt_tokens=4, truncation_side="right")).json()
    assert right["usage"]["prompt_tokens"] == 4
    r = call(app, "POST", "/v1/completions", json=cmpl(truncate_prompt_tokens=9000))
    assert r.status_code == 400 and r.json()["error"]["param"] == "truncate_prompt_tokens"
    assert "cannot be greater than max_model_len = 8192" in r.json()["error"]["message"]
    assert call(app, "POST", "/v1/completions", json=cmpl(truncate_prompt_tokens=-2)).status_code == 400

def test_huge_prompt_refused_before_tokenizing(env):
    "A 20 MB prompt is refused on its length in characters, with the context-length 400, before any tokenizing."
    _, app = env
    for body in (cmpl(prompt="a" * 20_000_000), dict(model=NAME, messages=[{"role": "user", "content": "a" * 20_000_000}])):
        path = "/v1/completions" if "prompt" in body else "/v1/chat/completions"
        r = call(app, "POST", path, json=body)
        err = r.json()["error"]  # param input_text: the check on characters, made before any tokenizing (input_tokens after)
        assert r.status_code == 400 and err["param"] == "input_text" and "maximum context length is 8192 tokens" in err["message"], err
    # with truncation asked for, the same text is cut to what can fit and served
    r = call(app, "POST", "/v1/completions", json=cmpl(prompt="word " * 400_000, truncate_prompt_tokens=16, max_tokens=1))
    assert r.status_code == 200 and r.json()["usage"]["prompt_tokens"] == 16

def test_max_tokens_capped_only_by_context(env):
    "vLLM has no max_tokens cap below the context: 5000 with a short prompt on an 8192-token model is accepted."
    _, app = env
    st = app.state.server
    [(_, params, _)] = prepare_completion(st, CompletionRequest(model=NAME, prompt="Hi", max_tokens=5000))
    assert params.max_tokens == 5000
    [(prompt, params, _)] = prepare_completion(st, CompletionRequest(model=NAME, prompt="Hi", max_tokens=8192))
    assert params.max_tokens == 8192 - len(prompt["prompt_token_ids"])  # capped to the room the prompt leaves
    r = call(app, "POST", "/v1/completions", json=cmpl(max_tokens=9000))
    assert r.status_code == 400 and r.json()["error"]["param"] == "max_tokens"

@pytest.mark.parametrize("field,value", [("bad_words", ["w"] * 129), ("stop_token_ids", [1] * 1025), ("allowed_token_ids", [1] * (2**18 + 1))])
def test_list_limits(env, field, value):
    r = call(env[1], "POST", "/v1/completions", json=cmpl(**{field: value}))
    assert r.status_code == 400 and r.json()["error"]["param"] == field and "the server's limit" in r.json()["error"]["message"]

def test_beam_search(env):
    _, app = env
    for path, body in (("/v1/completions", cmpl(n=2, use_beam_search=True, max_tokens=6)),
                       ("/v1/chat/completions", dict(model=NAME, messages=[{"role": "user", "content": "Say hi."}], n=2, temperature=0,
                                                     use_beam_search=True, max_tokens=6))):
        r = call(app, "POST", path, json=body).json()
        texts = [c["text"] if "text" in c else c["message"]["content"] for c in r["choices"]]
        assert len(texts) == 2 and texts[0] != texts[1], texts
        assert [c["index"] for c in r["choices"]] == [0, 1]

def test_model_card(env):
    _, app = env
    card = call(app, "GET", f"/v1/models/{NAME}").json()
    listed = call(app, "GET", "/v1/models").json()["data"][0]
    assert card["id"] == NAME and card["root"] == listed["root"] and card["parent"] is None and card["permission"][0]["object"] == "model_permission"
    r = call(app, "GET", "/v1/models/nope")
    assert r.status_code == 404 and r.json()["error"]["message"].startswith("The model `nope` does not exist.")

def test_token_id_logprobs(env):
    _, app = env
    r = call(app, "POST", "/v1/completions", json=cmpl(logprobs=2, return_tokens_as_token_ids=True, return_token_ids=True)).json()
    c = r["choices"][0]
    assert c["logprobs"]["tokens"] == [f"token_id:{t}" for t in c["token_ids"]]
    assert all(k.startswith("token_id:") for top in c["logprobs"]["top_logprobs"] for k in top)
    r = call(app, "POST", "/v1/chat/completions", json=dict(model=NAME, messages=[{"role": "user", "content": "Hi"}], max_tokens=3, temperature=0,
                                                            logprobs=True, top_logprobs=2, return_tokens_as_token_ids=True)).json()
    assert all(e["token"].startswith("token_id:") for e in r["choices"][0]["logprobs"]["content"])

def test_load_counts_requests_in_flight(env):
    "GET /load while a full and a streamed request run: 2, then 0 (vLLM's --enable-server-load-tracking)."
    _, app = env
    async def go():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t", timeout=300) as c:
            work = [asyncio.create_task(c.post("/v1/completions", json=cmpl(max_tokens=48, ignore_eos=True, stream=s))) for s in (False, True)]
            seen = 0
            while not all(t.done() for t in work):
                seen = max(seen, (await c.get("/load")).json()["server_load"]); await asyncio.sleep(0.02)
            await asyncio.gather(*work)
            return seen, (await c.get("/load")).json()["server_load"]
    assert asyncio.run(go()) == (2, 0)

def test_prompt_embeds_match_token_ids(env):
    "The embeddings of five prompt tokens, sent as prompt_embeds, give the completion those token ids give."
    eng, app = env
    ids = call(app, "POST", "/tokenize", json=dict(model=NAME, prompt="The capital of France is")).json()["tokens"]
    from safetensors import safe_open
    path = next(eng.vllm_config.model_path.glob("*.safetensors"))
    with safe_open(str(path), "pt") as f:
        key = next(k for k in f.keys() if k.endswith("embed_tokens.weight"))
        emb = f.get_tensor(key)[ids].float()
    buf = io.BytesIO(); torch.save(emb, buf)
    a = call(app, "POST", "/v1/completions", json=dict(model=NAME, prompt_embeds=base64.b64encode(buf.getvalue()).decode(), max_tokens=6, temperature=0)).json()
    b = call(app, "POST", "/v1/completions", json=cmpl(prompt=ids, max_tokens=6)).json()
    assert a["choices"][0]["text"] == b["choices"][0]["text"] and a["usage"]["prompt_tokens"] == len(ids)

def test_vllm_style_launch_end_to_end():
    "`litevllm serve` started with a vLLM launch command's flags; the openai client's calls as against vLLM."
    proc, base = start_server("--served-model-name", "my-model", "--gpu-memory-utilization", "0.9", "--enforce-eager", "--max-num-seqs", "32",
                              "--seed", "0", "--enable-prompt-tokens-details", "--enable-force-include-usage", "--uvicorn-log-level", "warning",
                              "--enable-server-load-tracking", "--enable-tokenizer-info-endpoint", "--max-logprobs", "-1")
    try:
        c = openai.OpenAI(base_url=f"{base}/v1", api_key="x", max_retries=0, timeout=120)
        assert [m.id for m in c.models.list().data] == ["my-model"]
        r = c.completions.create(model="my-model", prompt="The capital of France is", max_tokens=4, temperature=0)
        assert r.usage.prompt_tokens_details.cached_tokens is not None
        chunks = list(c.chat.completions.create(model="my-model", messages=[{"role": "user", "content": "Hi"}], max_tokens=4, stream=True))
        assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 4 and all(ch.usage is not None for ch in chunks)
        lp = c.completions.create(model="my-model", prompt="Hi", max_tokens=1, logprobs=-1, temperature=0)  # the whole vocabulary
        assert len(lp.choices[0].logprobs.top_logprobs[0]) > 40_000
        assert httpx.get(f"{base}/tokenizer_info").json()["tokenizer_class"]
        assert httpx.get(f"{base}/load").json() == {"server_load": 0}
    finally: stop_server(proc)
