"""On a CUDA GPU: multi-LoRA through the engine (Triton SGMV kernels, eager: no CUDA graphs with LoRA) gives transformers + peft's
greedy tokens in float32, for each adapter alone and in one mixed batch."""
import pytest, torch
from transformers import AutoConfig, AutoModelForCausalLM
from litevllm import LLM, SamplingParams, LoRARequest
from litevllm.models.llama import save_random_model
from litevllm.lora.peft_helper import save_random_adapter

ENGINE_IN_PROCESS = True
pytestmark = pytest.mark.gpu  # conftest.py skips these without CUDA


def test_lora_on_cuda_equals_peft(tmp_path):
    from peft import PeftModel
    model = save_random_model(tmp_path / "m", "qwen3", hidden_size=256, intermediate_size=512, num_hidden_layers=4, num_attention_heads=8,
                              num_key_value_heads=2, head_dim=64, max_position_embeddings=1024)
    cfg = AutoConfig.from_pretrained(model)
    ads = {"att": save_random_adapter(tmp_path / "att", cfg, ["q_proj", "k_proj", "v_proj", "o_proj"], r=16, lora_alpha=32, seed=1, std=0.2),
           "mlp": save_random_adapter(tmp_path / "mlp", cfg, ["gate_proj", "up_proj", "down_proj"], r=8, lora_alpha=8, seed=2, std=0.2, use_rslora=True)}
    lrs = {n: LoRARequest(n, i + 1, str(p)) for i, (n, p) in enumerate(ads.items())}
    llm = LLM(str(model), device="cuda", dtype="float32", enable_lora=True, max_loras=2, max_model_len=512)
    assert llm.llm_engine.engine_core.model_runner.lora_manager.punica.use_triton
    assert not llm.llm_engine.engine_core.model_runner.cudagraphs  # eager with LoRA
    tok = llm.get_tokenizer()
    prompts = [list(range(100 + 7 * i, 140 + 11 * i)) for i in range(6)]
    names = [None, "att", "mlp", "att", None, "mlp"]
    sp = SamplingParams(temperature=0, max_tokens=16, ignore_eos=True)
    outs = llm.generate([{"prompt_token_ids": p} for p in prompts], sp, lora_request=[lrs[n] if n else None for n in names], use_tqdm=False)
    for p, n, o in zip(prompts, names, outs):
        m = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32)
        if n: m = PeftModel.from_pretrained(m, str(ads[n]))
        m = m.to("cuda").eval()
        ids = torch.tensor([p], device="cuda")
        with torch.no_grad(): ref = m.generate(ids, max_new_tokens=16, min_new_tokens=16, do_sample=False)[0, len(p):].tolist()
        assert o.outputs[0].token_ids == ref, (n, o.outputs[0].token_ids, ref)
