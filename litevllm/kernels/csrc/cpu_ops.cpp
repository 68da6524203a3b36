// litevllm's CPU layer ops: RMSNorm (with the residual add before it), rotary embedding, SwiGLU's activation, and the
// linear layers of a decode step. kernels_nbs/03_cpu_layer_ops.ipynb explains it one section at a time: each
// `// @section NAME` line starts a section that the notebook shows with `show_source`.

// @section rounding
#include "cpu_vector.h"  // 02's vector helpers: vf (VW floats), loadv, to_f32, store, expv
#include <cmath>
#include <type_traits>

static inline uint32_t rne(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u + 0x7FFFu + ((u >> 16) & 1u); }  // high half: f rounded to bf16 (nearest even)
static inline float round_like(float f, const float*) { return f; }
static inline float round_like(float f, const bf16*) { uint32_t u = rne(f) & 0xFFFF0000u; std::memcpy(&f, &u, 4); return f; }
// the same VW at a time
static inline vu rne(vf f) { vu u; std::memcpy(&u, &f, sizeof u); return u + 0x7FFFu + ((u >> 16) & 1u); }
static inline vf round_like(vf f, const float*) { return f; }
static inline vf round_like(vf f, const bf16*) { vu u = rne(f) & 0xFFFF0000u; std::memcpy(&f, &u, sizeof f); return f; }
static inline void storev(vf f, float* p) { std::memcpy(p, &f, sizeof f); }
static inline void storev(vf f, bf16* p) {
#ifdef __AVX512F__  // one narrowing store (the generic code below compiles to two halves)
  _mm256_storeu_si256((__m256i*)p, _mm512_cvtepi32_epi16((__m512i)(rne(f) >> 16)));
#else
  vh h = __builtin_convertvector(rne(f) >> 16, vh); std::memcpy(p, &h, sizeof h);
#endif
}

// @section rms-norm
// y = w * round(h / rms(h)) for each row of n: transformers' RMSNorm of h = x. With a residual (vLLM's
// fused_add_rms_norm): h = residual + x, rounded to T and written back to the residual first. y may be x.
template <typename T>
static void rms_norm(const T* x, T* residual, const T* w, T* y, int64_t rows, int n, float eps) {
#pragma omp parallel for if (rows >= 16)
  for (int64_t r = 0; r < rows; r++) {
    const T* h = x + r * n; T* yr = y + r * n;
    int i = 0;
    if (residual) {
      T* res = residual + r * n;
      for (; i + VW <= n; i += VW) storev(loadv(res + i) + loadv(h + i), res + i);
      for (; i < n; i++) store(to_f32(res[i]) + to_f32(h[i]), res + i);
      h = res;
    }
    vf ss = {}; float s = 0.f;
    for (i = 0; i + VW <= n; i += VW) { const vf v = loadv(h + i); ss += v * v; }
    for (; i < n; i++) { const float v = to_f32(h[i]); s += v * v; }
    s += hsum(ss);
    const float inv = 1.f / std::sqrt(s / n + eps);
    for (i = 0; i + VW <= n; i += VW) storev(loadv(w + i) * round_like(loadv(h + i) * inv, h), yr + i);
    for (; i < n; i++) store(to_f32(w[i]) * round_like(to_f32(h[i]) * inv, h), yr + i);
  }
}
extern "C" void litevllm_rms_norm(int bf, const void* x, void* residual, const void* w, void* y, int64_t rows, int n, float eps) {
  if (bf) rms_norm((const bf16*)x, (bf16*)residual, (const bf16*)w, (bf16*)y, rows, n, eps);
  else rms_norm((const float*)x, (float*)residual, (const float*)w, (float*)y, rows, n, eps);
}

