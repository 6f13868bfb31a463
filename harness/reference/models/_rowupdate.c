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
typedef float v8 __attribute__((vector_size(32)));
typedef float v4 __attribute__((vector_size(16)));

#ifndef AHEAD
#define AHEAD 8
#endif
#ifndef GROUP
#define GROUP 4 /* rows summed before any of them is updated (sum_update_rows) */
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

/* Row-wise Adagrad (FBGEMM's EXACT_ROWWISE_ADAGRAD: one accumulator st for the row), in two halves:
 * rowwise_denom adds to st the mean of g's squares and returns sqrt(st) + eps, rowwise_apply moves each
 * value p to p + (g / denom) * -lr, rounded with key as above. The mean's sum runs in
 * harness.reference.models.embeddings.row_mean_square's order: the squares folded in halves (value c
 * plus value c + ceil(width / 2) while width > 1; the middle one of an odd width carried), then divided
 * by dim. sq: dim floats of scratch. */
static inline float rowwise_denom(float *restrict st, const float *restrict g, int64_t dim, float eps,
                                  float *restrict sq)
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
        /* the last 16 folded in registers, the same adds as the loop below: scalar loads of the values
         * a vector store has just written wait for it to retire (no store-to-load forwarding), and with
         * it for every older load still in flight, the next rows' lines among them (measured:
         * docs/performance.md, "Figures behind the code's choices") */
        const v16 x = v[0];
        v8 h8, t8;
        v4 h4, t4;
        memcpy(&h8, &x, 32);
        memcpy(&t8, (const char *)&x + 32, 32);
        h8 = h8 + t8;
        memcpy(&h4, &h8, 16);
        memcpy(&t4, (const char *)&h8 + 16, 16);
        h4 = h4 + t4;
        const float h2a = h4[0] + h4[2], h2b = h4[1] + h4[3];
        sq[0] = h2a + h2b;
        width = 1;
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
    return sqrtf(s) + eps;
}

