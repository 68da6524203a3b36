// litevllm's decode step on CPU: every decoder layer of a Llama-family model for a few rows in one call.
// kernels_nbs/06_cpu_decode_step.ipynb explains it one section at a time. It adds no arithmetic of its own: each
// step below is a function of cpu_ops.cpp, cpu_attention.cpp, gguf.cpp or int8.cpp, called in the order the torch model calls
// them, so its results are those of the model's CPU ops, bit for bit. What it removes is Python between them.

// @section includes
#include "cpu_ops.cpp"        // rms_norm, rotary, silu_and_mul, linear_few_rows (kernels_nbs/03)
#include "cpu_attention.cpp"  // store_kv, the paged attention kernel (kernels_nbs/02)
#include "gguf.cpp"           // litevllm_gguf_linear: a linear layer kept as GGUF blocks (kernels_nbs/05)
#include "int8.cpp"           // litevllm_int8_linear: a linear layer in int8, W8A8 (kernels_nbs/05a)

// @section tables
// One linear layer: a oneDNN-packed float weight (parts = 0), up to 3 parts of GGUF blocks (a GGUF file's q, k and v
// may each have a type of their own), each part's rows after the previous part's in the output, or an int8 weight (q8).
struct DecodeLinear {
  const void* w; int32_t nb;                // packed: the weight's data and its block of outputs (linear_few_rows' NB)
  int32_t parts, type[3], rows[3];          // GGUF: how many parts, each one's ggml type and rows...
  const void* blocks[3];                    // ...and blocks
  const int8_t* q8; int32_t kp;             // int8: the packed weight (null: not int8) and its padded row length,
  const int32_t* q8_sum; const float* q8_scale;  // each output's sum of quants and scale
  const void* q8_bias;                      // and bias (the model's dtype; null: none)
};
// One decoder layer: pointers into the model's tensors and the layer's KV cache, set once per model and cache.
struct DecodeLayer {
  const void *ln1, *ln2;                    // input_layernorm's and post_attention_layernorm's weights
  const void *q_norm, *k_norm;              // Qwen3's per-head norms; null: none
  const void* qkv_bias;                     // Qwen2's (packed weights only); null: none
  DecodeLinear qkv, o, gate_up, down;
  int32_t use_rope, sliding_window;         // SmolLM3's NoPE layers: 0; window: 0 = none
  void *k_cache, *v_cache;                  // this layer's caches in cpu_attention's layout
};
// The model's shape, the same for every layer.
struct DecodeShape { int32_t bf, hidden, H, Hkv, D, inter, block_size; float eps, scale; };
// This step: its rows and the attention metadata every layer shares.
struct DecodeStep {
  int64_t T;                                // rows (tokens) in the step
  const float *cos, *sin;                   // (T, D/2) float32: the rows' rotary tables
  const int64_t* slots;                     // (T,) each token's KV slot
  const int32_t* tables; int64_t tstride;   // (B, max blocks) block tables
  const int32_t *seq_lens, *qsl; int32_t B; // (B,) context lengths; (B + 1,) where each request's rows start
};

// @section linear
// y (T, N) = x (T, K) W^T (+ bias: `bias` for a packed weight, an int8 layer's own): the int8 kernel, linear_few_rows
// on a packed weight, or the GGUF kernel once per part into the part's columns of y, as 29_gguf's GGUFLinear calls it.
// Nonzero: a kernel refused the layout.
static int linear(int bf, const DecodeLinear& L, const void* x, const void* bias, void* y, int64_t T, int K, int N) {
  if (L.q8) return litevllm_int8_linear(bf, x, K, T, K, L.kp, L.q8, L.q8_sum, L.q8_scale, L.q8_bias, y, N, N);
  if (!L.parts) return litevllm_linear_few_rows(bf, x, K, L.w, bias, y, T, K, N, L.nb);
  for (int i = 0, start = 0; i < L.parts; start += L.rows[i], i++)
    if (litevllm_gguf_linear(L.type[i], bf, x, K, (const uint8_t*)L.blocks[i], nullptr, (char*)y + int64_t(start) * (bf ? 2 : 4),
                             N, T, K, L.rows[i])) return 1;
  return 0;
}

