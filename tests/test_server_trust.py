"""Issue 39: bytes from a client are never trusted. Crafted `prompt_embeds` tensors (vLLM's CVE-2025-62164 and its
neighbours) get a 400 naming the field and leave the server serving; every route the app registers answers every
malformed body, an unknown model, a wrong method and a missing API key in OpenAI's error shape, never a 500 and never a
hang; /tokenize of chat messages with add_special_tokens; the metric families and counts vLLM 0.32's own tests read."""
import asyncio, base64, io, pickle, time
import httpx, pytest, torch
from fastapi.routing import APIRoute
from litevllm.async_llm import AsyncLLM, AsyncEngineArgs
from litevllm.metrics import parse_metrics
from litevllm.server import build_app, ServerOptions

NAME = "SmolLM2-135M-Instruct"
HIDDEN = 576

@pytest.fixture(scope="module")
def engine():
    eng = AsyncLLM.from_engine_args(AsyncEngineArgs(max_model_len=512, dtype="float32", seed=0, enable_prompt_embeds=True,
                                                    kv_cache_memory_bytes=64 * 2**20), served_model_name=NAME)
    yield eng
    eng.shutdown()

@pytest.fixture(scope="module")
def app(engine): return build_app(engine, [NAME], options=ServerOptions(enable_tokenizer_info_endpoint=True))

@pytest.fixture(scope="module")
def keyed_app(engine): return build_app(engine, [NAME], api_key="sekret")

def call(app, method, path, timeout=60, **kw):
    async def go():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app, raise_app_exceptions=False), base_url="http://t", timeout=timeout) as c:
            return await asyncio.wait_for(c.request(method, path, **kw), timeout)
    return asyncio.run(go())

def b64(obj) -> str:
    buf = io.BytesIO(); torch.save(obj, buf); return base64.b64encode(buf.getvalue()).decode()

def embeds(app, payload):
    return call(app, "POST", "/v1/completions", json=dict(model=NAME, prompt_embeds=payload, max_tokens=2, temperature=0))

def still_serving(app):
    r = call(app, "POST", "/v1/completions", json=dict(model=NAME, prompt="The capital of France is", max_tokens=3, temperature=0))
    assert r.status_code == 200 and r.json()["choices"][0]["text"]
    r = embeds(app, b64(torch.randn(3, HIDDEN)))
    assert r.status_code == 200, r.text

def assert_openai_error(r, status=None, param=None):
    assert r.status_code != 500 and r.status_code >= 400, (r.status_code, r.text[:300])
    if status is not None: assert r.status_code == status, (r.status_code, r.text[:300])
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["code"] == r.status_code and err["message"], err
    if param is not None: assert err["param"] == param, err
    return err

# --- crafted prompt embeddings -------------------------------------------------------------------------------------------

def test_sparse_index_outside_its_shape(app):
    "CVE-2025-62164: a (4, 576) COO tensor with an index of 10**9 must never reach to_dense()."
    bad = torch.sparse_coo_tensor(torch.tensor([[0, 10**9], [0, 3]]), torch.tensor([1.0, 2.0]), (4, HIDDEN), check_invariants=False)
    err = assert_openai_error(embeds(app, b64(bad)), 400, "prompt_embeds")
    assert "could not be deserialized" in err["message"] and "1000000000" in err["message"]
    bad = torch.sparse_coo_tensor(torch.tensor([[0, 1], [0, -5]]), torch.tensor([1.0, 2.0]), (4, HIDDEN), check_invariants=False)
    assert_openai_error(embeds(app, b64(bad)), 400, "prompt_embeds")  # a negative index too
    still_serving(app)

def test_sparse_csr_with_bad_indices(app):
    "Another sparse layout with inconsistent indices: the invariant check covers CSR too."
    bad = torch.sparse_csr_tensor(torch.tensor([0, 1, 2, 9]), torch.tensor([0, 10**6]), torch.tensor([1.0, 2.0]), (3, HIDDEN),
                                  check_invariants=False)
    assert_openai_error(embeds(app, b64(bad)), 400, "prompt_embeds")

def test_valid_sparse_is_densified(app):
    "A well-formed sparse tensor is served as its dense self (vLLM accepts them)."
    dense = torch.zeros(3, HIDDEN); dense[0, 1], dense[2, 5] = 0.5, -0.25
    a = embeds(app, b64(dense.to_sparse())).json()["choices"][0]["text"]
    assert a == embeds(app, b64(dense)).json()["choices"][0]["text"]

def test_huge_declared_shape_refused_before_allocating(app):
    "A few bytes declaring 4 TiB (or just more rows than max_model_len) is refused by its shape, fast, and nothing is allocated."
    huge = torch.sparse_coo_tensor(torch.zeros(2, 1, dtype=torch.long), torch.ones(1), (2**20, 2**20))
    t0 = time.perf_counter()
    err = assert_openai_error(embeds(app, b64(huge)), 400, "prompt_embeds")
    assert time.perf_counter() - t0 < 5 and "hidden_size 1048576" in err["message"]
    tall = torch.sparse_coo_tensor(torch.zeros(2, 1, dtype=torch.long), torch.ones(1), (10**7, HIDDEN))
    assert "maximum model length of 512" in assert_openai_error(embeds(app, b64(tall)), 400, "prompt_embeds")["message"]
    still_serving(app)

