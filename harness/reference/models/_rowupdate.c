/* Row-wise Adagrad on a bf16 table, one pass per row: the row widened to fp32, its fp32 state and the
 * weights updated as torch's fused Adagrad kernel updates them, the result rounded stochastically back
 * to bf16 with the bits harness.reference.models.numerics draws. The same values, bit for bit, as
 * harness.reference.models.embeddings._update_rows' torch path (index_select of the rows and their
 * state, torch._fused_adagrad_, random_bits, index_copy_ of both), which makes eight passes over the
 * rows where this makes one.
 *
 * A plain C library (no Python API), built at install as the optional extension
 * harness.reference.models._rowupdate (setup.py) and loaded with ctypes by
 * harness/reference/models/rowupdate.py; where it is missing the torch path runs.
 *
 * The arithmetic, element by element, as torch's CPU kernel (aten/src/ATen/native/cpu/
 * FusedAdagradKernel.cpp, fp32 at lr_decay 0 and step 1): state + g * g in one fused multiply-add
 * (torch's build contracts it: docs/performance.md, "The bf16 tables' update in one compiled pass"),
 * then p - (lr * g) / (sqrt(state) + eps), each operation rounded once
 * (contraction off for everything else). Stochastic rounding: the fp32 bits plus bits 16..31 of
 * key * multiplier (int32, wrapping) with the highest flipped, the upper 16 bits kept.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#pragma GCC optimize("fp-contract=off")

#define AHEAD 8 /* rows prefetched ahead */

__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
void rowupdate_adagrad_bf16(uint16_t *weight, float *state, int64_t dim, const int64_t *rows, int64_t n,
                            const float *grad, const int32_t *keys, const int32_t *multipliers, float lr,
                            float eps)
{
    for (int64_t i = 0; i < n; i++) {
        uint16_t *restrict w = weight + rows[i] * dim;
        float *restrict st = state + rows[i] * dim;
        const float *restrict g = grad + i * dim;
        uint32_t key = (uint32_t)keys[i];
        if (i + AHEAD < n) {  /* the rows are spread over a large table: every line of a row ahead, early */
            const char *wn = (const char *)(weight + rows[i + AHEAD] * dim);
            const char *sn = (const char *)(state + rows[i + AHEAD] * dim);
            for (int64_t b = 0; b < dim * (int64_t)sizeof(uint16_t); b += 64)
                __builtin_prefetch(wn + b, 1);
            for (int64_t b = 0; b < dim * (int64_t)sizeof(float); b += 64)
                __builtin_prefetch(sn + b, 1);
        }
        for (int64_t c = 0; c < dim; c++) {
            uint32_t wb = (uint32_t)w[c] << 16;
            float p;
            memcpy(&p, &wb, 4);
            float s = fmaf(g[c], g[c], st[c]);
            st[c] = s;
            float std = sqrtf(s) + eps;
            p = p - (lr * g[c]) / std;
            uint32_t pb;
            memcpy(&pb, &p, 4);
            int32_t prod = (int32_t)(key * (uint32_t)multipliers[c]);
            uint32_t bits = (uint32_t)((prod >> 16) + 32768);
            w[c] = (uint16_t)((pb + bits) >> 16);
        }
    }
}
