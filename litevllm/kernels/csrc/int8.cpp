// litevllm's int8 linear layer (W8A8): weights quantized once at load, one scale per output row; activations quantized
// per row (token) each time the layer runs; the products summed in int32 by the CPU's byte dot-product instructions.
// kernels_nbs/05a_cpu_int8.ipynb explains it one section at a time: each `// @section NAME` line starts a section that
// the notebook shows with `show_source`.

// @section quantize
#include "cpu_vector.h"  // 02's helpers: bf16 loads and stores (to_f32, store)
#include <cmath>
#include <cstdlib>
#include <vector>
#include <omp.h>

constexpr int KPAD = 64;  // a weight row is padded with zeros to a multiple of 64 bytes: one AVX-512 register

// One row of activations to int8: scale = max|x| / 127, q = round(x * (127 / max|x|)) (to nearest, ties to even: as
// torch.round), so q is in [-127, 127]; the padding after K is zero. Returns the row's scale.
template <typename X>
static float quantize_row(const X* x, int K, int Kp, int8_t* q) {
  float amax = 0.f;
  for (int k = 0; k < K; k++) amax = std::max(amax, std::fabs(to_f32(x[k])));
  const float inv = amax > 0.f ? 127.f / amax : 0.f;
  for (int k = 0; k < K; k++) q[k] = int8_t(std::nearbyint(to_f32(x[k]) * inv));
  std::memset(q + K, 0, Kp - K);
  return amax * (1.f / 127);  // (not amax / 127: -ffast-math makes that this product anyway)
}

// @section layout
// The weights are packed once, at load, the way byte dot-product instructions want them: NL outputs side by side, four
// bytes (four k) of each, then the next four k of the same NL outputs:
//   packed[(n / NL) * Kp * NL + (k / 4) * NL * 4 + (n % NL) * 4 + k % 4] = w[n][k]
// (oneDNN's VNNI layout). One 64-byte load then holds 4 weights of each of 16 outputs, and the 4 matching activation
// bytes, broadcast to every lane, multiply all 16 at once: each lane sums one output's products, so nothing is summed
// across lanes at the end (the first version took dot products along k and summed each output's 16 lanes: those sums
// cost more than the products at K = 576).

// @section vnni
// What each CPU does with 4 activation bytes (broadcast) and NL outputs' 4 weight bytes: `step` adds their products
// into one int32 lane per output. Three ways, by what the CPU has.
// AVX-512 VNNI's vpdpbusd multiplies 64 unsigned bytes by 64 signed bytes and adds each four products into one of 16
// int32 lanes: one instruction. Its first operand is unsigned, so the activations go in as a = q + 128 (the byte
// q ^ 0x80), and 128 * sum(w), a number per weight row kept from load, comes off after: sum (q + 128) w = sum q w + 128 sum w.
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
constexpr int INT8_PATH = 3, NL = 16;  // avx512_vnni: 16 outputs a register
constexpr bool OFFSET = true;          // a = q + 128: take 128 * sum(w) off
typedef __m512i vacc;
static inline void prep(const int8_t* q, uint8_t* a, int Kp) { for (int k = 0; k < Kp; k++) a[k] = uint8_t(q[k]) ^ 0x80; }
static inline vacc zero() { return _mm512_setzero_si512(); }
static inline vacc loadw(const int8_t* p) { return _mm512_loadu_si512(p); }
static inline vacc bcast(const void* p) { int32_t v; std::memcpy(&v, p, 4); return _mm512_set1_epi32(v); }
static inline vacc step(vacc acc, vacc a, vacc, vacc w) { return _mm512_dpbusd_epi32(acc, a, w); }
static inline void lanes(vacc v, int32_t* out) { _mm512_storeu_si512(out, v); }