def test_byte_budget(app, monkeypatch):
    "vLLM's VLLM_MAX_EMBED_DECODE_BYTES bounds what a tensor may become once dense."
    monkeypatch.setenv("VLLM_MAX_EMBED_DECODE_BYTES", "1000")
    err = assert_openai_error(embeds(app, b64(torch.zeros(3, HIDDEN).to_sparse())), 400, "prompt_embeds")
    assert "exceeding the 1000 byte limit" in err["message"]

@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_values(app, value):
    t = torch.randn(3, HIDDEN); t[1, 7] = value
    assert "NaN or infinite" in assert_openai_error(embeds(app, b64(t)), 400, "prompt_embeds")["message"]
    assert "NaN or infinite" in assert_openai_error(embeds(app, b64(t.to_sparse())), 400, "prompt_embeds")["message"]

@pytest.mark.parametrize("obj,why", [({"embeds": torch.zeros(3, HIDDEN)}, "did not deserialize"),
                                     ([torch.zeros(3, HIDDEN)], "did not deserialize"),
                                     (7, "did not deserialize"),
                                     ("text", "did not deserialize"),
                                     (torch.zeros(3, HIDDEN, dtype=torch.int32), "not a floating-point"),
                                     (torch.zeros(3, HIDDEN, dtype=torch.complex64), "not a floating-point"),
                                     (torch.zeros(2, 3, HIDDEN), "2D tensor"),
                                     (torch.zeros(HIDDEN), "2D tensor"),
                                     (torch.zeros(3, 100), "hidden_size 100")])
def test_not_a_prompt_tensor(app, obj, why):
    assert why in assert_openai_error(embeds(app, b64(obj)), 400, "prompt_embeds")["message"]

def test_dense_tensor_lying_about_its_shape(app):
    "A dense tensor whose declared shape needs more bytes than its storage holds: torch refuses to grow a loaded storage."
    import collections
    class Lie:
        def __reduce__(self):
            return (torch._utils._rebuild_tensor_v2, (torch.storage.TypedStorage(wrap_storage=torch.zeros(4).untyped_storage(), dtype=torch.float32,
                    _internal=True), 0, (10**6, HIDDEN), (HIDDEN, 1), False, collections.OrderedDict()))
    assert_openai_error(embeds(app, b64(Lie())), 400, "prompt_embeds")

def test_code_and_garbage_never_run(app):
    "A pickle that would run code, truncated bytes and bytes that are no tensor file: 400s, and the server serves on."
    class Boom:
        def __reduce__(self): return (exec, ("import os; os._exit(3)",))
    payloads = [base64.b64encode(pickle.dumps(Boom())).decode(), b64(torch.zeros(3, HIDDEN))[:40], base64.b64encode(b"\x00" * 64).decode()]
    for p in payloads: assert_openai_error(embeds(app, p), 400, "prompt_embeds")
    assert_openai_error(embeds(app, "***not base64***"), 400)
    still_serving(app)

# --- every route, every malformed body -----------------------------------------------------------------------------------

