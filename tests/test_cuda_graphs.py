"On a CUDA GPU: decode steps replayed as CUDA graphs give the same greedy tokens as eager steps; the KV pool is sized by a profiling run."
import gc
import pytest, torch
from litevllm import LLM, SamplingParams
from litevllm.attention import kv_cache_bytes_per_block
from litevllm.models.llama import save_random_model

ENGINE_IN_PROCESS = True  # these tests look inside the engine core (conftest: VLLM_ENABLE_V1_MULTIPROCESSING=0)

pytestmark = pytest.mark.gpu  # conftest.py skips these without CUDA


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return save_random_model(tmp_path_factory.mktemp("graphs") / "qwen3", "qwen3", hidden_size=256, intermediate_size=512,
                             num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=2, head_dim=128)


def greedy(model, dtype, enforce_eager, num_prompts):
    llm = LLM(str(model), device="cuda", dtype=dtype, max_model_len=256, max_num_seqs=16, enforce_eager=enforce_eager,
              cudagraph_capture_sizes=[1, 2, 4, 8, 16])
    runner = llm.llm_engine.engine_core.model_runner
    calls = []
    hook = runner.model.register_forward_pre_hook(lambda m, args: calls.append(args[0].shape[0]))  # eager forwards only
    g = torch.Generator().manual_seed(num_prompts)
    ps = [torch.randint(3, 40000, (int(n),), generator=g).tolist() for n in torch.randint(1, 60, (num_prompts,), generator=g)]
    outs = llm.generate([{"prompt_token_ids": p} for p in ps], SamplingParams(temperature=0, max_tokens=30, ignore_eos=True), use_tqdm=False)
    hook.remove()
    return [o.outputs[0].token_ids for o in outs], calls, runner


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("num_prompts", [1, 3, 13])  # 3 and 13 run as padded graphs of 4 and 16
def test_cudagraphs_match_eager(model, dtype, num_prompts):
    eager, eager_calls, r0 = greedy(model, dtype, True, num_prompts)
    graphs, graph_calls, r1 = greedy(model, dtype, False, num_prompts)
    assert r0.cudagraph_sizes == [] and r1.cudagraph_sizes == [1, 2, 4, 8, 16]
    assert len(eager_calls) >= 29 and len(graph_calls) < len(eager_calls) - 25  # the decode steps were replays
    assert graphs == eager


def test_enforce_eager_and_torch_backend_capture_nothing(model):
    llm = LLM(str(model), device="cuda", attention_backend="torch", max_model_len=256, max_num_seqs=4)
    assert llm.llm_engine.engine_core.model_runner.cudagraph_sizes == []


def test_kv_pool_from_profiling_run(model):
    "More gpu_memory_utilization, more blocks: the difference in bytes is what the extra share of the card holds."
    hf_config = None
    blocks = {}
    for util in (0.3, 0.5):
        llm = LLM(str(model), device="cuda", dtype="bfloat16", max_model_len=512, max_num_seqs=100000,
                  gpu_memory_utilization=util, enforce_eager=True)
        runner = llm.llm_engine.engine_core.model_runner
        blocks[util], hf_config = runner.num_blocks, llm.llm_engine.vllm_config.hf_config
        del llm, runner; gc.collect(); torch.cuda.empty_cache()
    per_block = kv_cache_bytes_per_block(hf_config, 16, torch.bfloat16)
    total = torch.cuda.mem_get_info()[1]
    extra = (blocks[0.5] - blocks[0.3]) * per_block
    assert abs(extra - 0.2 * total) < 0.02 * total, (blocks, extra / total)
    # the whole pool fits in the share with the weights and activations beside it
    assert blocks[0.3] * per_block < 0.3 * total
