"The LoRA SGMV Triton kernels against their torch reference: small shapes under TRITON_INTERPRET=1 on CPU, compiled (and bigger) on a GPU."
import pytest, torch
from litevllm.kernels.lora import lora_ref, lora_sgmv, make_lora_batch

DEV = "cuda" if torch.cuda.is_available() else "cpu"
TOL = {torch.float32: 1e-4, torch.float16: 3e-3, torch.bfloat16: 2e-2}


@pytest.mark.parametrize("T,slots,IN,R,OUT", [(37, 3, 48, 24, 80), (5, 1, 32, 16, 16), (40, 4, 64, 48, 96), (1, 2, 32, 8, 40)])
def test_sgmv_small(T, slots, IN, R, OUT):
    y, x, a, b, ts, meta = make_lora_batch(T, slots, IN, R, OUT, device=DEV, seed=T)
    out = lora_sgmv(y.clone(), x, a, b, meta)
    torch.testing.assert_close(out, lora_ref(y, x, a, b, ts), atol=1e-4, rtol=1e-4)
    assert torch.equal(out[ts < 0], y[ts < 0])


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("T,slots,IN,R,OUT", [(512, 4, 576, 48, 960), (64, 8, 4096, 16, 4096), (3000, 2, 1536, 32, 576)])
def test_sgmv_cuda(dtype, T, slots, IN, R, OUT):
    y, x, a, b, ts, meta = make_lora_batch(T, slots, IN, R, OUT, dtype=dtype, device="cuda", seed=1)
    torch.testing.assert_close(lora_sgmv(y.clone(), x, a, b, meta).float(), lora_ref(y, x, a, b, ts).float(), atol=TOL[dtype] * 10, rtol=TOL[dtype])
