"On a CUDA GPU: speculative decoding (ngram, a draft model) gives the same greedy tokens as plain decoding, with CUDA graphs on for the steps without drafts."
import pytest, torch
from litevllm import LLM, SamplingParams
from litevllm.models.llama import save_random_model

ENGINE_IN_PROCESS = True
pytestmark = pytest.mark.gpu  # conftest.py skips these without CUDA


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("spec")
    shape = dict(hidden_size=256, intermediate_size=512, num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=2, head_dim=128)
    return (save_random_model(d / "target", "qwen3", **shape),
            save_random_model(d / "draft", "qwen3", seed=1, **{**shape, "num_hidden_layers": 1}))


def run(model, spec=None, **kw):
    llm = LLM(str(model), device="cuda", dtype="float32", max_model_len=256, max_num_seqs=16, speculative_config=spec, **kw)
    g = torch.Generator().manual_seed(0)
    base = [torch.randint(3, 40000, (8,), generator=g).tolist() for _ in range(6)]
    ps = [b * 3 for b in base]  # repeated text: the n-gram proposer finds matches
    outs = llm.generate([{"prompt_token_ids": p} for p in ps], SamplingParams(temperature=0, max_tokens=40, ignore_eos=True), use_tqdm=False)
    pool = llm.llm_engine.engine_core.engine_core.scheduler.kv_cache_manager.block_pool
    assert pool.get_num_free_blocks() == pool.num_blocks
    return [o.outputs[0].token_ids for o in outs]


@pytest.mark.parametrize("enforce_eager", [True, False])
def test_spec_decode_matches_plain_on_cuda(models, enforce_eager):
    target, draft = models
    want = run(target, enforce_eager=enforce_eager)
    assert run(target, {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 2}, enforce_eager=enforce_eager) == want
    assert run(target, {"method": "draft_model", "model": str(target), "num_speculative_tokens": 3}, enforce_eager=enforce_eager) == want
    assert run(target, {"method": "draft_model", "model": str(draft), "num_speculative_tokens": 3}, enforce_eager=enforce_eager) == want
