// litevllm's paged attention for CPUs: causal attention of a flat batch of query tokens over each request's paged K/V
// cache, and the store of new tokens into that cache. kernels_nbs/02_cpu_attention.ipynb explains it one section at a
// time: each `// @section NAME` line starts a section that the notebook shows with `show_source`.

// @section constants
#include "cpu_vector.h"
#include <cmath>
#include <omp.h>
#include <type_traits>
#include <vector>

constexpr int BS = 16;        // keys per block
constexpr int NB = BS / VW;   // vectors per row of a block's keys: 1 on AVX-512, 2 on AVX2, 4 elsewhere
constexpr int MAX_ROWS = 64;  // query rows per work item: query tokens x the query heads of one kv head
constexpr int AHEAD = 4;  // blocks prefetched ahead of the one being read
constexpr int MIN_PART = 8;   // a work item's keys are split (few items, long contexts) into parts of at least this many blocks
#if defined(__AVX512BF16__) && VW == 16
constexpr bool BF16_PAIRS = true;  // vdpbf16ps: a prefill item's bf16 products two at a time (see `scores`)
#else
constexpr bool BF16_PAIRS = false;
#endif
template <typename T> constexpr bool PAIRED = BF16_PAIRS && std::is_same<T, bf16>::value;
constexpr int divisor_at_most(int n, int m) { int d = std::min(n, m); while (n % d) d--; return d; }  // whole chunks of n
#if defined(__AVX512F__) || defined(__aarch64__)
constexpr int VREGS = 32;     // vector registers: zmm (AVX-512), NEON
#else
constexpr int VREGS = 16;     // ymm (AVX2), xmm (SSE)
#endif
template <typename T>  // ask for one block's K and V (of kv head h) to be brought into the L2 cache (locality 1)
static inline void prefetch_block(const T* kc, const T* vc, int64_t blk, int Hkv, int h, int D) {
  const char* k = (const char*)(kc + (blk * Hkv + h) * D * BS);
  const char* v = (const char*)(vc + (blk * Hkv + h) * BS * D);
  for (int i = 0; i < int(D * BS * sizeof(T)); i += 64) { __builtin_prefetch(k + i, 0, 1); __builtin_prefetch(v + i, 0, 1); }
}

