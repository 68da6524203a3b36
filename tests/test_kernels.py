"Triton kernels against their torch references: small shapes under TRITON_INTERPRET=1 on CPU, bigger compiled ones on a GPU."
import pytest
import torch
from litevllm.kernels.store_kvcache import store_kvcache, store_kvcache_ref
from litevllm.kernels.paged_attention import (make_paged_batch, paged_attention, paged_attention_ref,
                                              paged_decode_attention, paged_prefill_attention)

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
TOL = {torch.float32: 1e-4, torch.float16: 3e-3, torch.bfloat16: 2e-2}
ids = lambda d: str(d).removeprefix("torch.")
DEV = "cuda" if torch.cuda.is_available() else "cpu"  # the small tests run compiled on a GPU machine, interpreted elsewhere


def run_store(num_tokens, num_kv_heads, head_dim, dtype, num_pad=3, num_blocks=8, block_size=16, device=DEV, seed=0):
    "store_kvcache vs the reference on K/V that are strided views into one fused QKV tensor; padding slots anywhere."
    g = torch.Generator(device).manual_seed(seed)
    width = num_kv_heads * head_dim
    qkv = torch.randn(num_tokens + num_pad, 4 * width, generator=g, device=device).to(dtype)  # (tokens, q(2 heads/kv)|k|v)
    _, key, value = qkv.split([2 * width, width, width], dim=-1)
    key, value = key.view(-1, num_kv_heads, head_dim), value.view(-1, num_kv_heads, head_dim)  # (tokens, kv_heads, head_dim)
    slots = torch.randperm(num_blocks * block_size, generator=g, device=device)[:num_tokens + num_pad]
    slots[torch.randperm(num_tokens + num_pad, generator=g, device=device)[:num_pad]] = -1
    k_cache, v_cache = (torch.randn(num_blocks, block_size, num_kv_heads, head_dim, generator=g, device=device).to(dtype) for _ in range(2))
    k_ref, v_ref, k_out, v_out = k_cache.clone(), v_cache.clone(), k_cache.clone(), v_cache.clone()
    store_kvcache_ref(key, value, k_ref, v_ref, slots)
    store_kvcache(key, value, k_out, v_out, slots)
    assert torch.equal(k_out, k_ref) and torch.equal(v_out, v_ref)
    untouched = torch.ones(num_blocks * block_size, dtype=torch.bool, device=device)
    untouched[slots[slots >= 0]] = False
    assert torch.equal(k_out.view(-1, num_kv_heads, head_dim)[untouched], k_cache.view(-1, num_kv_heads, head_dim)[untouched])
    assert torch.equal(v_out.view(-1, num_kv_heads, head_dim)[untouched], v_cache.view(-1, num_kv_heads, head_dim)[untouched])


@pytest.mark.parametrize("dtype", DTYPES, ids=ids)
@pytest.mark.parametrize("num_kv_heads,head_dim", [(1, 64), (2, 128), (3, 64), (2, 24), (1, 80), (2, 96)])
def test_store_kvcache(dtype, num_kv_heads, head_dim): run_store(20, num_kv_heads, head_dim, dtype)


def test_store_kvcache_all_padding():
    k_cache = torch.randn(2, 16, 2, 64, device=DEV); before = k_cache.clone()
    ones, empty = torch.ones(4, 2, 64, device=DEV), torch.empty(0, 2, 64, device=DEV)
    store_kvcache(ones, ones, k_cache, k_cache.clone(), torch.full((4,), -1, device=DEV))
    store_kvcache(empty, empty, k_cache, k_cache.clone(), torch.empty(0, dtype=torch.int64, device=DEV))
    assert torch.equal(k_cache, before)


