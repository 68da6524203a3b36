// litevllm's GGUF kernels: linear layers and embedding rows computed from weights kept in GGUF's block formats (Q8_0,
// Q4_0, Q4_1, Q4_K, Q5_K, Q6_K). kernels_nbs/05_cpu_gguf.ipynb explains it one section at a time: each
// `// @section NAME` line starts a section that the notebook shows with `show_source`.

// @section fp16
#include "cpu_vector.h"  // 02's vector helpers: vf (VW floats), loadv, store, hsum
#include <cmath>
#include <type_traits>
#include <vector>

static inline float fp16(const uint8_t* p) {  // a block's scale: IEEE half precision, little-endian, maybe unaligned
  uint16_t h; std::memcpy(&h, p, 2);
#if defined(__F16C__)
  return _cvtsh_ss(h);
#else
  const uint32_t s = uint32_t(h & 0x8000u) << 16, e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
  if (e == 0) { const float f = std::ldexp(float(m), -24); return s ? -f : f; }  // zero and subnormals
  const uint32_t u = s | (e == 0x1F ? 0x7F800000u | (m << 13) : ((e + 112) << 23) | (m << 13));
  float f; std::memcpy(&f, &u, 4); return f;
#endif
}

// @section q8-q4
// One block of each format decoded to floats, as ggml's dequantize_row_* does, VW weights at a time, each vector handed
// to `emit(vector, its offset in the block)`: stored (a whole row decoded) or multiplied into sums at once. Blocks of 32
// weights: a float16 scale d (and for Q4_1 a float16 offset m), then the quants. Q4's two 4-bit quants share a byte:
// the low half is weight j, the high half weight j + 16.
static inline vi widen(const uint8_t* p) {  // VW bytes -> VW int32 lanes (zero-extended): one instruction on x86
#if VW == 16
  return (vi)_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i*)p));
#elif VW == 8 && defined(__AVX2__)
  return (vi)_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i*)p));
#else
  vi v; for (int i = 0; i < VW; i++) v[i] = p[i]; return v;
#endif
}
static inline vi widen(const int8_t* p) {  // sign-extended
#if VW == 16
  return (vi)_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i*)p));
#elif VW == 8 && defined(__AVX2__)
  return (vi)_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i*)p));
#else
  vi v; for (int i = 0; i < VW; i++) v[i] = p[i]; return v;
#endif
}
static inline vf tof(vi v) { return __builtin_convertvector(v, vf); }
static inline void storef(vf v, float* p) { std::memcpy(p, &v, sizeof v); }

struct Q8_0 { static constexpr int type = 8, QK = 32, BYTES = 34;
  template <typename E> static inline void decode(const uint8_t* b, E&& emit) {
    const float d = fp16(b);
    for (int j = 0; j < 32; j += VW) emit(d * tof(widen((const int8_t*)b + 2 + j)), j);
  }
};
struct Q4_0 { static constexpr int type = 2, QK = 32, BYTES = 18;
  template <typename E> static inline void decode(const uint8_t* b, E&& emit) {
    const float d = fp16(b), o = -8.f * d;
    for (int j = 0; j < 16; j += VW) {
      const vi q = widen(b + 2 + j);
      emit(d * tof(q & 15) + o, j); emit(d * tof(q >> 4) + o, j + 16);
    }
  }
};
struct Q4_1 { static constexpr int type = 3, QK = 32, BYTES = 20;
  template <typename E> static inline void decode(const uint8_t* b, E&& emit) {
    const float d = fp16(b), m = fp16(b + 2);
    for (int j = 0; j < 16; j += VW) {
      const vi q = widen(b + 4 + j);
      emit(d * tof(q & 15) + m, j); emit(d * tof(q >> 4) + m, j + 16);
    }
  }
};