// @section tile-setup
// One work item: R query rows (query tokens i0..i0+nq of one request x the G query heads of kv head h) against the
// request's keys, one block at a time. Row r is token i0 + r / G, head h * G + r % G; it sees keys 0..pos[r], or with a
// sliding window W > 0 only keys pos[r] - W + 1..pos[r]: blocks wholly before the first row's window are never read.
// Only keys kbeg..kend-1 (whole blocks) are read; with `part`, each row's unnormalised sums, max and sum go there
// (D + 2 floats a row) for `merge_parts`, not to `out`.
template <typename T, int D, int RT>  // RT: rows per tile
static void attend_item(const T* q, int64_t qs, const T* kc, const T* vc, T* out, const int32_t* table, int first_pos, int i0,
                        int nq, int G, int H, int Hkv, int h, float scale, int window, int kbeg, int kend, float* part) {
  constexpr int C = D / VW;  // vectors per row of head_dim
  const int R = nq * G, Rp = (R + RT - 1) / RT * RT, n_keys = first_pos + nq;
  alignas(64) float Q[MAX_ROWS + RT][D];
  alignas(64) uint32_t Qp[PAIRED<T> ? MAX_ROWS + RT : 1][D / 2];  // bf16 pairs: each row's q (unscaled), two d in 32 bits
  alignas(64) vf acc[MAX_ROWS + RT][C];
  float m[MAX_ROWS + RT], l[MAX_ROWS + RT];
  int pos[MAX_ROWS + RT];
  for (int r = 0; r < Rp; r++) {
    const int rr = std::min(r, R - 1);  // padding rows repeat the last row and are not written out
    const T* qr = q + int64_t(i0 + rr / G) * qs + (h * G + rr % G) * D;  // qs: q's row stride
    for (int d = 0; d < D; d++) Q[r][d] = to_f32(qr[d]) * scale;
    if constexpr (PAIRED<T>)  // only a prefill item (more than one tile) reads the pairs
      if (Rp > RT) for (int p = 0; p < D / 2; p++) Qp[r][p] = uint32_t(qr[2 * p]) | uint32_t(qr[2 * p + 1]) << 16;
    for (int c = 0; c < C; c++) acc[r][c] = vf{};
    m[r] = -1e30f; l[r] = 0.f; pos[r] = first_pos + rr / G;
  }
  vf iota[NB]; for (int j = 0; j < BS; j++) iota[j / VW][j % VW] = j;
  const int W = window > 0 ? window : n_keys + 1;                // no window: every earlier key
  const int kfirst = std::max(kbeg, std::max(0, first_pos - W + 1) / BS * BS);  // the first block any row's window reaches
  const int kstop = std::min(n_keys, kend);
  for (int k = 0; kfirst + k * BS < kstop && k < AHEAD; k++) prefetch_block(kc, vc, table[kfirst / BS + k], Hkv, h, D);

// @section scores
  for (int k0 = kfirst; k0 < kstop; k0 += BS) {
    const int64_t blk = table[k0 / BS];
    // The block AHEAD blocks on is asked for a line at a time as this one is read (K's lines in the scores' loop, V's in
    // the products'): a burst of all 128 lines at once waited for the core's few outstanding misses.
    const int64_t ahead = k0 + AHEAD * BS < kstop ? table[k0 / BS + AHEAD] : -1;
    const char* nK = ahead < 0 ? nullptr : (const char*)(kc + (ahead * Hkv + h) * D * BS);
    const char* nV = ahead < 0 ? nullptr : (const char*)(vc + (ahead * Hkv + h) * BS * D);
    const T* Kb = kc + (blk * Hkv + h) * D * BS;  // K transposed: [D][BS]
    const T* Vb = vc + (blk * Hkv + h) * BS * D;  // V: [BS][D]
    // A prefill item's many tiles all read this block: in bfloat16 it is rearranged once, here, not by every tile.
    // V is widened to float32 (each `loadv` of bf16 widens: the same numbers as reading it in place); K too, or with
    // AVX512-BF16 put in pairs for vdpbf16ps (K's elements d, d+1 of each key side by side: two exact products a lane).
    // `tiles` is compiled for each form of K (bf16 in place, float32, pairs: uint32_t) and of V (bf16, float32).
    alignas(64) float Kf[std::is_same<T, float>::value || PAIRED<T> ? 1 : D * BS], Vf[std::is_same<T, float>::value ? 1 : BS * D];
    alignas(64) uint32_t Kp[PAIRED<T> ? D / 2 * BS : 1];
    auto tiles = [&](const auto* Kb, const auto* Vb) {
    using KT = std::remove_cv_t<std::remove_pointer_t<decltype(Kb)>>;
    for (int r0 = 0; r0 < Rp; r0 += RT) {
      if (pos[r0 + RT - 1] < k0 || pos[r0] - W + 1 >= k0 + BS) continue;  // no row of the tile sees this block
      const char* pK = r0 == 0 ? nK : nullptr;  // the first tile asks for the next blocks' lines; the others find them
      const char* pV = r0 == 0 ? nV : nullptr;
      // partial sums per row and vector of keys: RT * NB * NA >= 8 chains of FMAs in flight, within the registers
      constexpr int NA = VREGS >= 32 ? (RT >= 4 ? 2 : RT == 1 ? 8 : 4) : std::max(1, 8 / (RT * NB));
      vf s[RT][NB], sa[RT][NB][NA];          // scores of the tile's rows for the block's 16 keys, NB vectors each
      for (int t = 0; t < RT; t++) for (int b = 0; b < NB; b++) for (int a = 0; a < NA; a++) sa[t][b][a] = vf{};
      if constexpr (std::is_same<KT, uint32_t>::value) {  // pairs (NB = 1): q's d, d+1 broadcast against 16 keys' d, d+1
#if defined(__AVX512BF16__)
        for (int p = 0; p < D / 2; p += NA) {
          if (pK) for (int i = 0; i < int(2 * NA * BS * sizeof(T)); i += 64) __builtin_prefetch(pK + 2 * p * BS * sizeof(T) + i, 0, 1);
          for (int a = 0; a < NA; a++) {
            const __m512bh kp = (__m512bh)_mm512_load_si512(Kb + (p + a) * BS);
            for (int t = 0; t < RT; t++)
              sa[t][0][a] = (vf)_mm512_dpbf16_ps((__m512)sa[t][0][a], kp, (__m512bh)_mm512_set1_epi32(int(Qp[r0 + t][p + a])));
          }
        }
        for (int t = 0; t < RT; t++) { s[t][0] = sa[t][0][0]; for (int a = 1; a < NA; a++) s[t][0] += sa[t][0][a]; s[t][0] *= scale; }
#endif
      } else {
        for (int d = 0; d < D; d += NA) {
          if (pK) for (int i = 0; i < int(NA * BS * sizeof(T)); i += 64) __builtin_prefetch(pK + d * BS * sizeof(T) + i, 0, 1);
#pragma GCC unroll 8
          for (int a = 0; a < NA; a++)
#pragma GCC unroll 4
            for (int b = 0; b < NB; b++) {
              const vf kd = loadv(Kb + (d + a) * BS + b * VW);
#pragma GCC unroll 4
              for (int t = 0; t < RT; t++) sa[t][b][a] += Q[r0 + t][d + a] * kd;
            }
        }
        for (int t = 0; t < RT; t++) for (int b = 0; b < NB; b++) { s[t][b] = sa[t][b][0]; for (int a = 1; a < NA; a++) s[t][b] += sa[t][b][a]; }
      }

// @section softmax
      alignas(64) float pj[RT][BS];         // softmax weights (relative to each row's running max)
      vf dm = vf{};                         // each row's change of max (RT <= 4 <= VW lanes)
      float corr[RT], sums[RT];             // what was summed under the old max is rescaled by corr; the block's sums
      for (int t = 0; t < RT; t++) {
        const int r = r0 + t, lim = std::min(BS, pos[r] + 1 - k0), lo = pos[r] - W + 1 - k0;  // keys lo..lim-1 of this block: row r's
        float mx = m[r];
        for (int b = 0; b < NB; b++) mx = std::max(mx, hmax(iota[b] < float(lim) && iota[b] >= float(lo) ? s[t][b] : -1e30f));  // keys past pos[r] or before the window: out
        vf sum = vf{};
        for (int b = 0; b < NB; b++) {
          const vf p = iota[b] < float(lim) && iota[b] >= float(lo) ? expv(s[t][b] - mx) : vf{};
          sum += p; std::memcpy(&pj[t][b * VW], &p, sizeof p);
        }
        sums[t] = hsum(sum);
        dm[t] = m[r] - mx; m[r] = mx;
        if constexpr (RT < 4) corr[t] = expv(vf{} + dm[t])[0];  // decode tiles: each row's on its own (measured faster there)
      }
      if constexpr (RT >= 4) { const vf c = expv(dm); for (int t = 0; t < RT; t++) corr[t] = c[t]; }  // the tile's in one exp
      for (int t = 0; t < RT; t++) l[r0 + t] = l[r0 + t] * corr[t] + sums[t];

// @section pv
      constexpr int CC = divisor_at_most(C, std::max(1, 16 / RT));  // AVX-512: CC vectors of V's columns at a time (head_dim 64: all)
      if constexpr (VREGS >= 32) {          // AVX-512: the tile's RT x CC accumulators stay in registers over the block
        for (int c0 = 0; c0 < C; c0 += CC) {
          vf a[RT][CC];
          for (int t = 0; t < RT; t++) for (int c = 0; c < CC; c++) a[t][c] = acc[r0 + t][c0 + c] * corr[t];
          for (int j = 0; j < BS; j++) {
            if (pV && c0 == 0) for (int i = 0; i < int(D * sizeof(T)); i += 64) __builtin_prefetch(pV + j * D * sizeof(T) + i, 0, 1);
            vf v[CC];
            for (int c = 0; c < CC; c++) v[c] = loadv(Vb + j * D + (c0 + c) * VW);
            for (int t = 0; t < RT; t++) for (int c = 0; c < CC; c++) a[t][c] += pj[t][j] * v[c];
          }
          for (int t = 0; t < RT; t++) for (int c = 0; c < CC; c++) acc[r0 + t][c0 + c] = a[t][c];
        }
      } else {                              // 16 registers (AVX2): one vector of V's columns at a time, RT accumulators live
        for (int c = 0; c < C; c++) {
          vf a[RT];
          for (int t = 0; t < RT; t++) a[t] = acc[r0 + t][c] * corr[t];
          for (int j = 0; j < BS; j++) {
            if (pV && c == 0) for (int i = 0; i < int(D * sizeof(T)); i += 64) __builtin_prefetch(pV + j * D * sizeof(T) + i, 0, 1);
            const vf v = loadv(Vb + j * D + c * VW);
            for (int t = 0; t < RT; t++) a[t] += pj[t][j] * v;
          }
          for (int t = 0; t < RT; t++) acc[r0 + t][c] = a[t];
        }
      }
    }
    };
    if constexpr (std::is_same<T, float>::value) tiles(Kb, Vb);
    else if (Rp <= RT) tiles(Kb, Vb);  // one tile (a decode step's rows): widened where read
    else if constexpr (PAIRED<T>) {
      for (int p = 0; p < D / 2; p++)
        for (int j = 0; j < BS; j++) Kp[p * BS + j] = uint32_t(Kb[2 * p * BS + j]) | uint32_t(Kb[(2 * p + 1) * BS + j]) << 16;
      for (int i = 0; i < BS * D; i++) Vf[i] = to_f32(Vb[i]);
      tiles((const uint32_t*)Kp, (const float*)Vf);
    } else {
      for (int i = 0; i < D * BS; i++) { Kf[i] = to_f32(Kb[i]); Vf[i] = to_f32(Vb[i]); }
      tiles((const float*)Kf, (const float*)Vf);
    }
  }

// @section write-out
  if (part) {  // one part of a split item: what merge_parts needs
    for (int r = 0; r < R; r++) {
      float* p = part + int64_t(r) * (D + 2);
      std::memcpy(p, acc[r], sizeof(float) * D); p[D] = m[r]; p[D + 1] = l[r];
    }
    return;
  }
  for (int r = 0; r < R; r++) {
    T* o = out + (int64_t(i0 + r / G) * H + h * G + r % G) * D;
    const float inv = 1.f / l[r];
    for (int c = 0; c < C; c++) for (int j = 0; j < VW; j++) store(acc[r][c][j] * inv, o + c * VW + j);
  }
}