// @section rotary
// rotary embedding (rotate-half layout), in place: q rows of H heads and k rows of Hkv heads (D each), given row
// strides (they are slices of one qkv matrix); cos, sin: (rows, D/2) float32
template <typename T>
static void rotary(T* q, int64_t qs, int H, T* k, int64_t ks, int Hkv, int D, const float* cos, const float* sin, int64_t rows) {
  const int half = D / 2;
#pragma omp parallel for if (rows >= 16)
  for (int64_t t = 0; t < rows; t++) {
    const float* c = cos + t * half; const float* s = sin + t * half;
    for (int h = 0; h < H + Hkv; h++) {
      T* x = h < H ? q + t * qs + h * D : k + t * ks + (h - H) * D;
      int i = 0;
      for (; i + VW <= half; i += VW) {
        const vf x1 = loadv(x + i), x2 = loadv(x + i + half), ci = loadv(c + i), si = loadv(s + i);
        storev(x1 * ci - x2 * si, x + i);
        storev(x2 * ci + x1 * si, x + i + half);
      }
      for (; i < half; i++) {
        const float x1 = to_f32(x[i]), x2 = to_f32(x[i + half]);
        store(x1 * c[i] - x2 * s[i], x + i);
        store(x2 * c[i] + x1 * s[i], x + i + half);
      }
    }
  }
}
extern "C" void litevllm_rotary(int bf, void* q, int64_t qs, int H, void* k, int64_t ks, int Hkv, int D, const float* c,
                                const float* s, int64_t rows) {
  if (bf) rotary((bf16*)q, qs, H, (bf16*)k, ks, Hkv, D, c, s, rows);
  else rotary((float*)q, qs, H, (float*)k, ks, Hkv, D, c, s, rows);
}

// @section silu
// out (rows, I) = silu(x[:, :I]) * x[:, I:], VW values at a time
template <typename T>
static void silu_and_mul(const T* x, T* out, int64_t rows, int I) {
#pragma omp parallel for if (rows >= 16)
  for (int64_t r = 0; r < rows; r++) {
    const T* g = x + r * 2 * I; const T* u = g + I; T* o = out + r * I;
    int i = 0;
    for (; i + VW <= I; i += VW) { const vf a = loadv(g + i); storev(a / (1.f + expv(-a)) * loadv(u + i), o + i); }
    for (; i < I; i++) { const float a = to_f32(g[i]); store(a / (1.f + std::exp(-a)) * to_f32(u[i]), o + i); }
  }
}
extern "C" void litevllm_silu_and_mul(int bf, const void* x, void* out, int64_t rows, int I) {
  if (bf) silu_and_mul((const bf16*)x, (bf16*)out, rows, I);
  else silu_and_mul((const float*)x, (float*)out, rows, I);
}

// @section gelu
// out (rows, I) = gelu_tanh(x[:, :I]) * x[:, I:] (GeGLU: Gemma's MLP). gelu_tanh(a) = a/2 (1 + tanh(y)),
// y = sqrt(2/pi) (a + 0.044715 a^3), is a / (1 + e^(-2y)): silu's loop with another argument
template <typename T>
static void gelu_tanh_and_mul(const T* x, T* out, int64_t rows, int I) {
  constexpr float c = 2.f * 0.7978845608f;  // 2 sqrt(2/pi)
#pragma omp parallel for if (rows >= 16)
  for (int64_t r = 0; r < rows; r++) {
    const T* g = x + r * 2 * I; const T* u = g + I; T* o = out + r * I;
    int i = 0;
    for (; i + VW <= I; i += VW) {
      const vf a = loadv(g + i);
      storev(a / (1.f + expv(-c * (a + 0.044715f * a * a * a))) * loadv(u + i), o + i);
    }
    for (; i < I; i++) {  // (clamped as expv clamps: -ffast-math assumes no infinities)
      const float a = to_f32(g[i]);
      store(a / (1.f + std::exp(std::min(88.f, std::max(-87.f, -c * (a + 0.044715f * a * a * a))))) * to_f32(u[i]), o + i);
    }
  }
}
extern "C" void litevllm_gelu_tanh_and_mul(int bf, const void* x, void* out, int64_t rows, int I) {
  if (bf) gelu_tanh_and_mul((const bf16*)x, (bf16*)out, rows, I);
  else gelu_tanh_and_mul((const float*)x, (float*)out, rows, I);
}

// @section linear-tiles
// y (M, N) = x (M, K; row stride xs) W^T + bias for the few rows of a decode step, reading W where oneDNN packed it:
// in float32 that is [N/NB][K][NB], each block of NB outputs with input k's NB weights side by side (NB = 64 on
// AVX-512, and on AVX2 for most shapes; 16 on AVX2 for some, such as 192 outputs: the caller finds NB). A thread takes
// whole blocks, so each streams its part of W once, front to back. Within a block the kernel takes NV vectors of VW
// outputs at a time (a slice: a whole block of 64 on AVX-512, 32 outputs on AVX2), rows LMT at a time, so that the
// accumulators, the slice's weights for one input and the broadcast input all stay in registers:
#if defined(__AVX512F__)
constexpr int LNV = 4, LMT = 6;  // 6 x 4 accumulators + 4 weights + 1 of 32 registers (zmm)
#elif defined(__AVX2__)
constexpr int LNV = 4, LMT = 3;  // 3 x 4 + 4 + 1 = 17 of 16 (ymm): measured faster than 6 x 2 (see below)
#elif defined(__aarch64__)
constexpr int LNV = 4, LMT = 6;  // NEON: 6 x 4 + 4 + 1 = 29 of 32
#else
constexpr int LNV = 2, LMT = 4;  // SSE: 4 x 2 + 2 + 1 = 11 of 16
#endif
// (a bf16 weight goes through 02's loadv(const bf16*): widened to float32 as it loads, a shift)