// @section k-quants
// The "K" formats: super-blocks of 256 weights in 8 sub-blocks of 32, each with its own 6-bit scale (and for Q4_K and
// Q5_K a 6-bit minimum), packed 12 bytes for 16 numbers, both multiplied by the super-block's float16 d (dmin).
static inline void scale_min_k4(int j, const uint8_t* s, float& sc, float& mn) {
  if (j < 4) { sc = s[j] & 63; mn = s[j + 4] & 63; }
  else { sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4); mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4); }
}
struct Q4_K { static constexpr int type = 12, QK = 256, BYTES = 144;  // d, dmin, scales[12], qs[128]
  template <typename E> static inline void decode(const uint8_t* b, E&& emit) {
    const float d = fp16(b), dmin = fp16(b + 2); const uint8_t *s = b + 4, *q = b + 16;
    for (int j = 0; j < 4; j++, q += 32) {  // 64 weights: a sub-block in the low halves, the next in the high
      float s0, m0, s1, m1; scale_min_k4(2 * j, s, s0, m0); scale_min_k4(2 * j + 1, s, s1, m1);
      const float d0 = d * s0, n0 = dmin * m0, d1 = d * s1, n1 = dmin * m1;
      for (int l = 0; l < 32; l += VW) {
        const vi v = widen(q + l);
        emit(d0 * tof(v & 15) - n0, 64 * j + l); emit(d1 * tof(v >> 4) - n1, 64 * j + l + 32);
      }
    }
  }
};
struct Q5_K { static constexpr int type = 13, QK = 256, BYTES = 176;  // d, dmin, scales[12], qh[32], qs[128]
  template <typename E> static inline void decode(const uint8_t* b, E&& emit) {
    const float d = fp16(b), dmin = fp16(b + 2); const uint8_t *s = b + 4, *qh = b + 16, *q = b + 48;
    for (int j = 0; j < 4; j++, q += 32) {  // Q4_K's layout, plus each weight's fifth bit in qh: bit 2j, 2j + 1
      float s0, m0, s1, m1; scale_min_k4(2 * j, s, s0, m0); scale_min_k4(2 * j + 1, s, s1, m1);
      const float d0 = d * s0, n0 = dmin * m0, d1 = d * s1, n1 = dmin * m1;
      for (int l = 0; l < 32; l += VW) {
        const vi v = widen(q + l), h = widen(qh + l);
        emit(d0 * tof((v & 15) | (((h >> (2 * j)) & 1) << 4)) - n0, 64 * j + l);
        emit(d1 * tof((v >> 4) | (((h >> (2 * j + 1)) & 1) << 4)) - n1, 64 * j + l + 32);
      }
    }
  }
};
struct Q6_K { static constexpr int type = 14, QK = 256, BYTES = 210;  // ql[128], qh[64], int8 scales[16], d
  template <typename E> static inline void decode(const uint8_t* b, E&& emit) {  // 16 sub-blocks of 16; 6-bit quants minus 32
    const float d = fp16(b + 208); const uint8_t *ql = b, *qh = b + 128; const int8_t* s = (const int8_t*)(b + 192);
    for (int h = 0; h < 2; h++, ql += 64, qh += 32, s += 8)
      for (int l = 0; l < 32; l += VW) {  // VW <= 16: one scale per vector
        const int i = l / 16;
        const vi a = widen(ql + l), c = widen(ql + l + 32), e = widen(qh + l);
        emit(d * s[i] * (tof((a & 15) | ((e & 3) << 4)) - 32.f), 128 * h + l);
        emit(d * s[i + 2] * (tof((c & 15) | (((e >> 2) & 3) << 4)) - 32.f), 128 * h + l + 32);
        emit(d * s[i + 4] * (tof((a >> 4) | (((e >> 4) & 3) << 4)) - 32.f), 128 * h + l + 64);
        emit(d * s[i + 6] * (tof((c >> 4) | (((e >> 6) & 3) << 4)) - 32.f), 128 * h + l + 96);
      }
  }
};