// @section merge-parts
// A split item's rows from its parts' partial sums: each part's sums rescaled to the largest max, added, divided once.
template <typename T, int D>
static void merge_parts(const float* parts, int nparts, int R, T* out, int i0, int G, int H, int h) {
  for (int r = 0; r < R; r++) {
    float mx = -1e30f, l = 0.f, o[D] = {};
    for (int p = 0; p < nparts; p++) mx = std::max(mx, parts[(int64_t(p) * R + r) * (D + 2) + D]);
    for (int p = 0; p < nparts; p++) {
      const float* a = parts + (int64_t(p) * R + r) * (D + 2);
      const float c = std::exp(a[D] - mx);
      l += a[D + 1] * c;
      for (int d = 0; d < D; d++) o[d] += a[d] * c;
    }
    T* dst = out + (int64_t(i0 + r / G) * H + h * G + r % G) * D;
    for (int d = 0; d < D; d++) store(o[d] / l, dst + d);
  }
}

// @section work-items
template <typename T, int D>
static void attend(const T* q, int64_t qs, const T* kc, const T* vc, T* out, const int32_t* tables, int64_t tstride,
                   const int32_t* seq_lens, const int32_t* qsl, int B, int H, int Hkv, float scale, int window) {
  const int G = H / Hkv, qt = std::max(1, MAX_ROWS / G);  // query tokens per work item
  std::vector<int64_t> items;                              // (request, kv head, first query row), packed
  for (int b = 0; b < B; b++)
    for (int i = qsl[b]; i < qsl[b + 1]; i += qt)
      for (int h = 0; h < Hkv; h++) items.push_back((int64_t(b) << 40) | (int64_t(h) << 32) | i);
  const int64_t n_items = items.size();
  // Fewer items than twice the threads (one user's decode: one item per KV head): each item's keys are cut into parts
  // of whole blocks (at least MIN_PART), run as pieces of their own and merged after, so every thread has work.
  const int threads = omp_get_max_threads();
  const int want = n_items < 2 * threads && threads > 1 ? int((2 * threads + n_items - 1) / n_items) : 1;
  std::vector<int> piece_item, piece_beg, piece_end, item_parts(n_items, 1); std::vector<int64_t> piece_off, item_off(n_items, -1);
  piece_item.reserve(n_items); piece_beg.reserve(n_items); piece_end.reserve(n_items); piece_off.reserve(n_items);
  int64_t floats = 0;
  for (int64_t it = 0; it < n_items; it++) {
    const int b = int(items[it] >> 40), i0 = int(items[it] & 0xFFFFFFFF), nq = std::min(qt, qsl[b + 1] - i0);
    const int n_keys = seq_lens[b] - (qsl[b + 1] - qsl[b]) + (i0 - qsl[b]) + nq, nblk = (n_keys + BS - 1) / BS;
    const int per = std::max(MIN_PART, nblk / want), n = want > 1 ? std::max(1, nblk / per) : 1;  // the last part: the rest
    if (n > 1) item_off[it] = floats, item_parts[it] = n;
    for (int p = 0; p < n; p++) {
      piece_item.push_back(int(it)); piece_beg.push_back(n > 1 ? p * per * BS : 0);
      piece_end.push_back(p < n - 1 ? (p + 1) * per * BS : n_keys);
      piece_off.push_back(n > 1 ? floats + int64_t(p) * nq * G * (D + 2) : -1);
    }
    if (n > 1) floats += int64_t(n) * nq * G * (D + 2);
  }
  std::vector<float> parts(floats);
  const int64_t n_pieces = piece_item.size();
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t pc = 0; pc < n_pieces; pc++) {
    const int64_t it = piece_item[pc];
    const int b = int(items[it] >> 40), h = int((items[it] >> 32) & 0xFF), i0 = int(items[it] & 0xFFFFFFFF);
    const int nq = std::min(qt, qsl[b + 1] - i0);
    const int first_pos = seq_lens[b] - (qsl[b + 1] - qsl[b]) + (i0 - qsl[b]);  // position of query row i0
    float* part = piece_off[pc] < 0 ? nullptr : parts.data() + piece_off[pc];
    // rows per tile: 4 (on AVX2, 2 for head_dim > 64, whose accumulators take twice the registers); a decode item of fewer
    // rows (its query heads per kv head) gets tiles of exactly that many, with no padding rows
    const int R = nq * G;
#define ITEM(rt) attend_item<T, D, rt>(q, qs, kc, vc, out, tables + b * tstride, first_pos, i0, nq, G, H, Hkv, h, scale, window, \
                                       piece_beg[pc], piece_end[pc], part)
    if (R == 1) ITEM(1); else if (R == 2 || (D > 64 && VREGS < 32)) ITEM(2); else if (R == 3) ITEM(3); else ITEM(4);