static inline void rowwise_apply(uint16_t *restrict w, const float *restrict g, int64_t dim, uint32_t key,
                                 const int32_t *restrict multipliers, float lr, float denom)
{
    const float nlr = -lr;
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
    float *sum; /* GROUP x dim floats of this thread (a group's sums), then dim (row-wise Adagrad's squares) */
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

/* sum_update_range's rows, inlined with dim a constant where it is a common one: the rows' loops then
 * unrolled and the sums zeroed without a call to memset (measured: docs/performance.md) */
static inline __attribute__((always_inline)) void sum_update_rows(const struct sum_job *j, const int64_t dim)
{
    const size_t gsize = j->grads_bf16 ? 2 : 4;
    const int64_t sdim = j->rowwise ? 1 : dim; /* the state's values a row */
    float *const sq = j->sum + GROUP * dim;
    int64_t b = 0; /* the block of the current row: rows ascend, so it only moves forward */
    if (j->lo < j->hi)
        while (b + 1 < j->blocks && j->rows[j->lo] >= j->block_starts[b + 1])
            b++;
    /* GROUP rows at a time, each step over all of them before the next: a row-wise update is one long
     * chain (squares, their sum, the state, a square root, a division per value), and one row's chain
     * after another's left the out-of-order window too few rows to overlap; GROUP is the fastest of those
     * measured, for either kind of Adagrad (docs/performance.md, "Figures behind the code's choices") */
    uint32_t keys[GROUP];
    float denoms[GROUP];
    for (int64_t i0 = j->lo; i0 < j->hi; i0 += GROUP) {
        const int64_t m = j->hi - i0 < GROUP ? j->hi - i0 : GROUP;
        for (int64_t r = 0; r < m; r++) {
            const int64_t i = i0 + r;
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
            float *restrict acc = j->sum + r * dim;
            memset(acc, 0, (size_t)dim * sizeof(float)); /* as embedding_bag's sum: from zero, in the ids' order */
            for (int64_t k = s0; k < s1; k++)
                grad_row(acc, j->grads, j->grads_bf16, j->grad_rows[k], dim);
            while (b + 1 < j->blocks && row >= j->block_starts[b + 1])
                b++;
            uint32_t local = (uint32_t)(row - j->block_starts[b] + j->block_offsets[b]);
            keys[r] = mix32(local ^ j->block_keys[b]);
        }
        if (j->rowwise) {
            for (int64_t r = 0; r < m; r++)
                denoms[r] = rowwise_denom(j->state + j->rows[i0 + r], j->sum + r * dim, dim, j->eps, sq);
            for (int64_t r = 0; r < m; r++)
                rowwise_apply(j->weight + j->rows[i0 + r] * dim, j->sum + r * dim, dim, keys[r], j->multipliers,
                              j->lr, denoms[r]);
        } else {
            for (int64_t r = 0; r < m; r++) {
                const int64_t row = j->rows[i0 + r];
                update_row(j->weight + row * dim, j->state + row * dim, j->sum + r * dim, dim, keys[r],
                           j->multipliers, j->lr, j->eps);
            }
        }
    }
}

__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
static void sum_update_range(const struct sum_job *j)
{
    if (j->dim == 64) /* the benchmark's tables */
        sum_update_rows(j, 64);
    else
        sum_update_rows(j, j->dim);
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
 * rowwise (1), state holds one value a row and each row's update is row-wise Adagrad's (rowwise_denom, rowwise_apply). */
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
    const size_t per_thread = (size_t)((GROUP + 1) * dim + 16) * sizeof(float); /* a multiple of 64 bytes where dim is of 8 */
    float *sums = aligned_alloc(64, ((size_t)threads * per_thread + 63) / 64 * 64);
    if (sums == NULL)
        return -1;
    for (int t = 0; t < threads; t++) {
        struct sum_job j = {weight, state, dim, n * t / threads, n * (t + 1) / threads, n, total, rows, starts,
                            grad_rows, grads, grads_bf16, block_starts, block_offsets, block_keys, blocks,
                            multipliers, lr, eps, rowwise, sums + (size_t)t * (per_thread / sizeof(float))};  /* aligned: see per_thread */
        jobs[t] = j;
    }
#pragma omp parallel for num_threads(threads) schedule(static, 1)
    for (int t = 0; t < threads; t++) /* on torch's OpenMP threads (setup.py: -fopenmp) */
        sum_update_range(&jobs[t]);
    free(sums);
    return 0;
}

static int bit_length(uint64_t x)
{
    return x == 0 ? 0 : 64 - __builtin_clzll(x);
}

/* segments_columns' parts, each compiled for the wider vector units too. Each column's minimum and
 * maximum id over rows r0 .. r1 - 1 (at least one). */
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
static void column_limits(const int64_t *restrict ids, int64_t r0, int64_t r1, int64_t cols, int64_t *restrict lo,
                          int64_t *restrict hi)
{
    for (int64_t c = 0; c < cols; c++)
        lo[c] = hi[c] = ids[r0 * cols + c];
    for (int64_t r = r0 + 1; r < r1; r++) {
        const int64_t *restrict x = ids + r * cols;
        for (int64_t c = 0; c < cols; c++) {
            lo[c] = x[c] < lo[c] ? x[c] : lo[c];
            hi[c] = x[c] > hi[c] ? x[c] : hi[c];
        }
    }
}

/* Column c's keys sorted into out (rows of them), each (id - base) << bb | row, by stable LSD radix
 * passes over the range's width bits (at most two of at most 11 bits), both passes' counts taken as the
 * keys are made. Distinct keys, so their sorted order is the stable one. tmp: rows keys of scratch;
 * cnt: 4096 counts. Returns the column's distinct ids. */
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
static int64_t sort_column(const int64_t *restrict ids, int64_t rows, int64_t cols, int64_t c, int64_t base,
                           int width, int bb, uint32_t *restrict out, uint32_t *restrict tmp, uint32_t *restrict cnt)
{
    const int passes = width > 11 ? 2 : 1, lowbits = width > 11 ? width - 11 : width;
    const uint32_t lmask = ((uint32_t)1 << lowbits) - 1, hmask = ((uint32_t)1 << (width - lowbits)) - 1;
    uint32_t *restrict c0 = cnt, *restrict c1 = cnt + 2048;
    memset(cnt, 0, 4096 * sizeof(uint32_t));
    uint32_t *first = passes == 2 ? tmp : out;
    uint32_t *keys = passes == 2 ? out : tmp;
    for (int64_t r = 0; r < rows; r++) {
        const uint32_t key = (uint32_t)(ids[r * cols + c] - base) << bb | (uint32_t)r;
        keys[r] = key;
        c0[key >> bb & lmask]++;
        c1[key >> (bb + lowbits) & hmask]++;
    }
    for (int p = 0; p < passes; p++) {
        uint32_t *restrict ct = p ? c1 : c0;
        const int sh = p ? bb + lowbits : bb;
        const uint32_t m = p ? hmask : lmask;
        uint32_t at = 0;
        for (uint32_t d = 0; d <= m; d++) {
            const uint32_t k = ct[d];
            ct[d] = at;
            at += k;
        }
        const uint32_t *restrict src = p ? first : keys;
        uint32_t *restrict dst = p ? out : first;
        for (int64_t r = 0; r < rows; r++)
            dst[ct[src[r] >> sh & m]++] = src[r];
    }
    int64_t d = 1; /* a column's first id is new: the columns' ranges are disjoint */
    for (int64_t r = 1; r < rows; r++)
        d += (out[r] >> bb) != (out[r - 1] >> bb);
    return d;
}

/* rowupdate_segments of ids that are rows of `cols` columns (id p in column p % cols) whose columns hold
 * disjoint ranges of ids, ascending from column to column (a one-hot batch: each feature's ids in its
 * table's rows of the fused weight): then the ids sorted are each column's sorted in turn, and each
 * column, rows / cols ids of a small range, is sorted alone in the first-level cache (its ids packed
 * with their rows into 32 bits: less than rows in 2**bb and a range of at most 22 bits and 32 - bb), instead
 * of every id through memory in the whole range's digits. The same outputs; -2 where the ids are not so
 * laid out (nothing written then), -1 where memory could not be had. */
static int64_t segments_columns(const int64_t *ids, int64_t n, int64_t cols, int64_t *order, int64_t *unique,
                                int64_t *starts, int64_t *inverse, int threads)
{
    const int64_t rows = n / cols;
    const int bb = bit_length((uint64_t)rows - 1);
    int64_t *lims = malloc(2 * (size_t)threads * (size_t)cols * sizeof(int64_t)); /* each thread's min, max */
    if (lims == NULL)
        return -1;
#pragma omp parallel for num_threads(threads) schedule(static, 1)
    for (int t = 0; t < threads; t++) {
        int64_t *lo = lims + 2 * (size_t)t * (size_t)cols;
        column_limits(ids, rows * t / threads, rows * (t + 1) / threads, cols, lo, lo + cols);
    }
    int64_t *lo = lims, *hi = lims + cols; /* thread 0's, then everyone's */
    int fits = 1;
    for (int64_t c = 0; c < cols && fits; c++) {
        for (int t = 1; t < threads; t++) {
            const int64_t *tl = lims + 2 * (size_t)t * (size_t)cols, *th = tl + cols;
            lo[c] = tl[c] < lo[c] ? tl[c] : lo[c];
            hi[c] = th[c] > hi[c] ? th[c] : hi[c];
        }
        fits = bit_length((uint64_t)(hi[c] - lo[c])) <= 22 && bit_length((uint64_t)(hi[c] - lo[c])) + bb <= 32
               && (c == 0 || hi[c - 1] < lo[c]);
    }
    const size_t scratch = (size_t)rows + 4096 + 16; /* a thread's: a column's keys and two passes' counts */
    uint32_t *sorted = fits ? malloc(((size_t)n + (size_t)threads * scratch) * sizeof(uint32_t)) : NULL;
    int64_t *distinct = fits ? malloc(((size_t)cols + 1) * sizeof(int64_t)) : NULL; /* each column's */
    if (sorted == NULL || distinct == NULL) {
        free(sorted);
        free(distinct);
        free(lims);
        return fits ? -1 : -2;
    }
    const uint32_t rmask = ((uint32_t)1 << bb) - 1;
#pragma omp parallel for num_threads(threads) schedule(static, 1)
    for (int t = 0; t < threads; t++) {
        uint32_t *tmp = sorted + (size_t)n + (size_t)t * scratch, *cnt = tmp + rows;
        for (int64_t c = cols * t / threads; c < cols * (t + 1) / threads; c++)
            distinct[c] = sort_column(ids, rows, cols, c, lo[c], bit_length((uint64_t)(hi[c] - lo[c])), bb,
                                      sorted + (size_t)c * (size_t)rows, tmp, cnt);
    }
    int64_t total = 0; /* counts -> where each column's distinct ids start */
    for (int64_t c = 0; c < cols; c++) {
        const int64_t d = distinct[c];
        distinct[c] = total;
        total += d;
    }
#pragma omp parallel for num_threads(threads) schedule(static, 1)
    for (int t = 0; t < threads; t++)
        for (int64_t c = cols * t / threads; c < cols * (t + 1) / threads; c++) {
            const uint32_t *out = sorted + (size_t)c * (size_t)rows;
            int64_t u = distinct[c];
            for (int64_t r = 0; r < rows; r++) {
                const uint32_t key = out[r];
                const int64_t at = c * rows + r, p = (int64_t)(key & rmask) * cols + c;
                order[at] = p;
                if (r == 0 || (key >> bb) != (out[r - 1] >> bb)) {
                    unique[u] = lo[c] + (int64_t)(key >> bb);
                    starts[u] = at;
                    u++;
                }
                if (inverse != NULL)
                    inverse[p] = u - 1;
            }
        }
    free(sorted);
    free(distinct);
    free(lims);
    return total;
}

/* The segments of a batch's ids, the step's first pass over them: a stable LSD radix sort of the ids
 * (each below 2**bits, none negative) in digits of at most 11 bits (a pass's counts fit the first-level
 * cache), giving order (the positions of ids in sorted order, each id's positions ascending), the
 * distinct ids ascending (unique) and where each one's positions start in order (starts); where inverse
 * is not NULL, inverse[p] is the index in unique of ids[p]. What sorting the keys id << b | position
 * gives (harness.reference.models.embeddings._segments' NumPy path), in two or three passes over the ids
 * instead of a comparison sort. Each pass on `threads` OpenMP threads, each thread a contiguous part of
 * the pass's input, its elements placed after the earlier parts' within each digit: as stable as on one.
 * Ids laid out as a one-hot batch's (segments_columns) are sorted a column at a time instead, the same
 * outputs. Returns the number of distinct ids, or -1 where memory could not be had (nothing written then). */
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
    /* ids in rows of columns of ascending ranges: a row's ids ascend and the next row's first is below
     * the last (a one-hot batch's columns hold at least 256 ids; segments_columns checks the rest) */
    int64_t cols = 1;
    while (cols < n && ids[cols] > ids[cols - 1])
        cols++;
    if (cols > 1 && cols < n && n % cols == 0 && n / cols >= 256) {
        const int64_t u = segments_columns(ids, n, cols, order, unique, starts, inverse, threads);
        if (u != -2)
            return u;
    }
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