template <typename F>
static inline void decode_row(const uint8_t* row, int K, float* y) {
  for (int k = 0; k < K; k += F::QK, row += F::BYTES) F::decode(row, [&](vf w, int j) { storef(w, y + k + j); });
}
static inline void store_bf16v(vf f, bf16* p) {  // VW floats -> bfloat16, rounded to nearest even (as torch does)
  vu u; std::memcpy(&u, &f, sizeof u);
  const vh h = __builtin_convertvector((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16, vh);
  std::memcpy(p, &h, sizeof h);
}
template <typename F>
static inline void decode_row(const uint8_t* row, int K, bf16* y) {
  for (int k = 0; k < K; k += F::QK, row += F::BYTES) F::decode(row, [&](vf w, int j) { store_bf16v(w, y + k + j); });
}

// @section linear
// y (M, N) = x (M, K) W^T, W's rows in blocks. A decode step has one row of x per running request: up to FUSED_ROWS
// rows, each block of W is decoded into registers and multiplied into every row's sums at once, so each weight byte
// is read from memory once, in its packed form. The threads split the output rows, one at a time.
template <typename F, int R, typename X>
static inline void row_dot(const uint8_t* row, const X* x, int64_t xs, int K, float* out) {
  vf acc[R];
  for (int r = 0; r < R; r++) acc[r] = vf{};
  for (int k = 0; k < K; k += F::QK, row += F::BYTES)
    F::decode(row, [&](vf w, int j) { for (int r = 0; r < R; r++) acc[r] += w * loadv(x + r * xs + k + j); });
  for (int r = 0; r < R; r++) out[r] = hsum(acc[r]);
}

template <typename F, int R, typename X>
static void gguf_linear_fused(const X* x, int64_t xs, const uint8_t* w, const float* bias, X* y, int64_t ys, int K, int N) {
  const int64_t row_bytes = int64_t(K / F::QK) * F::BYTES;
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    float out[R];
    row_dot<F, R>(w + n * row_bytes, x, xs, K, out);
    for (int r = 0; r < R; r++) store(out[r] + (bias ? bias[n] : 0.f), y + r * ys + n);
  }
}

constexpr int FUSED_ROWS = 8;  // up to 8 rows: fused (one row: 25% faster than the buffer; 8 rows: 25-45%); more: the buffer
template <typename F, int R, typename X>
static inline void fused_tail(int64_t M, const X* x, int64_t xs, const uint8_t* w, const float* bias, X* y, int64_t ys, int K, int N) {
  if constexpr (R > 0) {
    if (M == R) gguf_linear_fused<F, R>(x, xs, w, bias, y, ys, K, N); else fused_tail<F, R - 1>(M, x, xs, w, bias, y, ys, K, N);
  }
}

// @section q8-dot
// The K formats for one row of x or a few (a decode step), with integer dot products, as llama.cpp multiplies: each
// block of 32 of x's values is quantized to int8 once per call (its own float scale dx; dx times the sum of each 16 and
// each 32), each 32 weights of W are unpacked to unsigned bytes (no floats), and their 32 byte products are summed into
// 8 int32 lanes, 4 adjacent products a lane (`dot4`: `vpdpbusd` where the CPU has VNNI, else `vpmaddubsw` then
// `vpmaddwd`, which cannot saturate for quants below 64). A weight is d * q - m (q >= 0; a Q6_K quant's offset 32 is its
// m), so a row's dot is the sum over sub-blocks of d * dx * (q . xq), minus the sum of m * (dx * sum of xq), the latter
// from x's sums: one float multiply-add per 32 weights, not one per weight. Q8_0, Q4_0 and Q4_1 keep the float path
// (measured: no faster this way at the default model's shapes), and so does every format on a CPU without AVX2.
#if defined(__AVX2__)
#define LITEVLLM_GGUF_Q8 1
static inline __m256i dot4(__m256i u, __m256i x) {  // u: 32 unsigned bytes < 64, x: 32 int8 -> 8 int32, each 4 products
#if defined(__AVXVNNI__)
  return _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), u, x);
#elif defined(__AVX512VNNI__) && defined(__AVX512VL__)
  return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, x);
#else
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, x), _mm256_set1_epi16(1));
#endif
}
struct XQ { const int8_t* q; const float* dx; const float* s16; const float* s32; int K; };  // x quantized: row r at q + r*K, dx + r*K/32, s16 + r*K/16, s32 + r*K/32

template <typename X>
static void quantize_x(const X* x, int64_t xs, int64_t M, int K, int8_t* q, float* dx, float* s16, float* s32) {
  for (int64_t r = 0; r < M; r++)
    for (int b = 0; b < K / 32; b++) {
      float v[32], amax = 0.f;
      for (int i = 0; i < 32; i++) { v[i] = to_f32(x[r * xs + 32 * b + i]); amax = std::max(amax, std::fabs(v[i])); }
      const float id = amax > 0.f ? 127.f / amax : 0.f, d = amax * (1.f / 127.f);
      int sum[2] = {0, 0};
      for (int i = 0; i < 32; i++) {
        const int qi = int(std::nearbyint(v[i] * id));
        q[r * K + 32 * b + i] = int8_t(qi); sum[i / 16] += qi;
      }
      dx[r * (K / 32) + b] = d;
      s16[r * (K / 16) + 2 * b] = d * float(sum[0]); s16[r * (K / 16) + 2 * b + 1] = d * float(sum[1]);
      s32[r * (K / 32) + b] = d * float(sum[0] + sum[1]);
    }
}