def run_attention(fn, q_lens, seq_lens, dtype=torch.float32, num_splits=None, **kw):
    "Run a kernel and paged_attention_ref on one random batch; assert they agree within the dtype's tolerance."
    batch = make_paged_batch(q_lens, seq_lens, dtype=dtype, **kw)
    ref = paged_attention_ref(**batch)
    if fn is paged_decode_attention:
        got = fn(batch["q"], batch["k_cache"], batch["v_cache"], batch["block_tables"], batch["seq_lens"], batch["scale"],
                 num_splits=num_splits)
    else: got = fn(**batch)
    assert got.dtype == batch["q"].dtype and got.shape == batch["q"].shape
    err = (got.float() - ref.float()).abs().max().item() if got.numel() else 0.0
    assert err < TOL[dtype], f"max abs error {err} >= {TOL[dtype]}"


LENS = [1, 15, 16, 17, 70]  # 1 token, block_size - 1, block_size, block_size + 1, several blocks


@pytest.mark.parametrize("num_splits", [1, 2, 3])
@pytest.mark.parametrize("num_heads,num_kv_heads", [(2, 2), (4, 1), (8, 1)])
def test_decode(num_splits, num_heads, num_kv_heads):
    run_attention(paged_decode_attention, [1] * len(LENS), LENS, num_splits=num_splits, num_heads=num_heads, num_kv_heads=num_kv_heads)


PREFILL_CASES = {
    "prefill":       dict(q_lens=LENS, seq_lens=LENS),
    "cached_prefix": dict(q_lens=[1, 2, 3], seq_lens=[70, 45, 33], num_heads=4),
    "chunked":       dict(q_lens=[20], seq_lens=[50], num_blocks=12),  # blocks for the rest of the prompt hold garbage
    "empty_entry":   dict(q_lens=[5, 0, 9], seq_lens=[5, 12, 30], num_heads=8, head_dim=128, block_size=32),
    "tile_boundary": dict(q_lens=[70, 1], seq_lens=[90, 20], num_heads=2, num_kv_heads=2),
    "block_size_64": dict(q_lens=[3, 40], seq_lens=[100, 40], block_size=64, num_heads=4, num_kv_heads=2),
}


@pytest.mark.parametrize("case", list(PREFILL_CASES))
def test_prefill(case): run_attention(paged_prefill_attention, **PREFILL_CASES[case])


@pytest.mark.parametrize("dtype", DTYPES, ids=ids)
@pytest.mark.parametrize("head_dim,block_size,num_heads,num_kv_heads", [(64, 16, 2, 2), (128, 32, 4, 1), (64, 64, 8, 1)])
def test_paged_attention_mixed(dtype, head_dim, block_size, num_heads, num_kv_heads):
    run_attention(paged_attention, [1, 4, 17, 0], [40, 24, 17, 9], dtype=dtype, head_dim=head_dim, block_size=block_size,
                  num_heads=num_heads, num_kv_heads=num_kv_heads, seed=head_dim + block_size)


@pytest.mark.parametrize("dtype", DTYPES, ids=ids)
def test_paged_attention_decode_batch(dtype):
    run_attention(paged_attention, [1, 1], [33, 65], dtype=dtype, num_heads=4, head_dim=128)


def test_out_is_written():
    batch = make_paged_batch([1, 6, 0, 3], [10, 6, 2, 10], block_size=16, num_heads=2, head_dim=64)
    out = torch.full_like(batch["q"], float("nan"))
    assert paged_attention(**batch, out=out) is out
    torch.testing.assert_close(out, paged_attention_ref(**batch), atol=1e-5, rtol=0)


