"""Issue 43, item 2: a GGUF file served as it ships. The default model's own Q4_1 file through the OpenAI server and
offline (float32 and bfloat16), its weights kept in their blocks; greedy tokens equal transformers' on the same file's
dequantized weights; every block freed. The other formats end to end (a Q4_K/Q5_K/Q6_K/Q4_0 file against transformers:
the first token equal, then agreement, the K formats' decode rounding x to int8; a BF16 file equal) are nbs/29_gguf's; the kernels against the torch reference, on AVX-512 and as AVX2, kernels_nbs/05_cpu_gguf's."""
import asyncio
import httpx, pytest, torch
from litevllm import LLM, SamplingParams
from litevllm.async_llm import AsyncLLM, AsyncEngineArgs
from litevllm.config import default_gguf_path, default_model_path
from litevllm.server import build_app

ENGINE_IN_PROCESS = True  # the tests look at the block pool
PROMPTS = ["The capital of France is", "def fibonacci(n):", "Water boils at"]


def hf_greedy(hf, tok, prompt:str, n:int) -> list[int]:
    ids = tok(prompt, return_tensors="pt").input_ids
    with torch.no_grad(): return hf.generate(ids, max_new_tokens=n, do_sample=False)[0, ids.shape[1]:].tolist()


@pytest.fixture(scope="module")
def tok():
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(default_model_path())


@pytest.fixture(scope="module")
def engine():
    eng = AsyncLLM.from_engine_args(AsyncEngineArgs(model=str(default_gguf_path()), max_model_len=512, dtype="float32", seed=0,
                                                    kv_cache_memory_bytes=64 * 2**20), served_model_name="smollm2-q4_1")
    yield eng
    eng.shutdown()


def call(app, method, path, **kw):
    async def go():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t", timeout=120) as c:
            return await c.request(method, path, **kw)
    return asyncio.run(go())


def test_server_completions_match_transformers(engine, hf_default_model, tok):
    "POST /v1/completions on the Q4_1 file: greedy tokens (return_token_ids) equal transformers' on its dequantized weights."
    app = build_app(engine, ["smollm2-q4_1"])
    for p in PROMPTS:
        r = call(app, "POST", "/v1/completions", json=dict(model="smollm2-q4_1", prompt=p, max_tokens=16, temperature=0, return_token_ids=True))
        assert r.status_code == 200, r.text
        choice = r.json()["choices"][0]
        assert choice["token_ids"] == hf_greedy(hf_default_model, tok, p, 16)
        assert choice["text"] == tok.decode(choice["token_ids"])
    r = call(app, "POST", "/v1/chat/completions", json=dict(model="smollm2-q4_1", messages=[{"role": "user", "content": "Say hi"}],
                                                             max_tokens=8, temperature=0))
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"]  # the chat template the file carries
    models = call(app, "GET", "/v1/models").json()["data"]
    assert [m["id"] for m in models] == ["smollm2-q4_1"]


def test_offline_q4_1_float32_and_bfloat16(hf_default_model, tok):
    "LLM(model=file.gguf): float32 equals transformers; bfloat16 activations over the same blocks agree on the first tokens; no block leaks."
    want = [hf_greedy(hf_default_model, tok, p, 12) for p in PROMPTS]
    for dtype, agree in (("float32", 12), ("bfloat16", 3)):
        llm = LLM(model=str(default_gguf_path()), dtype=dtype, max_model_len=512, num_gpu_blocks_override=48)
        got = [list(o.outputs[0].token_ids) for o in llm.generate(PROMPTS, SamplingParams(temperature=0, max_tokens=12), use_tqdm=False)]
        assert [g[:agree] for g in got] == [w[:agree] for w in want], dtype
        pool = llm.llm_engine.engine_core.scheduler.kv_cache_manager.block_pool
        assert pool.get_num_free_blocks() == pool.num_blocks
        del llm