// Each format's block against R rows of quantized x: acc[r] and acc2[r] += the scaled integer sums (two chains of
// multiply-adds, each of which waits 4 cycles for its last), off[r] += the offsets' products (subtracted at the end).
// k: the block's first weight.
template <typename F> struct Q8Dot { static constexpr bool ok = false; };
static inline __m256i load32(const void* p) { return _mm256_loadu_si256((const __m256i*)p); }

// The K formats: a super-block's 8 (Q6_K: 16) scales put on x's 8 block scales in one vector multiply per row, then
// each 32 weights' sums take theirs by a lane permute; the minimums' products are one vector multiply-add per row.
static inline void scales_mins_k4(const uint8_t* s, float d, float dmin, __m256& sc, __m256& mn) {
  uint32_t u[4]; std::memcpy(u, s, 12);  // scale_min_k4 for all 8 at once, on 32-bit words (as llama.cpp unpacks them)
  const uint32_t m6 = 0x3f3f3f3f, m4 = 0x0f0f0f0f, m2 = 0x03030303;
  u[3] = ((u[2] >> 4) & m4) | (((u[1] >> 6) & m2) << 4);  // minimums 4-7
  const uint32_t mins03 = u[1] & m6;
  u[1] = (u[2] & m4) | (((u[0] >> 6) & m2) << 4);         // scales 4-7
  u[2] = mins03; u[0] &= m6;                              // scales 0-3, minimums 0-3
  const __m128i v = _mm_loadu_si128((const __m128i*)u);
  sc = _mm256_mul_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v)));
  mn = _mm256_mul_ps(_mm256_set1_ps(dmin), _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(v, 8))));
}
static inline __m256 lane(__m256 v, int j) { return _mm256_permutevar8x32_ps(v, _mm256_set1_epi32(j)); }
template <int R> static inline void add32s(__m256i u, const XQ& x, int k, const __m256 scdx[R], int j, __m256 acc[R]) {
  for (int r = 0; r < R; r++)
    acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot4(u, load32(x.q + r * x.K + k))), lane(scdx[r], j), acc[r]);
}
template <int R> static inline void k4_setup(const uint8_t* b, const XQ& x, int k, __m256 scdx[R], __m256 acc_off[R]) {
  __m256 sc, mn; scales_mins_k4(b + 4, fp16(b), fp16(b + 2), sc, mn);
  for (int r = 0; r < R; r++) {
    scdx[r] = _mm256_mul_ps(sc, _mm256_loadu_ps(x.dx + r * (x.K / 32) + k / 32));       // d * scale * dx, per sub-block
    acc_off[r] = _mm256_fmadd_ps(mn, _mm256_loadu_ps(x.s32 + r * (x.K / 32) + k / 32), acc_off[r]);  // dmin * min * dx * sum
  }
}
template <> struct Q8Dot<Q4_K> { static constexpr bool ok = true;
  template <int R> static inline void block(const uint8_t* b, const XQ& x, int k, __m256 acc[R], __m256 acc2[R], __m256 off[R]) {
    __m256 scdx[R]; k4_setup<R>(b, x, k, scdx, off);
    const uint8_t* q = b + 16; const __m256i m4 = _mm256_set1_epi8(15);
    for (int j = 0; j < 4; j++, q += 32) {  // 32 bytes: sub-block 2j in the low halves, 2j + 1 in the high
      const __m256i v = load32(q);
      add32s<R>(_mm256_and_si256(v, m4), x, k + 64 * j, scdx, 2 * j, acc);
      add32s<R>(_mm256_and_si256(_mm256_srli_epi16(v, 4), m4), x, k + 64 * j + 32, scdx, 2 * j + 1, acc2);
    }
  }
};
template <> struct Q8Dot<Q5_K> { static constexpr bool ok = true;
  template <int R> static inline void block(const uint8_t* b, const XQ& x, int k, __m256 acc[R], __m256 acc2[R], __m256 off[R]) {
    __m256 scdx[R]; k4_setup<R>(b, x, k, scdx, off);
    const uint8_t* q = b + 48; const __m256i m4 = _mm256_set1_epi8(15), one = _mm256_set1_epi8(1), h = load32(b + 16);
    for (int j = 0; j < 4; j++, q += 32) {  // Q4_K's, plus the fifth bits: bit 2j (2j + 1) of qh's byte l
      const __m256i v = load32(q);  // 16-bit shifts, then a mask: no bit crosses into a byte it does not belong to
      const __m256i h0 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 2 * j), one), 4);
      const __m256i h1 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 2 * j + 1), one), 4);
      add32s<R>(_mm256_or_si256(_mm256_and_si256(v, m4), h0), x, k + 64 * j, scdx, 2 * j, acc);
      add32s<R>(_mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v, 4), m4), h1), x, k + 64 * j + 32, scdx, 2 * j + 1, acc2);
    }
  }
};
template <> struct Q8Dot<Q6_K> { static constexpr bool ok = true;  // 16 scales of 16 weights; quants minus 32
  template <int R> static inline void block(const uint8_t* b, const XQ& x, int k, __m256 acc[R], __m256 acc2[R], __m256 off[R]) {
    const float d = fp16(b + 208); const uint8_t *ql = b, *qh = b + 128; const int8_t* s = (const int8_t*)(b + 192);
    const __m256i m4 = _mm256_set1_epi8(15), m2 = _mm256_set1_epi8(3);
    for (int h = 0; h < 2; h++, ql += 64, qh += 32, s += 8, k += 128) {  // 6-bit quants: 4 low bits in ql, 2 high in qh
      const __m256 sc = _mm256_mul_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i*)s))));
      __m256 scdx[R];  // d * scale * dx for the 8 groups of 16: x's scale per 32, each twice
      for (int r = 0; r < R; r++) {
        const __m128 dx4 = _mm_loadu_ps(x.dx + r * (x.K / 32) + k / 32);
        scdx[r] = _mm256_mul_ps(sc, _mm256_setr_m128(_mm_unpacklo_ps(dx4, dx4), _mm_unpackhi_ps(dx4, dx4)));
        off[r] = _mm256_fmadd_ps(_mm256_mul_ps(sc, _mm256_set1_ps(32.f)), _mm256_loadu_ps(x.s16 + r * (x.K / 16) + k / 16), off[r]);
      }
      const __m256i a = load32(ql), c = load32(ql + 32), e = load32(qh);
      auto hi2 = [&](int sh) { return _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(e, sh), m2), 4); };
      const __m256i u[4] = {_mm256_or_si256(_mm256_and_si256(a, m4), hi2(0)), _mm256_or_si256(_mm256_and_si256(c, m4), hi2(2)),
                            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(a, 4), m4), hi2(4)),
                            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(c, 4), m4), hi2(6))};
      auto add = [&](int i, __m256* a) {  // dot4's lanes 0-3 are the first 16 weights' sums, lanes 4-7 the second's
        const __m256i idx = _mm256_setr_epi32(2 * i, 2 * i, 2 * i, 2 * i, 2 * i + 1, 2 * i + 1, 2 * i + 1, 2 * i + 1);
        for (int r = 0; r < R; r++)
          a[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot4(u[i], load32(x.q + r * x.K + k + 32 * i))),
                                 _mm256_permutevar8x32_ps(scdx[r], idx), a[r]);
      };
      add(0, acc); add(1, acc2); add(2, acc); add(3, acc2);  // two chains of multiply-adds (each waits 4 cycles for the last)
    }
  }
};