// @section prefetch
// A block's first tile of rows streams its weights from memory; the later tiles read them again from cache, and the
// memory would sit idle while they compute. So every tile of a block that has more than one asks for its share of the
// next block's bytes, a few cache lines per input as it goes: the next block's first tile then finds them in cache,
// and the memory's time hides behind the arithmetic (16 rows of bf16, a Llama-3.2-1B layer's four linears on Zen 5:
// 3.95-4.10 -> 3.35-3.40 ms; with one tile there is nothing to hide behind, and asking ahead measured slower).
struct Prefetch {
  const char *p = nullptr, *base = nullptr, *end = nullptr; int64_t step = 0;  // [base, end) by `step` bytes an input
  inline void after(int64_t i) {  // input i is done: ask for what is due by now
    if (base) for (const char* due = std::min(end, base + (i + 1) * step); p < due; p += 64) __builtin_prefetch(p, 0, 3);
  }
};
static inline Prefetch pass_prefetch(const void* next, int64_t bytes, int64_t pass, int64_t passes, int64_t inputs) {
  if (!next || passes < 2) return {};  // pass `pass` of `passes` over a block of `inputs` inputs: its share of the next block
  const int64_t part = (bytes / passes + 63) / 64 * 64;
  const char* n = (const char*)next;
  return {n + std::min(bytes, pass * part), n + std::min(bytes, pass * part), n + std::min(bytes, (pass + 1) * part), (part + inputs - 1) / inputs};
}

// @section rows-x-slice
template <int MT, int NV, typename W>  // MT rows of x against the NV * VW outputs of one slice (w: its weight for input 0, rows of NB),
                                       // inputs k0..k1-1: sums start at zero (first) or from `part` (rows of NB floats), and end in
                                       // y (last, plus bias) or in `part`
static inline void rows_x_slice(const float* x, int64_t xs, const W* w, int NB, int k0, int k1, float* part, bool first, bool last,
                                const float* bias, float* y, int64_t ys, Prefetch pf = {}) {
  vf acc[MT][NV];
  for (int m = 0; m < MT; m++) for (int c = 0; c < NV; c++) acc[m][c] = first ? vf{} : loadv(part + m * NB + c * VW);
  for (int k = k0; k < k1; k++) {
    vf wk[NV];
    for (int c = 0; c < NV; c++) wk[c] = loadv(w + int64_t(k) * NB + c * VW);
    for (int m = 0; m < MT; m++) {
      const float xm = x[m * xs + k];
      for (int c = 0; c < NV; c++) acc[m][c] += xm * wk[c];
    }
    pf.after(k - k0);
  }
  for (int m = 0; m < MT; m++)
    for (int c = 0; c < NV; c++)
      if (!last) storev(acc[m][c], part + m * NB + c * VW);
      else storev(bias ? acc[m][c] + loadv(bias + VW * c) : acc[m][c], y + m * ys + VW * c);
}
template <int MT, int NV, typename W>  // n <= MT rows: the instance for n
static inline void rows_x_slice_tail(int64_t n, const float* x, int64_t xs, const W* w, int NB, int k0, int k1, float* part, bool first,
                                     bool last, const float* bias, float* y, int64_t ys, Prefetch pf = {}) {
  if constexpr (MT > 0) {
    if (n == MT) rows_x_slice<MT, NV>(x, xs, w, NB, k0, k1, part, first, last, bias, y, ys, pf);
    else rows_x_slice_tail<MT - 1, NV>(n, x, xs, w, NB, k0, k1, part, first, last, bias, y, ys, pf);
  }
}