def test_chunks_equal_whole_prompt():
    "store + attend a 20-token prompt in chunks (12+8, then 19+1 through the decode kernel) = in one go."
    g = torch.Generator(DEV).manual_seed(0)
    q, k, v = (torch.randn(20, h, 64, generator=g, device=DEV) for h in (2, 1, 1))
    table = torch.tensor([[3, 1]], dtype=torch.int32, device=DEV)
    i32 = lambda *xs: torch.tensor(xs, dtype=torch.int32, device=DEV)
    def run(chunks):
        k_cache, v_cache, outs, done = torch.zeros(4, 16, 1, 64, device=DEV), torch.zeros(4, 16, 1, 64, device=DEV), [], 0
        for c in chunks:
            pos = torch.arange(done, done + c, device=DEV)
            store_kvcache(k[pos], v[pos], k_cache, v_cache, (table[0, pos // 16] * 16 + pos % 16).long())
            outs.append(paged_attention(q[pos], k_cache, v_cache, table, i32(done + c), i32(0, c), c, 64 ** -0.5))
            done += c
        return torch.cat(outs)
    whole = run([20])
    torch.testing.assert_close(run([12, 8]), whole, atol=1e-5, rtol=0)
    torch.testing.assert_close(run([19, 1]), whole, atol=1e-5, rtol=0)


@pytest.mark.parametrize("head_dim", [24, 80, 96, 128])
def test_any_head_dim(head_dim):
    "Head dims that are not powers of two are padded to one inside the kernels and masked: same result as the reference."
    run_attention(paged_attention, [1, 4, 17, 0], [40, 24, 17, 9], head_dim=head_dim, num_heads=4, num_kv_heads=2, seed=head_dim)
    run_attention(paged_decode_attention, [1] * 3, [1, 17, 70], head_dim=head_dim, num_heads=4, num_kv_heads=2, num_splits=2)
    run_attention(paged_decode_attention, [1] * 2, [5, 33], head_dim=head_dim, num_heads=3, num_kv_heads=3, dtype=torch.bfloat16)


def test_rejects_bad_shapes():
    batch = make_paged_batch([2], [2], num_heads=3, num_kv_heads=2, head_dim=64)
    with pytest.raises(AssertionError, match="multiple"): paged_attention(**batch)
    batch = make_paged_batch([2], [2], num_heads=2, num_kv_heads=1, head_dim=96)
    with pytest.raises(AssertionError, match="head_dim"): paged_attention(batch["q"][..., :80].contiguous(), **{k: v for k, v in batch.items() if k != "q"})


# --- compiled on a GPU: bigger shapes, the split-K heuristic, real bf16/fp16 tensor-core paths ---------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=ids)
def test_gpu_store_kvcache(dtype): run_store(3000, 8, 128, dtype, num_pad=100, num_blocks=400, device="cuda")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=ids)
@pytest.mark.parametrize("num_heads,num_kv_heads,head_dim,block_size", [(32, 8, 128, 16), (16, 16, 64, 32), (28, 4, 128, 64)])
def test_gpu_decode(dtype, num_heads, num_kv_heads, head_dim, block_size):
    seq_lens = [1, 17, 255, 1000, 4097, 8000, 33, 2048]
    for num_splits in (None, 1, 7):  # None: the heuristic (splits on a batch this small)
        run_attention(paged_decode_attention, [1] * len(seq_lens), seq_lens, dtype=dtype, num_splits=num_splits, device="cuda",
                      num_heads=num_heads, num_kv_heads=num_kv_heads, head_dim=head_dim, block_size=block_size)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=ids)
@pytest.mark.parametrize("num_heads,num_kv_heads,head_dim,block_size", [(32, 8, 128, 16), (16, 16, 64, 32), (28, 4, 128, 64),
                                                                      (32, 8, 80, 16), (12, 4, 96, 16)])
def test_gpu_mixed_batch(dtype, num_heads, num_kv_heads, head_dim, block_size):
    q_lens, seq_lens = [1, 1000, 0, 37, 1, 512, 2000], [3000, 1000, 50, 1037, 64, 4096, 2000]  # decode, prefill, empty, extend, chunk
    run_attention(paged_attention, q_lens, seq_lens, dtype=dtype, device="cuda",
                  num_heads=num_heads, num_kv_heads=num_kv_heads, head_dim=head_dim, block_size=block_size)