static inline float hsum8(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}
// @section q8-pairs
// One row of x (one user's decode step): a thread that reads its rows of W one after the other is one stream front to
// back, too few cache lines in flight for the memory (as 03's one-row kernel found), so it reads two rows at once, n
// and n + half, a block of each in turn, each with its own sums in the order gguf_linear_q8 adds them: the same outputs.
template <typename F, typename X>
static void gguf_linear_q8_pairs(const XQ& x, const uint8_t* w, const float* bias, X* y, int K, int N) {
  const int64_t row_bytes = int64_t(K / F::QK) * F::BYTES;
  const int half = (N + 1) / 2;
#pragma omp parallel for schedule(static)
  for (int i = 0; i < half; i++) {
    const int n1 = i + half < N ? i + half : i;  // no partner: row i again, its sum not stored
    __m256 a[1], a2[1], ao[1], b[1], b2[1], bo[1];
    a[0] = a2[0] = ao[0] = b[0] = b2[0] = bo[0] = _mm256_setzero_ps();
    const uint8_t *r0 = w + i * row_bytes, *r1 = w + n1 * row_bytes;
    int k = 0;  // as gguf_linear_q8's loop: a block's sums alternate between the two accumulators
    for (; k + 2 * F::QK <= K; k += 2 * F::QK, r0 += 2 * F::BYTES, r1 += 2 * F::BYTES) {
      Q8Dot<F>::template block<1>(r0, x, k, a, a2, ao); Q8Dot<F>::template block<1>(r1, x, k, b, b2, bo);
      Q8Dot<F>::template block<1>(r0 + F::BYTES, x, k + F::QK, a2, a, ao); Q8Dot<F>::template block<1>(r1 + F::BYTES, x, k + F::QK, b2, b, bo);
    }
    if (k < K) { Q8Dot<F>::template block<1>(r0, x, k, a, a2, ao); Q8Dot<F>::template block<1>(r1, x, k, b, b2, bo); }
    store(hsum8(_mm256_sub_ps(_mm256_add_ps(a[0], a2[0]), ao[0])) + (bias ? bias[i] : 0.f), y + i);
    if (n1 != i) store(hsum8(_mm256_sub_ps(_mm256_add_ps(b[0], b2[0]), bo[0])) + (bias ? bias[n1] : 0.f), y + n1);
  }
}

