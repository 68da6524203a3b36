"The Triton backend inside the engine: identical greedy tokens to the torch backend (interpreted on CPU, compiled on CUDA)."
import os
import pytest, torch
from litevllm import LLM, SamplingParams
from litevllm.models.llama import save_random_model

ENGINE_IN_PROCESS = True  # these tests look inside the engine core (conftest: VLLM_ENABLE_V1_MULTIPROCESSING=0)

pytestmark = pytest.mark.skipif(not torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1",
                                reason="needs CUDA or TRITON_INTERPRET=1 (set by conftest.py on CPU)")


@pytest.fixture(scope="module", params=[16, 24, 80], ids=lambda d: f"head_dim{d}")
def tiny(tmp_path_factory, request):
    # 2 layers, 4 query heads over 2 KV heads (GQA): small enough for the interpreter. head_dim 24 and 80 are not powers of
    # two: the kernels pad them to 32 and 128 inside the tile
    return save_random_model(tmp_path_factory.mktemp("tiny") / "llama", "llama", num_hidden_layers=2, head_dim=request.param,
                             num_attention_heads=4, num_key_value_heads=2)


def test_triton_matches_torch_greedy(tiny):
    g = torch.Generator().manual_seed(0)
    # lengths around the block size (1, 15, 16, 17, 40), a chunked prompt and a shared prefix (prefix-cache hit)
    prompts = [torch.randint(3, 40000, (n,), generator=g).tolist() for n in (1, 15, 16, 17, 40)]
    prompts.append(prompts[-1][:32] + [5, 6, 7])
    sp = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)
    res = {}
    for backend in ("torch", "triton"):
        llm = LLM(str(tiny), attention_backend=backend, dtype="float32", max_model_len=128, block_size=16, max_num_batched_tokens=32,
                  num_gpu_blocks_override=32)
        runner = llm.llm_engine.engine_core.model_runner
        assert runner.attn.name == backend and runner.kv_caches[0][0].shape[-1] == runner.model.layers[0].self_attn.head_dim
        outs = llm.generate([{"prompt_token_ids": p} for p in prompts], sp, use_tqdm=False)
        res[backend] = [o.outputs[0].token_ids for o in outs]
    assert res["triton"] == res["torch"]
