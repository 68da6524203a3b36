// litevllm's Gated DeltaNet decode step on CPU (nbs/32_qwen3_5): one token per request, each head's float32 state
// (Dk x Dv) read once and updated in place where the hybrid KV cache keeps it, without gathering it out and back.
#include <cmath>
#include <cstdint>
#include <cstring>

// Request b's head h: state at sa + idx[b] * page + h * Dk * Dv for h < h1, else at sb + idx[b] * page + (h - h1) * Dk * Dv.
// q, k (B, H, Dk), q normed and scaled, k normed; v, out (B, H, Dv); g, beta (B, H); init[b] = 0: the state starts at zero.
// S' = e^g S + k (x) d with d = beta (v - e^g k.S); out = q.S' = e^g q.S + (q.k) d: one pass reading S, one updating it.
extern "C" void litevllm_gdn_decode(const float* q, const float* k, const float* v, const float* g, const float* beta, float* out,
                                    float* sa, float* sb, int64_t page, const int64_t* idx, const uint8_t* init,
                                    int64_t B, int H, int h1, int Dk, int Dv) {
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < B; b++)
    for (int h = 0; h < H; h++) {
      const int64_t bh = b * H + h;
      float* S = (h < h1 ? sa + (int64_t)(h) * Dk * Dv : sb + (int64_t)(h - h1) * Dk * Dv) + idx[b] * page;
      if (!init[b]) std::memset(S, 0, sizeof(float) * Dk * Dv);
      const float *qq = q + bh * Dk, *kk = k + bh * Dk, *vv = v + bh * Dv;
      const float eg = std::exp(g[bh]), bt = beta[bh];
      float kv[512], qs[512], d[512];  // Dv <= 512 (checked by the caller)
      for (int j = 0; j < Dv; j++) kv[j] = qs[j] = 0.f;
      float qk = 0.f;
      for (int i = 0; i < Dk; i++) {
        const float* row = S + (int64_t)i * Dv;
        const float ki = kk[i], qi = qq[i];
        qk += qi * ki;
        for (int j = 0; j < Dv; j++) { kv[j] += ki * row[j]; qs[j] += qi * row[j]; }
      }
      float* o = out + bh * Dv;
      for (int j = 0; j < Dv; j++) { d[j] = bt * (vv[j] - eg * kv[j]); o[j] = eg * qs[j] + qk * d[j]; }
      for (int i = 0; i < Dk; i++) {
        float* row = S + (int64_t)i * Dv;
        const float ki = kk[i];
        for (int j = 0; j < Dv; j++) row[j] = eg * row[j] + ki * d[j];
      }
    }
}