// @section q8-rows
template <typename F, int R, typename X>
static void gguf_linear_q8(const XQ& x, const uint8_t* w, const float* bias, X* y, int64_t ys, int K, int N) {
  if constexpr (R == 1) return gguf_linear_q8_pairs<F>(x, w, bias, y, K, N);  // one row: two streams a thread (`q8-pairs`)
  const int64_t row_bytes = int64_t(K / F::QK) * F::BYTES;
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    __m256 acc[R], acc2[R], off[R];  // two accumulators a row: a block's sums alternate between them (or blocks do)
    for (int r = 0; r < R; r++) { acc[r] = acc2[r] = off[r] = _mm256_setzero_ps(); }
    const uint8_t* row = w + n * row_bytes;
    int k = 0;
    for (; k + 2 * F::QK <= K; k += 2 * F::QK, row += 2 * F::BYTES) {
      Q8Dot<F>::template block<R>(row, x, k, acc, acc2, off);
      Q8Dot<F>::template block<R>(row + F::BYTES, x, k + F::QK, acc2, acc, off);
    }
    if (k < K) Q8Dot<F>::template block<R>(row, x, k, acc, acc2, off);
    for (int r = 0; r < R; r++) store(hsum8(_mm256_sub_ps(_mm256_add_ps(acc[r], acc2[r]), off[r])) + (bias ? bias[n] : 0.f), y + r * ys + n);
  }
}
template <typename F, int R, typename X>
static inline void q8_tail(int64_t M, const XQ& x, const uint8_t* w, const float* bias, X* y, int64_t ys, int K, int N) {
  if constexpr (R > 0) {
    if (M == R) gguf_linear_q8<F, R>(x, w, bias, y, ys, K, N); else q8_tail<F, R - 1>(M, x, w, bias, y, ys, K, N);
  }
}
template <typename F, typename X>  // false: this format keeps the float path
static bool gguf_linear_few(const X* x, int64_t xs, const uint8_t* w, const float* bias, X* y, int64_t ys, int64_t M, int K, int N) {
  if constexpr (!Q8Dot<F>::ok) return false;
  else {
    thread_local std::vector<int8_t> q; thread_local std::vector<float> f;
    q.resize(size_t(M) * K); f.resize(size_t(M) * (K / 32 + K / 16 + K / 32));
    float *dx = f.data(), *s16 = dx + M * (K / 32), *s32 = s16 + M * (K / 16);
    quantize_x(x, xs, M, K, q.data(), dx, s16, s32);
    q8_tail<F, FUSED_ROWS>(M, XQ{q.data(), dx, s16, s32, K}, w, bias, y, ys, K, N);
    return true;
  }
}
#else
template <typename F, typename X>
static bool gguf_linear_few(const X*, int64_t, const uint8_t*, const float*, X*, int64_t, int64_t, int, int) { return false; }
#endif
extern "C" int litevllm_gguf_q8_path() {  // 0: floats only; 1: int8 products with vpmaddubsw; 2: with VNNI's vpdpbusd
#if !defined(LITEVLLM_GGUF_Q8)
  return 0;
#elif defined(__AVXVNNI__) || (defined(__AVX512VNNI__) && defined(__AVX512VL__))
  return 2;
#else
  return 1;
#endif
}