#undef ITEM
  }
  if (!floats) return;
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t it = 0; it < n_items; it++) {
    if (item_off[it] < 0) continue;
    const int b = int(items[it] >> 40), h = int((items[it] >> 32) & 0xFF), i0 = int(items[it] & 0xFFFFFFFF);
    const int nq = std::min(qt, qsl[b + 1] - i0);
    merge_parts<T, D>(parts.data() + item_off[it], item_parts[it], nq * G, out, i0, G, H, h);
  }
}

// @section dispatch
template <typename T>
static int dispatch(const void* q, int64_t qs, const void* kc, const void* vc, void* out, const int32_t* tables, int64_t tstride,
                    const int32_t* seq_lens, const int32_t* qsl, int B, int H, int Hkv, int D, float scale, int window) {
#define CASE(d) if (D == d) { attend<T, d>((const T*)q, qs, (const T*)kc, (const T*)vc, (T*)out, tables, tstride, \
                                              seq_lens, qsl, B, H, Hkv, scale, window); return 0; }
  CASE(16) CASE(32) CASE(64) CASE(80) CASE(96) CASE(128) CASE(256)
#undef CASE
  return 1;
}

extern "C" int litevllm_cpu_attention(int is_bf16, const void* q, int64_t qs, const void* kc, const void* vc, void* out,
                                       const int32_t* tables, int64_t tstride, const int32_t* seq_lens,
                                       const int32_t* qsl, int B, int H, int Hkv, int D, int bs, float scale, int window) {
  if (bs != BS || Hkv <= 0 || Hkv > 255 || H % Hkv || H / Hkv > MAX_ROWS) return 1;
  return is_bf16 ? dispatch<bf16>(q, qs, kc, vc, out, tables, tstride, seq_lens, qsl, B, H, Hkv, D, scale, window)
                 : dispatch<float>(q, qs, kc, vc, out, tables, tstride, seq_lens, qsl, B, H, Hkv, D, scale, window);
}