// @section linear-chunks
// Every tile of every block, in an order that keeps what is re-read in L2: rows MC at a time (their x stays there while
// all blocks pass over them; a decode step is one chunk) and, for a long K, a block's inputs a part at a time (its
// weights for those inputs, at most PART_BYTES, stay there while every tile reads them; the sums wait in `part`). A
// block's next part of inputs, or the next block's first, lies right after this part in memory: the tiles ask for it
// as they go (`prefetch`). `tile(nb, s, m, n, k0, k1, part, first, last, pf)`: rows m..m+n-1 (n <= MT) of slice s of
// block nb; STEP: inputs per step of its loop (2: bfloat16 pairs).
constexpr int64_t MC = 192, PART_BYTES = 256 << 10;
static_assert(MC % 6 == 0 && MC % LMT == 0, "even chunks rounded up to whole tiles stay within MC rows");
template <int MT, int STEP, typename W, typename Tile>
static void for_tiles(const W* w, int64_t M, int K, int N, int NB, int SW, Tile tile) {
  if (M <= 0) return;
  const int kc = int64_t(K) * NB * sizeof(W) > 2 * PART_BYTES ? int(PART_BYTES / (NB * sizeof(W))) / STEP * STEP : K;
  const int64_t chunks = (M + MC - 1) / MC, mc = ((M + chunks - 1) / chunks + MT - 1) / MT * MT;  // even chunks, whole tiles
  for (int64_t m0 = 0; m0 < M; m0 += mc) {
    const int64_t rows = std::min(mc, M - m0), passes = NB / SW * ((rows + MT - 1) / MT);
#pragma omp parallel for schedule(static)
    for (int nb = 0; nb < N / NB; nb++) {
      alignas(64) float part[MC * 64];  // the chunk's sums between parts of the inputs (NB <= 64)
      for (int k0 = 0; k0 < K; k0 += kc) {
        const int k1 = std::min(K, k0 + kc);
        const W* next = k1 < K || nb + 1 < N / NB ? w + (int64_t(nb) * K + k1) * NB : nullptr;
        const int64_t next_bytes = int64_t(k1 < K ? std::min(K, k1 + kc) - k1 : std::min(K, kc)) * NB * sizeof(W);
        int64_t pass = 0;
        for (int s = 0; s < NB; s += SW)
          for (int64_t m = 0; m < rows; m += MT, pass++)
            tile(nb, s, m0 + m, std::min<int64_t>(MT, rows - m), k0, k1, part + m * NB + s, k0 == 0, k1 == K,
                 pass_prefetch(next, next_bytes, pass, passes, (k1 - k0) / STEP));
      }
    }
  }
}

// @section one-row
// One row of x (one user's decode step) has no second tile to hide the memory behind: the kernel only streams W. A
// core that reads one stream front to back keeps too few cache lines in flight to use the memory's bandwidth (03 has
// the figures), so each thread reads two blocks at once, block i and block i + half, their sums side by side in
// registers: the same multiply-adds in the same order as one tile's, so the same outputs.
template <typename Pair>
static void for_block_pairs(int blocks, Pair pair) {  // pair(b0, b1): b1 < 0 when the count is odd and b0 has no partner
  const int half = (blocks + 1) / 2;
#pragma omp parallel for schedule(static)
  for (int i = 0; i < half; i++) pair(i, i + half < blocks ? i + half : -1);
}
template <int NV, typename W>  // x's one row against the NV * VW outputs of a slice of two blocks (w0, w1: their weight for input 0)
static inline void row_x_two_slices(const float* x, const W* w0, const W* w1, int NB, int K, const float* b0, const float* b1,
                                    float* y0, float* y1) {
  vf a[NV], c[NV];
  for (int v = 0; v < NV; v++) a[v] = c[v] = vf{};
  for (int k = 0; k < K; k++) {
    const float xk = x[k];
    for (int v = 0; v < NV; v++) { a[v] += xk * loadv(w0 + int64_t(k) * NB + v * VW); c[v] += xk * loadv(w1 + int64_t(k) * NB + v * VW); }
  }
  for (int v = 0; v < NV; v++) {
    storev(b0 ? a[v] + loadv(b0 + VW * v) : a[v], y0 + VW * v);
    if (y1) storev(b1 ? c[v] + loadv(b1 + VW * v) : c[v], y1 + VW * v);
  }
}