MALFORMED = {"bad utf-8": (b'{"prompt": "\xff\xfe\xfa", "max_tokens": 4}', "application/json"),
             "truncated json": (b'{"prompt": "hi", "max_', "application/json"),
             "json array": (b"[1, 2, 3]", "application/json"),
             "json string": (b'"hello"', "application/json"),
             "json null": (b"null", "application/json"),
             "empty": (b"", "application/json"),
             "wrong content type": (b'{"prompt": "hi"}', "text/plain"),
             "form": (b"prompt=hi", "application/x-www-form-urlencoded"),
             "no content type": (b'{"prompt": "hi"}', None),
             "10 MB of nesting": (b"[" * 5_000_000 + b"]" * 5_000_000, "application/json"),
             "deep object": (b'{"prompt": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "application/json")}

def routes(app) -> list[tuple[str, str]]:
    "(method, path) of every route the app registers, path parameters filled in with a name nothing has."
    out = []
    for r in app.routes:
        if not isinstance(r, APIRoute): continue
        path = r.path.replace("{model:path}", "no-such-model").replace("{response_id}", "resp_nonexistent")
        out += [(m, path) for m in sorted(r.methods)]
    return out

def test_every_route_every_malformed_body(app):
    rs = routes(app)
    posts = [p for m, p in rs if m == "POST"]
    assert {"/v1/completions", "/v1/chat/completions", "/tokenize", "/detokenize", "/invocations", "/v1/responses"} <= set(posts)
    for path in posts:
        for name, (body, ctype) in MALFORMED.items():
            r = call(app, "POST", path, content=body, headers={"content-type": ctype} if ctype else {}, timeout=30)
            if r.status_code < 400: continue  # /ping (POST) takes no body: a 200 is its right answer
            err = assert_openai_error(r)
            assert r.status_code in (400, 404, 413, 422), (path, name, r.status_code)

def test_every_route_wrong_method_and_unknown_model(app):
    rs = routes(app)
    by_path = {}
    for m, p in rs: by_path.setdefault(p, set()).add(m)
    for path, methods in by_path.items():
        wrong = next(m for m in ("DELETE", "PUT", "PATCH") if m not in methods)
        err = assert_openai_error(call(app, wrong, path), 405)
        assert err["message"] == "Method Not Allowed"
    assert assert_openai_error(call(app, "GET", "/no/such/route"), 404)["message"] == "Not Found"
    for path, body in (("/v1/completions", dict(prompt="hi", max_tokens=2)), ("/v1/chat/completions", dict(messages=[{"role": "user", "content": "hi"}])),
                       ("/tokenize", dict(prompt="hi")), ("/detokenize", dict(tokens=[1, 2])), ("/v1/responses", dict(input="hi"))):
        assert_openai_error(call(app, "POST", path, json=body | dict(model="no-such-model")), 404, "model")
    assert_openai_error(call(app, "GET", "/v1/models/no-such-model"), 404, "model")
    assert_openai_error(call(app, "GET", "/v1/responses/resp_nonexistent"), 404)

def test_every_v1_route_needs_the_key(keyed_app):
    for m, p in routes(keyed_app):
        if not p.startswith("/v1"): continue
        err = assert_openai_error(call(keyed_app, m, p, json={}), 401)
        assert err["type"] == "AuthenticationError"
    ok = call(keyed_app, "GET", "/v1/models", headers={"Authorization": "Bearer sekret"})
    assert ok.status_code == 200 and ok.json()["data"][0]["id"] == NAME

def test_unforeseen_error_is_a_500_in_shape(engine):
    "A route that fails in a way no handler foresaw still answers in OpenAI's shape (vLLM's catch-all handler)."
    app = build_app(engine, [NAME])
    @app.get("/boom")
    async def boom(): raise RuntimeError("kaboom at /root/secret/path.py")
    err = call(app, "GET", "/boom").json()["error"]
    assert err["code"] == 500 and "kaboom" in err["message"] and "/root" not in err["message"]

# --- the list of issue 39 --------------------------------------------------------------------------------------------------

def test_tokenize_messages_with_special_tokens(app):
    "transformers 5's tokenizers have no build_inputs_with_special_tokens: the rendered chat is tokenized with the flag (vLLM)."
    msgs = [{"role": "user", "content": "hi"}]
    plain = call(app, "POST", "/tokenize", json=dict(model=NAME, messages=msgs)).json()
    special = call(app, "POST", "/tokenize", json=dict(model=NAME, messages=msgs, add_special_tokens=True))
    assert special.status_code == 200, special.text
    assert special.json()["tokens"] == plain["tokens"] and plain["count"] == 31  # vllm serve 0.32, same request: 31 tokens, the same ids

def test_metrics_counts_as_vllm_test_metrics(app, engine):
    "vLLM's tests/entrypoints/openai/test_metrics.py: 10 requests of the same prompt ids, max_tokens 10 (ignore_eos here:"
    " the default model may sample EOS early, which vLLM's test assumes TinyLlama does not)."
    before = parse_metrics(call(app, "GET", "/metrics").text)
    ids = engine.tokenizer("Hello my name is Robert and I love magic").input_ids
    for _ in range(10):
        r = call(app, "POST", "/v1/completions", json=dict(model=NAME, prompt=ids, max_tokens=10, ignore_eos=True))
        assert r.status_code == 200
    after = parse_metrics(call(app, "GET", "/metrics").text)
    lab = f'{{engine="0",model_name="{NAME}"}}'
    d = lambda k: after.get(k + lab, 0) - before.get(k + lab, 0)
    assert d("vllm:iteration_tokens_total_sum") == 10 * (len(ids) + 10)  # prompt tokens computed + tokens generated
    assert d("vllm:iteration_tokens_total_count") == 10 * 10            # one observation per token-making step (vLLM: 100)
    assert d("vllm:prompt_tokens_total") == 10 * len(ids) and d("vllm:generation_tokens_total") == 100

def test_metric_families_of_vllm_032(app):
    text = call(app, "GET", "/metrics").text
    m = parse_metrics(text)
    lab = f'engine="0",model_name="{NAME}"'
    assert m[f'vllm:engine_sleep_state{{{lab},sleep_state="awake"}}'] == 1
    for name in ("estimated_flops_per_gpu", "estimated_read_bytes_per_gpu", "estimated_write_bytes_per_gpu", "external_prefix_cache_hits",
                 "external_prefix_cache_queries", "mm_cache_hits", "mm_cache_queries"):
        assert m[f"vllm:{name}_total{{{lab}}}"] == 0
    assert f'vllm:request_success_total{{engine="0",finished_reason="repetition",model_name="{NAME}"}}' in m