// @section maddubs
// Without VNNI, vpmaddubsw multiplies unsigned by signed bytes into int16 sums of pairs, which saturate: 255 * 127 * 2
// does not fit. So the sign moves onto the weights instead (llama.cpp's trick): |q| times w with q's sign, at most
// 2 * 127 * 127 = 32,258 a pair (no weight is -128: they are quantized to [-127, 127]); vpmaddwd then adds the pairs
// into int32. AVX-512BW has no vpsignb: a masked subtraction from zero negates the weights where q < 0.
#elif defined(__AVX512BW__)
constexpr int INT8_PATH = 2, NL = 16;  // avx512bw
constexpr bool OFFSET = false;
typedef __m512i vacc;
static inline void prep(const int8_t* q, uint8_t* a, int Kp) { for (int k = 0; k < Kp; k++) a[k] = uint8_t(std::abs(q[k])); }
static inline vacc zero() { return _mm512_setzero_si512(); }
static inline vacc loadw(const int8_t* p) { return _mm512_loadu_si512(p); }
static inline vacc bcast(const void* p) { int32_t v; std::memcpy(&v, p, 4); return _mm512_set1_epi32(v); }
static inline vacc step(vacc acc, vacc a, vacc q, vacc w) {
  const __m512i ws = _mm512_mask_sub_epi8(w, _mm512_movepi8_mask(q), _mm512_setzero_si512(), w);
  return _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(a, ws), _mm512_set1_epi16(1)));
}
static inline void lanes(vacc v, int32_t* out) { _mm512_storeu_si512(out, v); }
#elif defined(__AVX2__)
constexpr int INT8_PATH = 1, NL = 8;   // avx2: the same on 32 bytes (8 outputs), with vpsignb
constexpr bool OFFSET = false;
typedef __m256i vacc;
static inline void prep(const int8_t* q, uint8_t* a, int Kp) { for (int k = 0; k < Kp; k++) a[k] = uint8_t(std::abs(q[k])); }
static inline vacc zero() { return _mm256_setzero_si256(); }
static inline vacc loadw(const int8_t* p) { return _mm256_loadu_si256((const __m256i*)p); }
static inline vacc bcast(const void* p) { int32_t v; std::memcpy(&v, p, 4); return _mm256_set1_epi32(v); }
static inline vacc step(vacc acc, vacc a, vacc q, vacc w) {
  return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(a, _mm256_sign_epi8(w, q)), _mm256_set1_epi16(1)));
}
static inline void lanes(vacc v, int32_t* out) { _mm256_storeu_si256((__m256i*)out, v); }

// @section scalar
// Anywhere else (Arm, an x86 CPU without AVX2): the same lanes as an array of int32, in plain arithmetic.
#else
constexpr int INT8_PATH = 0, NL = 8;   // scalar
constexpr bool OFFSET = false;
struct vacc { int32_t v[NL]; int8_t b[4 * NL]; };  // sums, or 4 bytes of each of NL outputs (or one row's 4, repeated)
static inline void prep(const int8_t*, uint8_t*, int) {}
static inline vacc zero() { return vacc{}; }
static inline vacc loadw(const int8_t* p) { vacc r{}; std::memcpy(r.b, p, 4 * NL); return r; }
static inline vacc bcast(const void* p) { vacc r{}; for (int l = 0; l < NL; l++) std::memcpy(r.b + 4 * l, p, 4); return r; }
static inline vacc step(vacc acc, const vacc&, const vacc& q, const vacc& w) {
  for (int l = 0; l < NL; l++) for (int i = 0; i < 4; i++) acc.v[l] += int32_t(q.b[4 * l + i]) * int32_t(w.b[4 * l + i]);
  return acc;
}
static inline void lanes(const vacc& v, int32_t* out) { std::memcpy(out, v.v, sizeof v.v); }
#endif

// @section tile
// R rows of activations against NT groups of NL outputs: R x NT accumulators, so that each load of weights serves R
// rows and each broadcast of activations NT * NL outputs. `a` is the rows as `step` takes them, `q` their int8 quants;
// `w` points at the first group's packed weights; out gets R x (NT * NL) sums.
constexpr int TR = 4, TN = NL == 16 ? 4 : 2;  // AVX-512: 16 accumulators of 32 registers; AVX2: 8 of 16
template <int R, int NT>
static inline void dot_tile(const int8_t* w, const uint8_t* a, const int8_t* q, int Kp, int32_t (*out)[TN * NL]) {
  vacc acc[R][NT];
  for (int r = 0; r < R; r++) for (int t = 0; t < NT; t++) acc[r][t] = zero();
  const int64_t gs = int64_t(Kp) * NL;  // bytes of one group of NL outputs
  for (int k = 0; k < Kp; k += 4) {
    vacc wv[NT];
    for (int t = 0; t < NT; t++) wv[t] = loadw(w + t * gs + int64_t(k) * NL);
    for (int r = 0; r < R; r++) {
      const vacc av = bcast(a + int64_t(r) * Kp + k), qv = OFFSET ? av : bcast(q + int64_t(r) * Kp + k);
      for (int t = 0; t < NT; t++) acc[r][t] = step(acc[r][t], av, qv, wv[t]);
    }
  }
  for (int r = 0; r < R; r++) for (int t = 0; t < NT; t++) lanes(acc[r][t], out[r] + t * NL);
}
template <int R, int NT>  // the last r < TR rows
static inline void dot_tail(int r, const int8_t* w, const uint8_t* a, const int8_t* q, int Kp, int32_t (*out)[TN * NL]) {
  if constexpr (R > 0) { if (r == R) dot_tile<R, NT>(w, a, q, Kp, out); else dot_tail<R - 1, NT>(r, w, a, q, Kp, out); }
}

