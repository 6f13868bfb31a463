/* DLRM's pairwise dot interaction in bf16, forward and backward, one pass over each sample: the output
 * [x, <z_i, z_j> for i < j] (z = [x, e_1 .. e_F]) written at once, and in backward each vector's gradient
 * sum_j S_ij z_j (S the symmetric matrix of the pairs' gradients, zero on its diagonal) with the dense
 * vector's own gradient added. What harness.reference.models.dlrm's torch path computes (a batched
 * matmul, a gather, two concatenations; in backward a pad, a gather, a batched matmul, slices and an
 * add), in one kernel each way, without the B x n x n matrices in memory.
 *
 * A plain C library (no Python API), built at install as the optional extension
 * harness.reference.models._dotinteraction (setup.py) and loaded with ctypes by
 * harness/reference/models/dotkernel.py; where it is missing the torch path runs. Its samples are split
 * among threads by OpenMP, built with -fopenmp and loaded after torch: the dynamic loader then binds it to
 * the libgomp.so.1 torch has loaded, so it runs on torch's own worker threads (threads of its own beside
 * torch's spinning ones made it slower in a training step than on one thread: docs/performance.md).
 *
 * The arithmetic, one order on every machine: every sum runs over pairs of terms, as AVX512-BF16's
 * VDPBF16PS adds them: for the pair (2t, 2t + 1), acc += a[2t + 1] * b[2t + 1], then acc += a[2t] * b[2t],
 * each in fp32 with one rounding (a product of two bf16 values is exact in fp32), t ascending from zero.
 * Forward sums over the dimension (t over the pairs of columns), backward over the vectors (t over the
 * pairs of rows, a zero row after the last where there are an odd number). Results rounded to bf16 to
 * nearest even; the dense gradient is the bf16 sum of its two bf16 parts, as autograd accumulates them.
 * Where the CPU has AVX512-BF16 the sums are that instruction; elsewhere a plain loop makes the same
 * additions in the same order: the same bits, except where a value or a partial sum is a denormal (below
 * 2**-126), which the instruction reads and writes as zero.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#pragma GCC optimize("fp-contract=off")

#if defined(__x86_64__) && defined(__GNUC__) && __GNUC__ >= 12
#include <immintrin.h>
#define HAVE_BF16_KERNEL 1
#endif

typedef float v16 __attribute__((vector_size(64), aligned(64)));

static inline float widen(uint16_t h)
{
    uint32_t b = (uint32_t)h << 16;
    float f;
    memcpy(&f, &b, 4);
    return f;
}

/* fp32 -> bf16, to nearest even, NaN kept a (quiet) NaN; m values; a loop the compiler vectorises (inlined
 * into its callers' clones) */
static inline void narrow(const float *restrict src, uint16_t *restrict dst, int64_t m)
{
    for (int64_t c = 0; c < m; c++) {
        uint32_t b;
        memcpy(&b, &src[c], 4);
        uint32_t rounded = (b + 0x7fffu + ((b >> 16) & 1u)) >> 16;
        dst[c] = (uint16_t)((b & 0x7fffffffu) > 0x7f800000u ? (b >> 16) | 0x40u : rounded);
    }
}

struct job {
    const uint16_t *dense, *sparse, *grad_out;
    uint16_t *out, *grad_dense, *grad_sparse;
    int64_t lo, hi, features, dim;
    int bf16_kernel;
    int failed;
};

/* The next sample's inputs (its vectors; in backward its output gradient too), fetched while this one runs */
static inline void prefetch_sample(const struct job *J, int64_t b, int with_grad)
{
    if (b >= J->hi)
        return;
    const int64_t d = J->dim, n = J->features + 1;
    const char *e = (const char *)(J->sparse + b * J->features * d), *x = (const char *)(J->dense + b * d);
    for (int64_t o = 0; o < J->features * d * 2; o += 64)
        __builtin_prefetch(e + o, 0);
    for (int64_t o = 0; o < d * 2; o += 64)
        __builtin_prefetch(x + o, 0);
    if (with_grad) {
        const char *g = (const char *)(J->grad_out + b * (d + n * (n - 1) / 2));
        for (int64_t o = 0; o < (d + n * (n - 1) / 2) * 2; o += 64)
            __builtin_prefetch(g + o, 0);
    }
}

