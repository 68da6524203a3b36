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

template <int R, typename X>
static inline void rows_x_buf(const X* x, int64_t xs, const float* buf, int K, int nt, const float* bias, X* y, int64_t ys) {
  vf acc[R][NT];
  for (int r = 0; r < R; r++) for (int t = 0; t < NT; t++) acc[r][t] = vf{};
  for (int k = 0; k < K; k += VW) {  // K is whole blocks (32 or 256): whole vectors
    vf w[NT];
    for (int t = 0; t < NT; t++) w[t] = loadv(buf + int64_t(t) * K + k);
    for (int r = 0; r < R; r++) {
      const vf xv = loadv(x + r * xs + k);
      for (int t = 0; t < NT; t++) acc[r][t] += xv * w[t];
    }
  }
  for (int r = 0; r < R; r++)
    for (int t = 0; t < nt; t++) store(hsum(acc[r][t]) + (bias ? bias[t] : 0.f), y + r * ys + t);
}

template <int R, typename X>  // the last m < R rows
static inline void rows_x_buf_tail(int64_t m, const X* x, int64_t xs, const float* buf, int K, int nt, const float* bias, X* y, int64_t ys) {
  if constexpr (R > 0) {
    if (m == R) rows_x_buf<R>(x, xs, buf, K, nt, bias, y, ys); else rows_x_buf_tail<R - 1>(m, x, xs, buf, K, nt, bias, y, ys);
  }
}

template <typename F, typename X>
static void gguf_linear(const X* x, int64_t xs, const uint8_t* w, const float* bias, X* y, int64_t ys, int64_t M, int K, int N) {
  if (M <= FUSED_ROWS) { fused_tail<F, FUSED_ROWS>(M, x, xs, w, bias, y, ys, K, N); return; }  // a decode step's rows
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
#pragma omp parallel if (n >= 16)
  {
    std::vector<float> buf(std::is_same<Y, float>::value ? 0 : K);
#pragma omp for schedule(static)
    for (int64_t i = 0; i < n; i++) {
      const uint8_t* row = w + (ids ? ids[i] : i) * row_bytes;
      if constexpr (std::is_same<Y, float>::value) decode_row<F>(row, K, y + i * K);
      else { decode_row<F>(row, K, buf.data()); for (int k = 0; k < K; k++) store(buf[k], y + i * K + k); }
    }
  }
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
