/* Adagrad on a bf16 table's rows, one pass per row: the row widened to fp32, its fp32 state and the
 * weights updated as torch's fused Adagrad kernel updates them, the result rounded stochastically back
 * to bf16 with the bits harness.reference.models.numerics draws. The same values, bit for bit, as
 * harness.reference.models.embeddings._update_rows' torch path (index_select of the rows and their
 * state, torch._fused_adagrad_, random_bits, index_copy_ of both), which makes eight passes over the
 * rows where this makes one. rowupdate_sum_adagrad_bf16 also sums each row's gradients in the same pass
 * and computes its rounding key (the update_from_bags path: no block of sums nor any key in memory).
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
#include <stdlib.h>
#include <string.h>

#pragma GCC optimize("fp-contract=off")

typedef float v16 __attribute__((vector_size(64), aligned(64)));

#ifndef AHEAD
#define AHEAD 8
#endif

/* One row's update: w (bf16) and st (fp32 state) from its summed gradient g (fp32), rounded with key. */
static inline void update_row(uint16_t *restrict w, float *restrict st, const float *restrict g, int64_t dim,
                              uint32_t key, const int32_t *restrict multipliers, float lr, float eps)
{
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

/* Row-wise Adagrad's update of one row (FBGEMM's EXACT_ROWWISE_ADAGRAD: one accumulator st for the row):
 * st += the mean of g's squares, then each value p + (g / (sqrt(st) + eps)) * -lr, rounded with key as
 * above. The mean's sum runs in harness.reference.models.embeddings.row_mean_square's order: the squares
 * folded in halves (value c plus value c + ceil(width / 2) while width > 1; the middle one of an odd
 * width carried), then divided by dim. sq: dim floats of scratch. */
static inline void update_row_rowwise(uint16_t *restrict w, float *restrict st, const float *restrict g,
                                      int64_t dim, uint32_t key, const int32_t *restrict multipliers, float lr,
                                      float eps, float *restrict sq)
{
    int64_t width = dim;
    if (dim % 16 == 0 && (dim & (dim - 1)) == 0 && (uintptr_t)g % 64 == 0 && (uintptr_t)sq % 64 == 0) {
        /* 16, 32, 64, ..: the halves are whole vectors down to 16 values */
        const v16 *gv = (const v16 *)g;
        v16 *v = (v16 *)sq;
        for (int64_t k = 0; k < dim / 16; k++)
            v[k] = gv[k] * gv[k];
        for (int64_t n = dim / 16; n > 1;) {
            n /= 2;
            for (int64_t k = 0; k < n; k++)
                v[k] = v[k] + v[k + n];
        }
        width = 16;
    } else {
        for (int64_t c = 0; c < dim; c++)
            sq[c] = g[c] * g[c];
    }
    while (width > 1) {
        const int64_t half = (width + 1) / 2;
        for (int64_t c = 0; c < width - half; c++)
            sq[c] = sq[c] + sq[c + half];
        width = half;
    }
    const float s = *st + sq[0] / (float)dim;
    *st = s;
    const float denom = sqrtf(s) + eps, nlr = -lr;
    for (int64_t c = 0; c < dim; c++) {
        uint32_t wb = (uint32_t)w[c] << 16;
        float p;
        memcpy(&p, &wb, 4);
        p = p + (g[c] / denom) * nlr;
        uint32_t pb;
        memcpy(&pb, &p, 4);
        int32_t prod = (int32_t)(key * (uint32_t)multipliers[c]);
        uint32_t bits = (uint32_t)((prod >> 16) + 32768);
        w[c] = (uint16_t)((pb + bits) >> 16);
    }
}

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
        update_row(w, st, g, dim, key, multipliers, lr, eps);
    }
}

/* numerics._mix32: two xor-shift-multiply rounds and a last xor-shift, on 32 bits */
static inline uint32_t mix32(uint32_t x)
{
    x = (x ^ (x >> 16)) * 0x45D9F3Bu;
    x = (x ^ (x >> 16)) * 0x45D9F3Bu;
    return x ^ (x >> 16);
}

