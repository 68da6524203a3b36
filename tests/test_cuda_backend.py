"""On a CUDA GPU: the Triton backend's greedy tokens equal the torch backend's through chunked prefill, prefix-cache hits and
preemption: exactly in fp32; in bf16 as vLLM's `check_logprobs_close` does (two kernels round differently, so on a near tie the
paths may part: where they first differ, each token must be among the other's top-5, and the rest is not compared)."""
import pytest, torch
from litevllm import LLM, SamplingParams
from litevllm.models.llama import save_random_model

ENGINE_IN_PROCESS = True  # these tests look inside the engine core (conftest: VLLM_ENABLE_V1_MULTIPROCESSING=0)

pytestmark = pytest.mark.gpu  # conftest.py skips these without CUDA


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    # Qwen3's layout (q/k norms, GQA 4) at a small size; head_dim 128 as in the real 0.6B-8B models
    return save_random_model(tmp_path_factory.mktemp("cuda") / "qwen3", "qwen3", hidden_size=256, intermediate_size=512,
                             num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=2, head_dim=128,
                             max_position_embeddings=1024)


def prompts(n, lo, hi, seed=0, prefix=0):
    "n random prompts of lo..hi tokens; the first `prefix` tokens shared by all (a prefix-cache hit after the first)."
    g = torch.Generator().manual_seed(seed)
    shared = torch.randint(3, 40000, (prefix,), generator=g).tolist()
    return [shared + torch.randint(3, 40000, (int(torch.randint(lo, hi + 1, (1,), generator=g)),), generator=g).tolist() for _ in range(n)]


CASES = {  # engine settings, prompts
    "chunked_prefill": (dict(max_num_batched_tokens=64), prompts(6, 1, 300)),
    "prefix_hits":     (dict(), prompts(8, 5, 40, seed=1, prefix=80)),
    "preemption":      (dict(num_gpu_blocks_override=16, max_model_len=128), prompts(10, 20, 60, seed=2)),  # 256 slots, ~1000 wanted
}


def run(model, backend, dtype, kw, ps, max_tokens=40, prefix_first=False):
    llm = LLM(str(model), device="cuda", dtype=dtype, attention_backend=backend, block_size=16, **(dict(max_model_len=512) | kw))
    assert llm.llm_engine.engine_core.model_runner.attn.name == backend
    sp = SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True, logprobs=5)
    if prefix_first: llm.generate([{"prompt_token_ids": ps[0]}], sp, use_tqdm=False)  # its blocks stay cached for the rest
    outs = llm.generate([{"prompt_token_ids": p} for p in ps], sp, use_tqdm=False)
    return [(o.outputs[0].token_ids, o.outputs[0].logprobs) for o in outs], outs, llm


def check_logprobs_close(a, b):
    "vLLM's check: equal tokens up to the first difference, where each side's token is in the other's top logprobs."
    for i, ((ta, la), (tb, lb)) in enumerate(zip(a, b)):
        for j, (x, y) in enumerate(zip(ta, tb)):
            if x != y:
                assert x in lb[j] and y in la[j], f"prompt {i}, token {j}: {x} vs {y}, not in each other's top logprobs"
                break


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("case", list(CASES))
def test_triton_equals_torch_on_cuda(model, dtype, case):
    kw, ps = CASES[case]
    toks = {}
    for backend in ("torch", "triton"):
        toks[backend], outs, llm = run(model, backend, dtype, kw, ps, prefix_first=case == "prefix_hits")
        assert all(len(t) == 40 for t, _ in toks[backend])
        if case == "prefix_hits": assert min(o.num_cached_tokens for o in outs) >= 64  # 80 shared tokens: 5 full blocks
        if case == "preemption": assert llm.llm_engine.get_stats().num_preemptions > 0
    if dtype == "float32": assert [t for t, _ in toks["triton"]] == [t for t, _ in toks["torch"]]
    else: check_logprobs_close(toks["triton"], toks["torch"])