// @section linear-f32
template <int NV, typename W>  // W: float, or bfloat16 weights in the same layout (half the bytes, float32 arithmetic)
static void linear_few_rows_f32(const float* x, int64_t xs, const W* w, const float* bias, float* y, int64_t M, int K, int N, int NB) {
  if (M == 1) return for_block_pairs(N / NB, [&](int b0, int b1) {  // one row: two blocks a thread at once (`one-row`)
    for (int s = 0; s < NB; s += NV * VW) {
      const int c = b1 < 0 ? b0 : b1;  // no partner: the block again, its sums not stored
      row_x_two_slices<NV>(x, w + int64_t(b0) * K * NB + s, w + int64_t(c) * K * NB + s, NB, K, bias ? bias + NB * b0 + s : nullptr,
                           bias ? bias + NB * c + s : nullptr, y + NB * b0 + s, b1 < 0 ? nullptr : y + NB * b1 + s);
    }
  });
  for_tiles<LMT, 1>(w, M, K, N, NB, NV * VW, [&](int nb, int s, int64_t m, int64_t n, int k0, int k1, float* part, bool first, bool last, Prefetch pf) {
    const W* wb = w + int64_t(nb) * K * NB + s; const float* bb = bias ? bias + NB * nb + s : nullptr;
    rows_x_slice_tail<LMT, NV>(n, x + m * xs, xs, wb, NB, k0, k1, part, first, last, bb, y + m * N + NB * nb + s, N, pf);
  });
}

template <typename W>
static int linear_few_rows_f32_any(const float* x, int64_t xs, const W* w, const float* bias, float* y, int64_t M, int K, int N, int NB) {
  if (NB % (LNV * VW) == 0) linear_few_rows_f32<LNV>(x, xs, w, bias, y, M, K, N, NB);
  else if (LNV >= 2 && NB % (2 * VW) == 0) linear_few_rows_f32<2>(x, xs, w, bias, y, M, K, N, NB);
  else if (NB % VW == 0) linear_few_rows_f32<1>(x, xs, w, bias, y, M, K, N, NB);
  else return 1;
  return 0;
}

// @section linear-bf16-tile
#ifdef __AVX512BF16__
// The same for bfloat16, where oneDNN packs [N/64][K/2][64][2]: inputs k and k+1 of each output side by side, the pair
// vdpbf16ps multiplies and adds into one float32 lane. Needs K even; the sums are float32, rounded to bf16 once.
template <int MT>  // MT rows against one block of 64 outputs, inputs k0..k1-1: sums start at zero (first) or from `part`, and
                  // end in y (last, rounded to bf16, plus bias) or in `part` (MT rows of 64 floats)
static inline void rows_x_block_bf16(const bf16* x, int64_t xs, const bf16* w, int k0, int k1, float* part, bool first, bool last,
                                     const bf16* bias, bf16* y, int64_t ys, Prefetch pf = {}) {
  __m512 acc[MT][4];
  for (int m = 0; m < MT; m++) for (int c = 0; c < 4; c++) acc[m][c] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(part + 64 * m + 16 * c);
  for (int k = k0; k < k1; k += 2) {
    const bf16* wk = w + int64_t(k) * 64;
    const __m512bh w0 = (__m512bh)_mm512_loadu_si512(wk), w1 = (__m512bh)_mm512_loadu_si512(wk + 32);
    const __m512bh w2 = (__m512bh)_mm512_loadu_si512(wk + 64), w3 = (__m512bh)_mm512_loadu_si512(wk + 96);
    for (int m = 0; m < MT; m++) {
      uint32_t pair; std::memcpy(&pair, x + m * xs + k, 4);
      const __m512bh xm = (__m512bh)_mm512_set1_epi32(int(pair));
      acc[m][0] = _mm512_dpbf16_ps(acc[m][0], xm, w0); acc[m][1] = _mm512_dpbf16_ps(acc[m][1], xm, w1);
      acc[m][2] = _mm512_dpbf16_ps(acc[m][2], xm, w2); acc[m][3] = _mm512_dpbf16_ps(acc[m][3], xm, w3);
    }
    pf.after((k - k0) / 2);
  }
  for (int m = 0; m < MT; m++)
    for (int c = 0; c < 4; c++) {
      if (!last) { _mm512_storeu_ps(part + 64 * m + 16 * c, acc[m][c]); continue; }
      const vf v = (vf)acc[m][c];
      storev(bias ? v + loadv(bias + 16 * c) : v, y + m * ys + 16 * c);
    }
}