/* What one thread of rowupdate_sum_adagrad_bf16 does: distinct rows lo .. hi - 1. */
struct sum_job {
    uint16_t *weight;
    float *state;
    int64_t dim, lo, hi, n, total;
    const int64_t *rows, *starts, *grad_rows;
    const void *grads;
    int grads_bf16;
    const int64_t *block_starts, *block_offsets;
    const uint32_t *block_keys;
    int64_t blocks;
    const int32_t *multipliers;
    float lr, eps;
    int rowwise; /* state: one value a row (row-wise Adagrad), else one a value */
    float *sum; /* 2 x dim floats of this thread: the row's sum, and row-wise Adagrad's squares */
};

static inline void grad_row(float *restrict acc, const void *grads, int bf16, int64_t r, int64_t dim)
{
    if (bf16) {
        const uint16_t *restrict g = (const uint16_t *)grads + r * dim;
        for (int64_t c = 0; c < dim; c++) {
            uint32_t b = (uint32_t)g[c] << 16;
            float v;
            memcpy(&v, &b, 4);
            acc[c] = acc[c] + v;
        }
    } else {
        const float *restrict g = (const float *)grads + r * dim;
        for (int64_t c = 0; c < dim; c++)
            acc[c] = acc[c] + g[c];
    }
}

__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
static void sum_update_range(const struct sum_job *j)
{
    const int64_t dim = j->dim;
    const size_t gsize = j->grads_bf16 ? 2 : 4;
    const int64_t sdim = j->rowwise ? 1 : dim; /* the state's values a row */
    int64_t b = 0; /* the block of the current row: rows ascend, so it only moves forward */
    if (j->lo < j->hi)
        while (b + 1 < j->blocks && j->rows[j->lo] >= j->block_starts[b + 1])
            b++;
    for (int64_t i = j->lo; i < j->hi; i++) {
        const int64_t row = j->rows[i];
        const int64_t s0 = j->starts[i], s1 = i + 1 < j->n ? j->starts[i + 1] : j->total;
        if (i + 4 * AHEAD < j->hi) { /* far ahead, into the second-level cache: more rows in flight */
            const int64_t rf = j->rows[i + 4 * AHEAD];
            const char *wf = (const char *)(j->weight + rf * dim), *sf = (const char *)(j->state + rf * sdim);
            for (int64_t x = 0; x < dim * (int64_t)sizeof(uint16_t); x += 64)
                __builtin_prefetch(wf + x, 1, 2);
            for (int64_t x = 0; x < sdim * (int64_t)sizeof(float); x += 64)
                __builtin_prefetch(sf + x, 1, 2);
        }
        if (i + AHEAD < j->hi) { /* the rows, their state and their gradients' rows, early */
            const int64_t ra = j->rows[i + AHEAD];
            const char *wn = (const char *)(j->weight + ra * dim), *sn = (const char *)(j->state + ra * sdim);
            for (int64_t x = 0; x < dim * (int64_t)sizeof(uint16_t); x += 64)
                __builtin_prefetch(wn + x, 1);
            for (int64_t x = 0; x < sdim * (int64_t)sizeof(float); x += 64)
                __builtin_prefetch(sn + x, 1);
            const char *gn = (const char *)j->grads + j->grad_rows[j->starts[i + AHEAD]] * dim * gsize;
            for (int64_t x = 0; x < dim * (int64_t)gsize; x += 64)
                __builtin_prefetch(gn + x, 0);
        }
        float *restrict acc = j->sum;
        memset(acc, 0, (size_t)dim * sizeof(float)); /* as embedding_bag's sum: from zero, in the ids' order */
        for (int64_t k = s0; k < s1; k++)
            grad_row(acc, j->grads, j->grads_bf16, j->grad_rows[k], dim);
        while (b + 1 < j->blocks && row >= j->block_starts[b + 1])
            b++;
        uint32_t local = (uint32_t)(row - j->block_starts[b] + j->block_offsets[b]);
        uint32_t key = mix32(local ^ j->block_keys[b]);
        if (j->rowwise)
            update_row_rowwise(j->weight + row * dim, j->state + row, acc, dim, key, j->multipliers, j->lr, j->eps,
                               acc + dim);
        else
            update_row(j->weight + row * dim, j->state + row * dim, acc, dim, key, j->multipliers, j->lr, j->eps);
    }
}