/* Sizes of one sample's work: n vectors of dim values; np the vectors padded to 16 lanes; pairs. */
#define VECTORS(j) ((j)->features + 1)
#define PAIRS(n) ((n) * ((n) - 1) / 2)

/* ---- forward ---------------------------------------------------------------------------------- */

/* zp[t * np + j] = the dword (z_j[2t], z_j[2t + 1]) (the columns' pairs of vector j, transposed) */
static void pack_columns(const struct job *J, int64_t b, uint32_t *restrict zp, int64_t np)
{
    const int64_t n = VECTORS(J), half = J->dim / 2;
    for (int64_t j = 0; j < n; j++) {
        const uint16_t *row = j == 0 ? J->dense + b * J->dim : J->sparse + (b * J->features + j - 1) * J->dim;
        for (int64_t t = 0; t < half; t++) {
            uint32_t w;
            memcpy(&w, row + 2 * t, 4);
            zp[t * np + j] = w;
        }
    }
}

#ifdef HAVE_BF16_KERNEL
/* r[k] <- column k of the 16 x 16 dwords r (row l in r[l]) */
__attribute__((target("avx512f,avx512bw,avx512bf16")))
static inline void transpose16(__m512i r[16])
{
    __m512i t[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; i++) { /* each 128-bit lane L of r[4i + c]: column 4L + c of rows 4i .. 4i + 3 */
        r[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
        r[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
        r[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
        r[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
    }
    for (int c = 0; c < 4; c++) {
        t[c] = _mm512_shuffle_i32x4(r[c], r[4 + c], 0x88);
        t[4 + c] = _mm512_shuffle_i32x4(r[c], r[4 + c], 0xdd);
        t[8 + c] = _mm512_shuffle_i32x4(r[8 + c], r[12 + c], 0x88);
        t[12 + c] = _mm512_shuffle_i32x4(r[8 + c], r[12 + c], 0xdd);
    }
    for (int c = 0; c < 8; c++) {
        r[c] = _mm512_shuffle_i32x4(t[c], t[8 + c], 0x88);
        r[8 + c] = _mm512_shuffle_i32x4(t[c], t[8 + c], 0xdd);
    }
}

/* pack_columns sixteen vectors and sixteen pairs of columns at a time (dim a multiple of 32) */
__attribute__((target("avx512f,avx512bw,avx512bf16")))
static void pack_columns_avx512(const struct job *J, int64_t b, uint32_t *restrict zp, int64_t np)
{
    const int64_t n = VECTORS(J), half = J->dim / 2;
    for (int64_t j0 = 0; j0 < n; j0 += 16)
        for (int64_t t0 = 0; t0 < half; t0 += 16) {
            __m512i r[16];
            for (int l = 0; l < 16; l++) {
                const int64_t j = j0 + l;
                const uint16_t *row = j == 0 ? J->dense + b * J->dim : J->sparse + (b * J->features + j - 1) * J->dim;
                r[l] = j < n ? _mm512_loadu_si512(row + 2 * t0) : _mm512_setzero_si512();
            }
            transpose16(r);
            for (int l = 0; l < 16; l++)
                _mm512_storeu_si512(zp + (t0 + l) * np + j0, r[l]);
        }
}
#endif

/* Gram rows i0 .. i0 + 7 against lanes jv * 16 .. + 15: g[(i0 + r) * np + j] */
#define RB 8

#ifdef HAVE_BF16_KERNEL
__attribute__((target("avx512f,avx512bw,avx512bf16")))
static void gram_block_bf16(const uint32_t *zp, int64_t np, int64_t half, int64_t i0, int64_t jv, float *g)
{
    __m512 acc[RB];
    for (int r = 0; r < RB; r++)
        acc[r] = _mm512_setzero_ps();
    for (int64_t t = 0; t < half; t++) {
        const uint32_t *row = zp + t * np;
        __m512bh col = (__m512bh)_mm512_loadu_si512(row + jv * 16);
        for (int r = 0; r < RB; r++)
            acc[r] = _mm512_dpbf16_ps(acc[r], col, (__m512bh)_mm512_set1_epi32((int)row[i0 + r]));
    }
    for (int r = 0; r < RB; r++)
        _mm512_storeu_ps(g + (i0 + r) * np + jv * 16, acc[r]);
}
#endif

__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
static void gram_block_plain(const uint32_t *zp, int64_t np, int64_t half, int64_t i0, int64_t jv, float *g)
{
    v16 acc[RB];
    for (int r = 0; r < RB; r++)
        acc[r] = (v16){0};
    for (int64_t t = 0; t < half; t++) {
        const uint32_t *row = zp + t * np;
        v16 lo, hi; /* lanes' z_j[2t] and z_j[2t + 1] */
        for (int l = 0; l < 16; l++) {
            uint32_t w = row[jv * 16 + l];
            lo[l] = widen((uint16_t)(w & 0xffffu));
            hi[l] = widen((uint16_t)(w >> 16));
        }
        for (int r = 0; r < RB; r++) {
            uint32_t w = row[i0 + r];
            acc[r] = acc[r] + hi * widen((uint16_t)(w >> 16));
            acc[r] = acc[r] + lo * widen((uint16_t)(w & 0xffffu));
        }
    }
    for (int r = 0; r < RB; r++)
        memcpy(g + (i0 + r) * np + jv * 16, &acc[r], sizeof(v16));
}

__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
static void forward_range(struct job *J)
{
    const int64_t n = VECTORS(J), d = J->dim, half = d / 2, np = (n + 15) / 16 * 16, width = d + PAIRS(n);
    uint32_t *zp = calloc((size_t)(half * np), sizeof(uint32_t));
    float *g = malloc((size_t)((np + RB) * np) * sizeof(float));
    if (zp == NULL || g == NULL) {
        J->failed = 1;
        free(zp);
        free(g);
        return;
    }
    for (int64_t b = J->lo; b < J->hi; b++) {
        prefetch_sample(J, b + 1, 0);
#ifdef HAVE_BF16_KERNEL
        if (J->bf16_kernel && d % 32 == 0)
            pack_columns_avx512(J, b, zp, np);
        else
#endif
            pack_columns(J, b, zp, np);
        for (int64_t i0 = 0; i0 < n; i0 += RB)
            for (int64_t jv = 0; jv * 16 < n; jv++) {
                if (jv * 16 + 15 <= i0) /* every j of these lanes is at most every i of the block: no pair i < j */
                    continue;
#ifdef HAVE_BF16_KERNEL
                if (J->bf16_kernel) {
                    gram_block_bf16(zp, np, half, i0, jv, g);
                    continue;
                }
#endif
                gram_block_plain(zp, np, half, i0, jv, g);
            }
        uint16_t *o = J->out + b * width;
        memcpy(o, J->dense + b * d, (size_t)d * sizeof(uint16_t));
        o += d;
        for (int64_t i = 0; i + 1 < n; i++) { /* row i's pairs (i, i + 1 .. n - 1): one run of the output */
            narrow(g + i * np + i + 1, o, n - 1 - i);
            o += n - 1 - i;
        }
    }
    free(zp);
    free(g);
}

/* ---- backward --------------------------------------------------------------------------------- */

#define CB 64 /* columns of a block: four vectors of 16 */
#define IB 4  /* rows of the gradient a block */

/* zq[t * dp + c] = the dword (z_2t[c], z_2t+1[c]) (pairs of vectors, interleaved; the row after the last
 * zero); sp[i * half_n + t] = the dword (S_i,2t, S_i,2t+1) */
static inline void pack_rows(const struct job *J, int64_t b, uint32_t *restrict zq, int64_t dp, uint32_t *restrict sp,
                      int64_t half_n)
{
    const int64_t n = VECTORS(J), d = J->dim;
    for (int64_t t = 0; t < half_n; t++) {
        const int64_t j0 = 2 * t, j1 = 2 * t + 1;
        const uint16_t *r0 = j0 == 0 ? J->dense + b * d : J->sparse + (b * J->features + j0 - 1) * d;
        const uint16_t *r1 = j1 >= n ? NULL : J->sparse + (b * J->features + j1 - 1) * d;
        for (int64_t c = 0; c < d; c++)
            zq[t * dp + c] = (uint32_t)r0[c] | (r1 == NULL ? 0u : (uint32_t)r1[c] << 16);
    }
    uint16_t *s = (uint16_t *)sp; /* row i: half_n dwords = 2 * half_n bf16 values */
    const int64_t stride = 2 * half_n;
    const uint16_t *gp = J->grad_out + b * (d + PAIRS(n)) + d; /* row i's pairs (i, i + 1 ..) from i(2n - i - 1)/2 */
    for (int64_t i = 0; i < n; i++) {
        uint16_t *row = s + i * stride;
        int64_t at = i - 1; /* pair (j, i) for j = 0, 1, ..: j's run, i - j - 1 along */
        for (int64_t j = 0; j < i; j++) {
            row[j] = gp[at];
            at += n - j - 2;
        }
        row[i] = 0;
        memcpy(row + i + 1, gp + i * (2 * n - i - 1) / 2, (size_t)(n - 1 - i) * sizeof(uint16_t));
    }
}

#ifdef HAVE_BF16_KERNEL
__attribute__((target("avx512f,avx512bw,avx512bf16")))
static void grad_block_bf16(const uint32_t *zq, int64_t dp, const uint32_t *sp, int64_t half_n, int64_t i0,
                            int64_t c0, float *acc_out)
{
    __m512 acc[IB][4];
    for (int r = 0; r < IB; r++)
        for (int v = 0; v < 4; v++)
            acc[r][v] = _mm512_setzero_ps();
    for (int64_t t = 0; t < half_n; t++) {
        __m512bh z[4];
        for (int v = 0; v < 4; v++)
            z[v] = (__m512bh)_mm512_loadu_si512(zq + t * dp + c0 + 16 * v);
        for (int r = 0; r < IB; r++) {
            __m512bh s = (__m512bh)_mm512_set1_epi32((int)sp[(i0 + r) * half_n + t]);
            for (int v = 0; v < 4; v++)
                acc[r][v] = _mm512_dpbf16_ps(acc[r][v], z[v], s);
        }
    }
    for (int r = 0; r < IB; r++)
        for (int v = 0; v < 4; v++)
            _mm512_storeu_ps(acc_out + r * CB + 16 * v, acc[r][v]);
}
#endif

__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
static void grad_block_plain(const uint32_t *zq, int64_t dp, const uint32_t *sp, int64_t half_n, int64_t i0,
                             int64_t c0, float *acc_out)
{
    float acc[IB][CB];
    memset(acc, 0, sizeof(acc));
    for (int64_t t = 0; t < half_n; t++) {
        float lo[CB], hi[CB];
        for (int c = 0; c < CB; c++) {
            uint32_t w = zq[t * dp + c0 + c];
            lo[c] = widen((uint16_t)(w & 0xffffu));
            hi[c] = widen((uint16_t)(w >> 16));
        }
        for (int r = 0; r < IB; r++) {
            uint32_t w = sp[(i0 + r) * half_n + t];
            const float s_hi = widen((uint16_t)(w >> 16)), s_lo = widen((uint16_t)(w & 0xffffu));
            for (int c = 0; c < CB; c++)
                acc[r][c] = acc[r][c] + hi[c] * s_hi;
            for (int c = 0; c < CB; c++)
                acc[r][c] = acc[r][c] + lo[c] * s_lo;
        }
    }
    memcpy(acc_out, acc, sizeof(acc));
}

__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
static void backward_range(struct job *J)
{
    const int64_t n = VECTORS(J), d = J->dim, half_n = (n + 1) / 2, dp = (d + CB - 1) / CB * CB;
    const int64_t rows = (n + IB - 1) / IB * IB;
    uint32_t *zq = calloc((size_t)(half_n * dp), sizeof(uint32_t));
    uint32_t *sp = calloc((size_t)(rows * half_n), sizeof(uint32_t));
    float *acc = malloc((size_t)(IB * CB) * sizeof(float));
    float *row = malloc((size_t)d * sizeof(float));
    uint16_t *part = malloc((size_t)d * sizeof(uint16_t));
    if (zq == NULL || sp == NULL || acc == NULL || row == NULL || part == NULL) {
        J->failed = 1;
        free(zq);
        free(sp);
        free(acc);
        free(row);
        free(part);
        return;
    }
    for (int64_t b = J->lo; b < J->hi; b++) {
        prefetch_sample(J, b + 1, 1);
        pack_rows(J, b, zq, dp, sp, half_n);
        for (int64_t i0 = 0; i0 < n; i0 += IB) {
            for (int64_t c0 = 0; c0 < d; c0 += CB) {
#ifdef HAVE_BF16_KERNEL
                if (J->bf16_kernel)
                    grad_block_bf16(zq, dp, sp, half_n, i0, c0, acc);
                else
#endif
                    grad_block_plain(zq, dp, sp, half_n, i0, c0, acc);
                const int64_t m = d - c0 < CB ? d - c0 : CB;
                for (int64_t r = 0; r < IB && i0 + r < n; r++) {
                    const int64_t i = i0 + r;
                    if (i == 0) { /* the dense vector: its pairs' part rounded, plus the output's own slice */
                        const uint16_t *own = J->grad_out + b * (d + PAIRS(n)) + c0;
                        narrow(acc + r * CB, part, m);
                        for (int64_t c = 0; c < m; c++)
                            row[c] = widen(own[c]) + widen(part[c]);
                        narrow(row, J->grad_dense + b * d + c0, m);
                    } else {
                        narrow(acc + r * CB, J->grad_sparse + (b * J->features + i - 1) * d + c0, m);
                    }
                }
            }
        }
    }
    free(zq);
    free(sp);
    free(acc);
    free(row);
    free(part);
}

/* ---- threads and entry points ------------------------------------------------------------------ */
/* (without -fopenmp the pragma is ignored and every sample runs on the calling thread) */

#define MAX_THREADS 64

static int bf16_kernel_available(void)
{
#ifdef HAVE_BF16_KERNEL
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512bw");
#else
    return 0;
#endif
}

/* 1 where the sums run on AVX512-BF16's instruction, 0 where on the plain loop. */
int dot_interaction_kernel(void)
{
    return bf16_kernel_available();
}

static int run(void (*fn)(struct job *), struct job base, int64_t batch, int threads, int plain)
{
    if (threads < 1)
        threads = 1;
    if (threads > MAX_THREADS)
        threads = MAX_THREADS;
    if (batch < 64 * (int64_t)threads) /* a few samples: a thread costs more than it saves */
        threads = batch / 64 > 1 ? (int)(batch / 64) : 1;
    base.bf16_kernel = !plain && bf16_kernel_available();
    struct job jobs[MAX_THREADS];
    for (int t = 0; t < threads; t++) {
        jobs[t] = base;
        jobs[t].lo = batch * t / threads;
        jobs[t].hi = batch * (t + 1) / threads;
    }
#pragma omp parallel for num_threads(threads) schedule(static, 1)
    for (int t = 0; t < threads; t++)
        fn(&jobs[t]);
    for (int t = 0; t < threads; t++)
        if (jobs[t].failed)
            return -1;
    return 0;
}

/* out (batch x (dim + n(n-1)/2), n = features + 1) from dense (batch x dim) and sparse (batch x features x
 * dim), all bf16 and contiguous; dim even. plain: the plain loop even where the instruction is there (for
 * tests). Returns 0, or -1 where memory could not be had. */
int dot_interaction_forward(const uint16_t *dense, const uint16_t *sparse, uint16_t *out, int64_t batch,
                            int64_t features, int64_t dim, int threads, int plain)
{
    struct job j = {dense, sparse, NULL, out, NULL, NULL, 0, 0, features, dim, 0, 0};
    return run(forward_range, j, batch, threads, plain);
}

/* grad_dense (batch x dim) and grad_sparse (batch x features x dim) from grad_out (as out above) and the
 * forward's inputs. Returns 0, or -1 where memory could not be had. */
int dot_interaction_backward(const uint16_t *dense, const uint16_t *sparse, const uint16_t *grad_out,
                             uint16_t *grad_dense, uint16_t *grad_sparse, int64_t batch, int64_t features,
                             int64_t dim, int threads, int plain)
{
    struct job j = {dense, sparse, grad_out, NULL, grad_dense, grad_sparse, 0, 0, features, dim, 0, 0};
    return run(backward_range, j, batch, threads, plain);
}