// @section linear-bf16-one-row
static inline void row_x_two_blocks_bf16(const bf16* x, const bf16* w0, const bf16* w1, int K, const bf16* b0, const bf16* b1,
                                         bf16* y0, bf16* y1) {  // one row against two blocks of 64 outputs (`one-row`)
  __m512 a[4], c[4];
  for (int v = 0; v < 4; v++) a[v] = c[v] = _mm512_setzero_ps();
  for (int k = 0; k < K; k += 2) {
    uint32_t pair; std::memcpy(&pair, x + k, 4);
    const __m512bh xk = (__m512bh)_mm512_set1_epi32(int(pair));
    const bf16 *p = w0 + int64_t(k) * 64, *q = w1 + int64_t(k) * 64;
    for (int v = 0; v < 4; v++) {
      a[v] = _mm512_dpbf16_ps(a[v], xk, (__m512bh)_mm512_loadu_si512(p + 32 * v));
      c[v] = _mm512_dpbf16_ps(c[v], xk, (__m512bh)_mm512_loadu_si512(q + 32 * v));
    }
  }
  for (int v = 0; v < 4; v++) {
    storev(b0 ? (vf)a[v] + loadv(b0 + 16 * v) : (vf)a[v], y0 + 16 * v);
    if (y1) storev(b1 ? (vf)c[v] + loadv(b1 + 16 * v) : (vf)c[v], y1 + 16 * v);
  }
}

// @section linear-bf16
template <int MT>  // n <= MT rows: the instance for n
static inline void rows_x_block_bf16_tail(int64_t n, const bf16* x, int64_t xs, const bf16* w, int k0, int k1, float* part, bool first,
                                          bool last, const bf16* bias, bf16* y, int64_t ys, Prefetch pf = {}) {
  if constexpr (MT > 0) {
    if (n == MT) rows_x_block_bf16<MT>(x, xs, w, k0, k1, part, first, last, bias, y, ys, pf);
    else rows_x_block_bf16_tail<MT - 1>(n, x, xs, w, k0, k1, part, first, last, bias, y, ys, pf);
  }
}
static void linear_few_rows_bf16(const bf16* x, int64_t xs, const bf16* w, const bf16* bias, bf16* y, int64_t M, int K, int N) {
  if (M == 1) return for_block_pairs(N / 64, [&](int b0, int b1) {  // one row: two blocks a thread at once
    const int c = b1 < 0 ? b0 : b1;
    row_x_two_blocks_bf16(x, w + int64_t(b0) * K * 64, w + int64_t(c) * K * 64, K, bias ? bias + 64 * b0 : nullptr,
                          bias ? bias + 64 * c : nullptr, y + 64 * b0, b1 < 0 ? nullptr : y + 64 * b1);
  });
  for_tiles<6, 2>(w, M, K, N, 64, 64, [&](int nb, int, int64_t m, int64_t n, int k0, int k1, float* part, bool first, bool last, Prefetch pf) {
    rows_x_block_bf16_tail<6>(n, x + m * xs, xs, w + int64_t(nb) * K * 64, k0, k1, part, first, last, bias ? bias + 64 * nb : nullptr,
                              y + m * N + 64 * nb, N, pf);
  });
}
#endif

// @section linear-entry
// bf: 0 float32; 1 bfloat16 (x, W, y; oneDNN's pair layout, vdpbf16ps); 2 x and y float32, W bfloat16 in the float32 layout.
// 0: done; 1: not a layout this kernel reads (N not whole blocks of NB; NB not whole vectors; bfloat16 without
// AVX512-BF16, or with NB other than 64 or K odd)
extern "C" int litevllm_linear_few_rows(int bf, const void* x, int64_t xs, const void* w, const void* bias, void* y, int64_t M, int K, int N, int NB) {
  if (NB <= 0 || N % NB) return 1;
  if (bf == 0) return linear_few_rows_f32_any((const float*)x, xs, (const float*)w, (const float*)bias, (float*)y, M, K, N, NB);
  if (bf == 2) return linear_few_rows_f32_any((const float*)x, xs, (const bf16*)w, (const float*)bias, (float*)y, M, K, N, NB);
#ifdef __AVX512BF16__
  if (K % 2 || NB != 64) return 1;
  linear_few_rows_bf16((const bf16*)x, xs, (const bf16*)w, (const bf16*)bias, (bf16*)y, M, K, N); return 0;
#endif
  return 1;  // bfloat16 without vdpbf16ps: oneDNN's kernel (where oneDNN packs bf16 at all)
}