// @section linear-buffer
// More rows (a batch of decoding requests): decoding a block once per row would cost more than the multiply, so the
// threads split the output rows NT at a time, decode those rows once into a float buffer that stays in L1/L2 (NT * K
// floats), then multiply every row of x by them, MT rows of x at a time (MT x NT accumulators in registers; each vector
// of x is loaded once for NT outputs, each of W once for MT rows).
constexpr int NT = 4;  // measured at 16-128 rows against 2, 6 and 8 outputs with as many rows as fit the registers
#if VW == 16
constexpr int MT = 6;  // 24 accumulators of AVX-512's 32 registers (4 rows: 10-15% slower)
#else
constexpr int MT = 3;  // 12 of AVX2's 16 (2 rows: 35-40% slower)
#endif

// The sums of NT = 4 accumulators at once, their lanes added across the four: 13 instructions where four `hsum`s take
// 32 (AVX-512); on AVX2 three `vhaddps` and an add.
static inline void hsum4(const vf* a, float* s) {
#if defined(__AVX512F__)
  const __m512 a0 = (__m512)a[0], a1 = (__m512)a[1], a2 = (__m512)a[2], a3 = (__m512)a[3];
  const __m512 ab = _mm512_add_ps(_mm512_shuffle_f32x4(a0, a1, 0x44), _mm512_shuffle_f32x4(a0, a1, 0xEE));  // a0's halves added, a1's
  const __m512 cd = _mm512_add_ps(_mm512_shuffle_f32x4(a2, a3, 0x44), _mm512_shuffle_f32x4(a2, a3, 0xEE));
  __m512 t = _mm512_add_ps(_mm512_shuffle_f32x4(ab, cd, 0x88), _mm512_shuffle_f32x4(ab, cd, 0xDD));  // 128-bit lane i: a[i] in 4
  t = _mm512_add_ps(t, _mm512_permute_ps(t, 0x4E));
  t = _mm512_add_ps(t, _mm512_permute_ps(t, 0xB1));  // element 4i: a[i]'s sum
  alignas(64) float o[16]; _mm512_store_ps(o, t);
  s[0] = o[0]; s[1] = o[4]; s[2] = o[8]; s[3] = o[12];
#elif defined(__AVX2__)
  const __m256 t = _mm256_hadd_ps(_mm256_hadd_ps((__m256)a[0], (__m256)a[1]), _mm256_hadd_ps((__m256)a[2], (__m256)a[3]));
  _mm_storeu_ps(s, _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1)));  // lanes 0-3 and 4-7 of each
#else
  for (int t = 0; t < 4; t++) s[t] = hsum(a[t]);
#endif
}

template <int R, typename X>
static inline void rows_x_buf(const X* x, int64_t xs, const float* buf, int K, int nt, const float* bias, X* y, int64_t ys) {
  vf acc[R][NT];
  for (int r = 0; r < R; r++) for (int t = 0; t < NT; t++) acc[r][t] = vf{};
  for (int k = 0; k < K; k += VW) {  // K is whole blocks (32 or 256): whole vectors
    vf w[NT];
    for (int t = 0; t < NT; t++) w[t] = loadv(buf + int64_t(t) * K + k);
    for (int r = 0; r < R; r++) {
      vf xv = loadv(x + r * xs + k);
#if defined(__x86_64__)
      asm("" : "+v"(xv));  // in a register: GCC would read it from memory again in each of the NT multiply-adds
#endif
      for (int t = 0; t < NT; t++) acc[r][t] += xv * w[t];
    }
  }
  static_assert(NT == 4, "hsum4");
  for (int r = 0; r < R; r++) {
    float s[NT]; hsum4(acc[r], s);
    for (int t = 0; t < nt; t++) store(s[t] + (bias ? bias[t] : 0.f), y + r * ys + t);
  }
}

template <int R, typename X>  // the last m < R rows
static inline void rows_x_buf_tail(int64_t m, const X* x, int64_t xs, const float* buf, int K, int nt, const float* bias, X* y, int64_t ys) {
  if constexpr (R > 0) {
    if (m == R) rows_x_buf<R>(x, xs, buf, K, nt, bias, y, ys); else rows_x_buf_tail<R - 1>(m, x, xs, buf, K, nt, bias, y, ys);
  }
}