#define MAX_THREADS 64

/* Per distinct row rows[i] (ascending), the sum of gradient rows grad_rows[starts[i] .. starts[i + 1] - 1]
 * of grads (fp32, or bf16 widened exactly: grads_bf16), added in that order from zero as torch's
 * embedding_bag sums a bag, then the row's Adagrad update and stochastic rounding as above, its key the
 * numerics.TableLayout.keys of a layout whose rows each have an index below 2**32 in their table:
 * mix32(local row ^ its table's key), the local row rows[i] - block_starts[b] + block_offsets[b] of the
 * block b that holds it. The distinct rows are split among `threads` OpenMP threads (torch's own, where
 * built with -fopenmp and loaded after torch; without OpenMP, all on the calling thread), each its own
 * contiguous part: no row is touched by two, and every value is the same whatever the split. Returns 0,
 * or -1 where memory could not be had (nothing was written then: the caller runs the torch path). With
 * rowwise (1), state holds one value a row and each row's update is row-wise Adagrad's (update_row_rowwise). */
int rowupdate_sum_adagrad_bf16(uint16_t *weight, float *state, int64_t dim, const int64_t *rows, int64_t n,
                               const int64_t *starts, int64_t total, const int64_t *grad_rows, const void *grads,
                               int grads_bf16, const int64_t *block_starts, const int64_t *block_offsets,
                               const uint32_t *block_keys, int64_t blocks, const int32_t *multipliers, float lr,
                               float eps, int rowwise, int threads)
{
    if (threads < 1)
        threads = 1;
    if (threads > MAX_THREADS)
        threads = MAX_THREADS;
    if (threads > 1 && n < 4096 * (int64_t)threads) /* small updates: a thread costs more than it saves */
        threads = (int)(n / 4096) > 1 ? (int)(n / 4096) : 1;
    struct sum_job jobs[MAX_THREADS];
    const size_t per_thread = (size_t)(2 * dim + 16) * sizeof(float); /* a multiple of 64 bytes where dim is of 8 */
    float *sums = aligned_alloc(64, ((size_t)threads * per_thread + 63) / 64 * 64);
    if (sums == NULL)
        return -1;
    for (int t = 0; t < threads; t++) {
        struct sum_job j = {weight, state, dim, n * t / threads, n * (t + 1) / threads, n, total, rows, starts,
                            grad_rows, grads, grads_bf16, block_starts, block_offsets, block_keys, blocks,
                            multipliers, lr, eps, rowwise, sums + (size_t)t * (size_t)(2 * dim + 16)};  /* aligned: see per_thread */
        jobs[t] = j;
    }
#pragma omp parallel for num_threads(threads) schedule(static, 1)
    for (int t = 0; t < threads; t++) /* on torch's OpenMP threads (setup.py: -fopenmp) */
        sum_update_range(&jobs[t]);
    free(sums);
    return 0;
}

/* The segments of a batch's ids, the step's first pass over them: a stable LSD radix sort of the ids
 * (each below 2**bits, none negative) in digits of at most 11 bits (a pass's counts fit the first-level
 * cache), giving order (the positions of ids in sorted order, each id's positions ascending), the
 * distinct ids ascending (unique) and where each one's positions start in order (starts); where inverse
 * is not NULL, inverse[p] is the index in unique of ids[p]. What sorting the keys id << b | position
 * gives (harness.reference.models.embeddings._segments' NumPy path), in two or three passes over the ids
 * instead of a comparison sort. Each pass on `threads` OpenMP threads, each thread a contiguous part of
 * the pass's input, its elements placed after the earlier parts' within each digit: as stable as on one.
 * Returns the number of distinct ids, or -1 where memory could not be had (nothing written then). */