// @section layer
// One layer, as DecoderLayer.forward runs it: h (T, hidden) is the previous layer's output, added into the residual
// stream before the first norm (the first layer's residual starts at zero, so it becomes the embeddings). Scratch:
// qkv (T, q + 2kv), att (T, q), gu (T, 2I), act (T, I); the layer's output replaces h.
static int decode_layer(const DecodeShape& s, const DecodeLayer& L, const DecodeStep& st, void* h, void* res,
                        void* qkv, void* att, void* gu, void* act) {
  const int64_t T = st.T; const int q = s.H * s.D, kv = s.Hkv * s.D, nqkv = q + 2 * kv, es = s.bf ? 2 : 4;
  char* const qkvb = (char*)qkv;
  litevllm_rms_norm(s.bf, h, res, L.ln1, h, T, s.hidden, s.eps);                      // res += h; h = norm(res)
  if (linear(s.bf, L.qkv, h, L.qkv_bias, qkv, T, s.hidden, nqkv)) return 1;
  if (L.q_norm)                                                                       // Qwen3: each head normed
    for (int64_t t = 0; t < T; t++) {
      litevllm_rms_norm(s.bf, qkvb + t * nqkv * es, nullptr, L.q_norm, qkvb + t * nqkv * es, s.H, s.D, s.eps);
      litevllm_rms_norm(s.bf, qkvb + (t * nqkv + q) * es, nullptr, L.k_norm, qkvb + (t * nqkv + q) * es, s.Hkv, s.D, s.eps);
    }
  if (L.use_rope) litevllm_rotary(s.bf, qkvb, nqkv, s.H, qkvb + q * es, nqkv, s.Hkv, s.D, st.cos, st.sin, T);
  litevllm_store_kv(s.bf, qkvb + q * es, nqkv, qkvb + (q + kv) * es, nqkv, L.k_cache, L.v_cache, st.slots, T, s.Hkv, s.D);
  if (litevllm_cpu_attention(s.bf, qkvb, nqkv, L.k_cache, L.v_cache, att, st.tables, st.tstride, st.seq_lens, st.qsl,
                             st.B, s.H, s.Hkv, s.D, s.block_size, s.scale, L.sliding_window)) return 2;
  if (linear(s.bf, L.o, att, nullptr, h, T, q, s.hidden)) return 3;
  litevllm_rms_norm(s.bf, h, res, L.ln2, h, T, s.hidden, s.eps);                      // res += attention; h = norm(res)
  if (linear(s.bf, L.gate_up, h, nullptr, gu, T, s.hidden, 2 * s.inter)) return 4;
  litevllm_silu_and_mul(s.bf, gu, act, T, s.inter);
  if (linear(s.bf, L.down, act, nullptr, h, T, s.inter, s.hidden)) return 5;
  return 0;
}

// @section entry
// Every layer in turn; h and res are the model's (T, hidden) stream, scratch holds T * (q + 2kv + q + 3I) values.
// 0: done; else 10 * layer + the step that refused (the caller checked shapes, so only a kernel's own refusal).
extern "C" int litevllm_decode_layers(const DecodeShape* s, const DecodeLayer* layers, int32_t n, const DecodeStep* st,
                                      void* h, void* res, void* scratch) {
  const int64_t T = st->T, es = s->bf ? 2 : 4, q = s->H * s->D, kv = s->Hkv * s->D;
  char* qkv = (char*)scratch; char* att = qkv + T * (q + 2 * kv) * es;
  char* gu = att + T * q * es; char* act = gu + T * 2 * s->inter * es;
  for (int32_t i = 0; i < n; i++)
    if (int rc = decode_layer(*s, layers[i], *st, h, res, qkv, att, gu, act)) return 10 * i + rc;
  return 0;
}