template <typename F, typename X>
static void gguf_linear(const X* x, int64_t xs, const uint8_t* w, const float* bias, X* y, int64_t ys, int64_t M, int K, int N) {
  if (M <= FUSED_ROWS) {  // a decode step's rows: int8 products where the format and the CPU have them, else floats
    if (!gguf_linear_few<F>(x, xs, w, bias, y, ys, M, K, N)) fused_tail<F, FUSED_ROWS>(M, x, xs, w, bias, y, ys, K, N);
    return;
  }
  const int64_t row_bytes = int64_t(K / F::QK) * F::BYTES;
#pragma omp parallel
  {
    std::vector<float> buf(size_t(NT) * K, 0.f);
#pragma omp for schedule(static)
    for (int n0 = 0; n0 < N; n0 += NT) {
      const int nt = std::min(NT, N - n0);
      for (int t = 0; t < nt; t++) decode_row<F>(w + (n0 + t) * row_bytes, K, buf.data() + int64_t(t) * K);
      const float* bb = bias ? bias + n0 : nullptr;
      int64_t m = 0;
      for (; m + MT <= M; m += MT) rows_x_buf<MT>(x + m * xs, xs, buf.data(), K, nt, bb, y + m * ys + n0, ys);
      rows_x_buf_tail<MT - 1>(M - m, x + m * xs, xs, buf.data(), K, nt, bb, y + m * ys + n0, ys);
    }
  }
}

// @section rows
// Whole rows decoded: the embedding's rows of a step's token ids (`ids`), or every row (`ids` null: the weight for a
// prefill's matrix multiply, which then runs at oneDNN's speed whatever the format).
template <typename F, typename Y>
static void gguf_rows(const uint8_t* w, const int64_t* ids, int64_t n, int K, Y* y) {
  const int64_t row_bytes = int64_t(K / F::QK) * F::BYTES;
#pragma omp parallel for schedule(static) if (n >= 16)
  for (int64_t i = 0; i < n; i++) decode_row<F>(w + (ids ? ids[i] : i) * row_bytes, K, y + i * K);  // float32 or bfloat16
}

// @section entry
// type: GGML's number for the format; bf: 0 float32 activations and outputs, 1 bfloat16; xs, ys: the row strides of x
// and y (y may be a slice of a wider output). Returns 0, or 1 for a type these kernels do not have (or K not whole blocks).
template <template <typename> class Run, typename... A>
static int dispatch(int type, int K, A... a) {
  switch (type) {
    case Q8_0::type: if (K % Q8_0::QK) return 1; Run<Q8_0>::go(a...); return 0;
    case Q4_0::type: if (K % Q4_0::QK) return 1; Run<Q4_0>::go(a...); return 0;
    case Q4_1::type: if (K % Q4_1::QK) return 1; Run<Q4_1>::go(a...); return 0;
    case Q4_K::type: if (K % Q4_K::QK) return 1; Run<Q4_K>::go(a...); return 0;
    case Q5_K::type: if (K % Q5_K::QK) return 1; Run<Q5_K>::go(a...); return 0;
    case Q6_K::type: if (K % Q6_K::QK) return 1; Run<Q6_K>::go(a...); return 0;
  }
  return 1;
}
template <typename F> struct LinearRun {
  static void go(int bf, const void* x, int64_t xs, const uint8_t* w, const float* bias, void* y, int64_t ys, int64_t M, int K, int N) {
    if (bf) gguf_linear<F>((const bf16*)x, xs, w, bias, (bf16*)y, ys, M, K, N);
    else gguf_linear<F>((const float*)x, xs, w, bias, (float*)y, ys, M, K, N);
  }
};
template <typename F> struct RowsRun {
  static void go(int bf, const uint8_t* w, const int64_t* ids, int64_t n, int K, void* y) {
    if (bf) gguf_rows<F>(w, ids, n, K, (bf16*)y); else gguf_rows<F>(w, ids, n, K, (float*)y);
  }
};

extern "C" int litevllm_gguf_linear(int type, int bf, const void* x, int64_t xs, const uint8_t* w, const float* bias, void* y,
                                    int64_t ys, int64_t M, int K, int N) {
  return dispatch<LinearRun>(type, K, bf, x, xs, w, bias, y, ys, M, K, N);
}
extern "C" int litevllm_gguf_rows(int type, int bf, const uint8_t* w, const int64_t* ids, int64_t n, int K, void* y) {
  return dispatch<RowsRun>(type, K, bf, w, ids, n, K, y);
}