// @section linear
// y (M, N) = x (M, K) W^T, W packed int8 with one float32 scale per output: y = acc * (x's row scale) * (W's row
// scale) + bias. Every row of x is quantized once, before the threads start; the threads then split the outputs, NT
// groups of NL at a time when there are enough of them to go round (else one group), and run each over the rows TR at a time.
template <int NT, typename X>
static inline void outputs(int g, const int8_t* w, const int32_t* wsum, const float* wscale, const X* bias, const uint8_t* a,
                           const int8_t* q, const float* sx, int64_t M, int Kp, X* y, int64_t ys, int N) {
  const int n0 = g * NL, nn = std::min(NT * NL, N - n0);  // this tile's first output and how many are real (not padding)
  for (int64_t m = 0; m < M; m += TR) {
    const int r = int(std::min<int64_t>(TR, M - m));
    int32_t acc[TR][TN * NL];
    dot_tail<TR, NT>(r, w + int64_t(g) * Kp * NL, a + m * Kp, q + m * Kp, Kp, acc);
    for (int i = 0; i < r; i++)
      for (int j = 0, n = n0; j < nn; j++, n++)
        store(float(acc[i][j] - (OFFSET ? 128 * wsum[n] : 0)) * sx[m + i] * wscale[n] + (bias ? to_f32(bias[n]) : 0.f), y + (m + i) * ys + n);
  }
}

template <typename X>
static void int8_linear(const X* x, int64_t xs, int64_t M, int K, int Kp, const int8_t* w, const int32_t* wsum,
                        const float* wscale, const X* bias, X* y, int64_t ys, int N) {
  static thread_local std::vector<int8_t> qbuf; static thread_local std::vector<uint8_t> abuf;
  static thread_local std::vector<float> xscale;
  qbuf.resize(M * Kp); abuf.resize(M * Kp); xscale.resize(M);
  int8_t* const q = qbuf.data(); uint8_t* const a = abuf.data(); const float* const sx = xscale.data();
  for (int64_t m = 0; m < M; m++) {
    xscale[m] = quantize_row(x + m * xs, K, Kp, q + m * Kp);
    prep(q + m * Kp, a + m * Kp, Kp);
  }
  const int groups = (N + NL - 1) / NL;
  const bool wide = groups / TN >= 4 * omp_get_max_threads();  // enough whole tiles for every thread
  const int units = wide ? groups / TN + groups % TN : groups;
#pragma omp parallel for schedule(static)
  for (int i = 0; i < units; i++)
    if (wide && i < groups / TN) outputs<TN>(i * TN, w, wsum, wscale, bias, a, q, sx, M, Kp, y, ys, N);
    else outputs<1>(wide ? groups / TN * TN + i - groups / TN : i, w, wsum, wscale, bias, a, q, sx, M, Kp, y, ys, N);
}

// @section entry
// bf: 0 float32 activations, bias and output, 1 bfloat16; xs, ys: row strides (y may be a slice of a wider output).
// Returns 0, or 1 if Kp is not whole 64-byte vectors covering K.
extern "C" int litevllm_int8_linear(int bf, const void* x, int64_t xs, int64_t M, int K, int Kp, const int8_t* w,
                                    const int32_t* wsum, const float* wscale, const void* bias, void* y, int64_t ys, int N) {
  if (Kp % KPAD || Kp < K) return 1;
  if (bf) int8_linear((const bf16*)x, xs, M, K, Kp, w, wsum, wscale, (const bf16*)bias, (bf16*)y, ys, N);
  else int8_linear((const float*)x, xs, M, K, Kp, w, wsum, wscale, (const float*)bias, (float*)y, ys, N);
  return 0;
}
// The activations' quantization alone (q: M rows of Kp bytes; scales: M floats), for the notebook's test against torch.
extern "C" void litevllm_int8_quantize(int bf, const void* x, int64_t xs, int64_t M, int K, int Kp, int8_t* q, float* scales) {
  for (int64_t m = 0; m < M; m++)
    scales[m] = bf ? quantize_row((const bf16*)x + m * xs, K, Kp, q + m * Kp) : quantize_row((const float*)x + m * xs, K, Kp, q + m * Kp);
}
// Which dot product this build uses (3 AVX-512 VNNI, 2 AVX-512BW, 1 AVX2, 0 scalar), and its outputs a group (NL).
extern "C" int litevllm_int8_path() { return INT8_PATH; }
extern "C" int litevllm_int8_lanes() { return NL; }
