// litevllm's CPU vector helpers: register-wide float vectors, bfloat16 loads and stores, an inline exp, horizontal max
// and sum. cpu_attention.cpp and cpu_ops.cpp include this file. kernels_nbs/02_cpu_attention.ipynb explains it one
// section at a time: each `// @section NAME` line starts a section that the notebook shows with `show_source`.
#pragma once

// @section vector-width
#include <algorithm>
#include <cstdint>
#include <cstring>
#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

// One vector register's worth of floats: 16 on AVX-512, 8 on AVX2, 4 elsewhere (SSE, NEON). Wider GCC vectors than the
// target's registers compile to code that keeps arrays of them on the stack (an AVX2 build of a 16-float version ran
// prefill attention 16x slower than AVX-512), so every loop below steps by VW.
#if defined(__AVX512F__)
#define VW 16
#elif defined(__AVX2__)
#define VW 8
#else
#define VW 4
#endif
typedef uint16_t bf16;                                 // bfloat16 bits: the high half of a float32
typedef float vf __attribute__((vector_size(VW * 4)));  // VW floats
typedef uint16_t vh __attribute__((vector_size(VW * 2)));
typedef uint32_t vu __attribute__((vector_size(VW * 4)));
typedef int32_t vi __attribute__((vector_size(VW * 4)));

// @section bf16
static inline vf loadv(const float* p) { vf v; std::memcpy(&v, p, sizeof v); return v; }
static inline vf loadv(const bf16* p) {  // VW bf16 -> VW float32: widen, shift into the high half
#if defined(__AVX512F__)  // one widening load (the generic code below compiles to two halves)
  return (vf)_mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)p)), 16));
#elif defined(__AVX2__)
  return (vf)_mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)p)), 16));
#else
  vh h; std::memcpy(&h, p, sizeof h);
  vu u = __builtin_convertvector(h, vu) << 16; vf f; std::memcpy(&f, &u, sizeof f); return f;
#endif
}
static inline float to_f32(float x) { return x; }
static inline float to_f32(bf16 x) { uint32_t u = uint32_t(x) << 16; float f; std::memcpy(&f, &u, 4); return f; }
static inline void store(float f, float* dst) { *dst = f; }
static inline void store(float f, bf16* dst) {  // round to nearest even, as torch does
  uint32_t u; std::memcpy(&u, &f, 4); *dst = bf16((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

// @section expv
// e^x for VW floats, inline (a call to libm's vector exp makes the compiler spill every live register around it):
// e^x = 2^n e^r, n = round(x / ln 2), |r| <= ln 2 / 2, e^r by its Taylor polynomial to degree 6 (relative error ~2e-7)
static inline vf expv(vf x) {
  x = x < -87.f ? -87.f : x; x = x > 88.f ? 88.f : x;                         // e^-87 ~ 1.6e-38, e^88 ~ 1.7e38: float32's ends
  const vi ni = __builtin_convertvector(x * 1.44269504f + 126.5f, vi) - 126;  // round(x / ln 2) (the sum is > 0)
  const vf n = __builtin_convertvector(ni, vf);
  const vf r = (x - n * 0.693359375f) + n * 2.12194440e-4f;                  // x - n ln 2, ln 2 split in two
  vf p = r * (1.f / 720) + 1.f / 120;
  p = p * r + 1.f / 24; p = p * r + 1.f / 6; p = p * r + 0.5f; p = p * r + 1.f; p = p * r + 1.f;
  const vi e = (ni + 127) << 23; vf two_n; std::memcpy(&two_n, &e, sizeof two_n);
  return p * two_n;
}

// @section reductions
static inline float hmax(vf v) {
#if defined(__AVX512F__)
  return _mm512_reduce_max_ps((__m512)v);
#else
  float m = v[0]; for (int j = 1; j < VW; j++) m = std::max(m, v[j]); return m;
#endif
}
static inline float hsum(vf v) {
#if defined(__AVX512F__)
  return _mm512_reduce_add_ps((__m512)v);
#else
  float m = 0.f; for (int j = 0; j < VW; j++) m += v[j]; return m;
#endif
}