// @section store-kv
// Write each new token's k and v rows (Hkv * D values; row strides ks, vs) into its slot of the caches in this
// layout: K into column `off` of its block's K transposed, V into row `off`. Negative slots (padding) are skipped.
template <typename T>
static void store_kv(const T* k, int64_t ks, const T* v, int64_t vs, T* kc, T* vc, const int64_t* slots, int64_t n,
                     int Hkv, int D) {
#pragma omp parallel for if (n >= 256)
  for (int64_t t = 0; t < n; t++) {
    const int64_t s = slots[t];
    if (s < 0) continue;
    const int64_t blk = s / BS, off = s % BS;
    for (int h = 0; h < Hkv; h++) {
      const T* kr = k + t * ks + h * D;
      T* kd = kc + (blk * Hkv + h) * D * BS + off;
      for (int d = 0; d < D; d++) kd[d * BS] = kr[d];
      std::memcpy(vc + ((blk * Hkv + h) * BS + off) * D, v + t * vs + h * D, D * sizeof(T));
    }
  }
}

extern "C" void litevllm_store_kv(int is_bf16, const void* k, int64_t ks, const void* v, int64_t vs, void* kc, void* vc,
                                  const int64_t* slots, int64_t n, int Hkv, int D) {
  if (is_bf16) store_kv((const bf16*)k, ks, (const bf16*)v, vs, (bf16*)kc, (bf16*)vc, slots, n, Hkv, D);
  else store_kv((const float*)k, ks, (const float*)v, vs, (float*)kc, (float*)vc, slots, n, Hkv, D);
}