int64_t rowupdate_segments(const int64_t *ids, int64_t n, int bits, int64_t *order, int64_t *unique,
                           int64_t *starts, int64_t *inverse, int threads)
{
    if (n <= 0)
        return 0;
    if (bits < 1)
        bits = 1;
    if (threads < 1)
        threads = 1;
    if (threads > MAX_THREADS)
        threads = MAX_THREADS;
    if (n < 16384 * (int64_t)threads) /* small batches: a thread costs more than it saves */
        threads = (int)(n / 16384) > 1 ? (int)(n / 16384) : 1;
    const int passes = (bits + 10) / 11;
    const int digit = (bits + passes - 1) / passes;
    const size_t buckets = (size_t)1 << digit;
    const int64_t mask = (int64_t)buckets - 1;
    int64_t *count = malloc((size_t)threads * buckets * sizeof(int64_t)); /* one pass's, each thread's */
    int64_t *keys = malloc(2 * (size_t)n * sizeof(int64_t));
    int64_t *positions = malloc((size_t)n * sizeof(int64_t));
    if (count == NULL || keys == NULL || positions == NULL) {
        free(count);
        free(keys);
        free(positions);
        return -1;
    }
    const int64_t *ksrc = ids, *psrc = NULL; /* the first pass's positions are 0 .. n - 1 */
    for (int p = 0; p < passes; p++) {
        int64_t *kdst = keys + (size_t)(p % 2) * (size_t)n;
        int64_t *pdst = (passes - 1 - p) % 2 == 0 ? order : positions; /* the last pass writes order */
        const int shift = p * digit;
#pragma omp parallel for num_threads(threads) schedule(static, 1)
        for (int t = 0; t < threads; t++) {
            int64_t *c = count + (size_t)t * buckets;
            memset(c, 0, buckets * sizeof(int64_t));
            for (int64_t i = n * t / threads; i < n * (t + 1) / threads; i++)
                c[(ksrc[i] >> shift) & mask]++;
        }
        int64_t at = 0; /* counts -> where each thread's run of each digit starts */
        for (size_t d = 0; d < buckets; d++)
            for (int t = 0; t < threads; t++) {
                int64_t k = count[(size_t)t * buckets + d];
                count[(size_t)t * buckets + d] = at;
                at += k;
            }
#pragma omp parallel for num_threads(threads) schedule(static, 1)
        for (int t = 0; t < threads; t++) {
            int64_t *c = count + (size_t)t * buckets;
            for (int64_t i = n * t / threads; i < n * (t + 1) / threads; i++) {
                const int64_t v = ksrc[i];
                const int64_t j = c[(v >> shift) & mask]++;
                kdst[j] = v;
                pdst[j] = psrc == NULL ? i : psrc[i];
            }
        }
        ksrc = kdst;
        psrc = pdst;
    }
    int64_t u = 0;
    for (int64_t i = 0; i < n; i++) {
        if (i == 0 || ksrc[i] != ksrc[i - 1]) {
            unique[u] = ksrc[i];
            starts[u] = i;
            u++;
        }
        if (inverse != NULL)
            inverse[order[i]] = u - 1;
    }
    free(count);
    free(keys);
    free(positions);
    return u;
}

/* dst[i] = src[ids[i]] for rows of row_bytes bytes (the forward lookup of one id per feature), each row's
 * lines fetched twice early (the rows are spread over a large table): 8 * AHEAD rows ahead into the
 * second-level cache, 2 * AHEAD into the first; on `threads` OpenMP threads.
 * The ids are the caller's to check: every one in the table. */
void rowupdate_gather_rows(const char *src, int64_t row_bytes, const int64_t *ids, int64_t n, char *dst,
                           int threads)
{
    if (threads < 1)
        threads = 1;
    if (n < 4096 * (int64_t)threads) /* small lookups: a thread costs more than it saves */
        threads = (int)(n / 4096) > 1 ? (int)(n / 4096) : 1;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t i = 0; i < n; i++) {
        if (i + 8 * AHEAD < n) {
            const char *p = src + ids[i + 8 * AHEAD] * row_bytes;
            for (int64_t b = 0; b < row_bytes; b += 64)
                __builtin_prefetch(p + b, 0, 2);
        }
        if (i + 2 * AHEAD < n) {
            const char *p = src + ids[i + 2 * AHEAD] * row_bytes;
            for (int64_t b = 0; b < row_bytes; b += 64)
                __builtin_prefetch(p + b, 0);
        }
        memcpy(dst + i * row_bytes, src + ids[i] * row_bytes, (size_t)row_bytes);
    }
}
