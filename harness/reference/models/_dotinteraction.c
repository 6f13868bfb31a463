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

/* The row of vector j of sample b: the dense vector, then the sparse ones */
static inline const uint16_t *vector_row(const struct job *J, int64_t b, int64_t j)
{
    return j == 0 ? J->dense + b * J->dim : J->sparse + (b * J->features + j - 1) * J->dim;
}

/* ---- AVX512-BF16 helpers ------------------------------------------------------------------------ */

#ifdef HAVE_BF16_KERNEL
#define BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
#define UNROLL _Pragma("GCC unroll 8") /* loops over a tile's rows and vectors: its accumulators in registers */

/* n zeroed bytes on a cache line's boundary (whole-line vector loads and stores into the working tiles), or NULL */
static void *zeroed(size_t n)
{
    void *p = NULL;
    if (posix_memalign(&p, 64, n ? n : 1) != 0)
        return NULL;
    memset(p, 0, n);
    return p;
}

/* narrow() on 16 and on 8 lanes: the same integer arithmetic, its NaN rule included (not VCVTNEPS2BF16, which
 * reads denormals as zero) */
BF16_TARGET static inline __m256i narrow16(__m512 v)
{
    const __m512i b = _mm512_castps_si512(v), hi = _mm512_srli_epi32(b, 16);
    const __m512i rounded = _mm512_srli_epi32(
        _mm512_add_epi32(_mm512_add_epi32(b, _mm512_set1_epi32(0x7fff)), _mm512_and_si512(hi, _mm512_set1_epi32(1))), 16);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(b, _mm512_set1_epi32(0x7fffffff)),
                                                  _mm512_set1_epi32(0x7f800000));
    return _mm512_cvtepi32_epi16(_mm512_mask_or_epi32(rounded, nan, hi, _mm512_set1_epi32(0x40)));
}

BF16_TARGET static inline __m128i narrow8(__m256 v)
{
    const __m256i b = _mm256_castps_si256(v), hi = _mm256_srli_epi32(b, 16);
    const __m256i rounded = _mm256_srli_epi32(
        _mm256_add_epi32(_mm256_add_epi32(b, _mm256_set1_epi32(0x7fff)), _mm256_and_si256(hi, _mm256_set1_epi32(1))), 16);
    const __mmask8 nan = _mm256_cmpgt_epu32_mask(_mm256_and_si256(b, _mm256_set1_epi32(0x7fffffff)),
                                                 _mm256_set1_epi32(0x7f800000));
    return _mm256_cvtepi32_epi16(_mm256_mask_or_epi32(rounded, nan, hi, _mm256_set1_epi32(0x40)));
}

/* narrow() on 32 lanes, v0's then v1's: the same result from word arithmetic on the values' high words h and
 * low words l, the pair's high words first gathered: h + 1 where l + (h & 1) > 0x8000 (the carry of
 * b + 0x7fff + (h & 1) into the high word; saturating, as l + 1 may be 0x10000), h | 0x40 for a NaN */
BF16_TARGET static inline __m512i narrow32(__m512 v0, __m512 v1)
{
    static const uint16_t high_words[32] = {1,  3,  5,  7,  9,  11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31,
                                            33, 35, 37, 39, 41, 43, 45, 47, 49, 51, 53, 55, 57, 59, 61, 63};
    const __m512i b0 = _mm512_castps_si512(v0), b1 = _mm512_castps_si512(v1), one = _mm512_set1_epi16(1);
    const __m512i hi = _mm512_loadu_si512(high_words);
    const __m512i h = _mm512_permutex2var_epi16(b0, hi, b1), l = _mm512_permutex2var_epi16(b0, _mm512_sub_epi16(hi, one), b1);
    const __mmask32 up = _mm512_cmpgt_epu16_mask(_mm512_adds_epu16(l, _mm512_and_si512(h, one)), _mm512_set1_epi16(-0x8000));
    const __mmask32 nan = _mm512_kunpackw(_mm512_cmp_ps_mask(v1, v1, _CMP_UNORD_Q), _mm512_cmp_ps_mask(v0, v0, _CMP_UNORD_Q));
    return _mm512_mask_mov_epi16(_mm512_mask_add_epi16(h, up, h, one), nan, _mm512_or_si512(h, _mm512_set1_epi16(0x40)));
}

/* narrow32 on 16 lanes, v0's then v1's */
BF16_TARGET static inline __m256i narrow16_pair(__m256 v0, __m256 v1)
{
    const __m256i b0 = _mm256_castps_si256(v0), b1 = _mm256_castps_si256(v1), one = _mm256_set1_epi16(1);
    const __m256i hi = _mm256_setr_epi16(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    const __m256i h = _mm256_permutex2var_epi16(b0, hi, b1), l = _mm256_permutex2var_epi16(b0, _mm256_sub_epi16(hi, one), b1);
    const __mmask16 up = _mm256_cmpgt_epu16_mask(_mm256_adds_epu16(l, _mm256_and_si256(h, one)), _mm256_set1_epi16(-0x8000));
    const __mmask16 nan = (__mmask16)(_mm256_cmp_ps_mask(v0, v0, _CMP_UNORD_Q) | _mm256_cmp_ps_mask(v1, v1, _CMP_UNORD_Q) << 8);
    return _mm256_mask_mov_epi16(_mm256_mask_add_epi16(h, up, h, one), nan, _mm256_or_si256(h, _mm256_set1_epi16(0x40)));
}

/* bf16 values -> fp32, 16 lanes (widen()) */
BF16_TARGET static inline __m512 widen16(__m256i h)
{
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* The lanes c .. c + 15 that lie below m: a mask of up to 16, of up to 32 */
static inline uint16_t lanes16(int64_t c, int64_t m)
{
    return m - c >= 16 ? 0xffffu : (uint16_t)((1u << (m - c)) - 1u);
}
static inline uint32_t lanes32(int64_t c, int64_t m)
{
    return m - c >= 32 ? 0xffffffffu : (1u << (m - c)) - 1u;
}

/* dst[0 .. m - 1] = src[0 .. m - 1], bf16 values, 32 at a time */
BF16_TARGET static inline void copy_words(uint16_t *dst, const uint16_t *src, int64_t m)
{
    for (int64_t c = 0; c < m; c += 32) {
        const __mmask32 k = lanes32(c, m);
        _mm512_mask_storeu_epi16(dst + c, k, _mm512_maskz_loadu_epi16(k, src + c));
    }
}
#endif

/* ---- forward ---------------------------------------------------------------------------------- */

/* zp[t * np + pad + j] = the dword (z_j[2t], z_j[2t + 1]) (the columns' pairs of vector j, transposed) */
static void pack_columns(const struct job *J, int64_t b, uint32_t *restrict zp, int64_t np, int64_t pad)
{
    const int64_t n = VECTORS(J), half = J->dim / 2;
    for (int64_t j = 0; j < n; j++) {
        const uint16_t *row = vector_row(J, b, j);
        for (int64_t t = 0; t < half; t++) {
            uint32_t w;
            memcpy(&w, row + 2 * t, 4);
            zp[t * np + pad + j] = w;
        }
    }
}

/* Gram rows i0 .. i0 + 7 against lanes jv * 16 .. + 15: g[(i0 + r) * np + j] */
#define RB 8

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

#ifdef HAVE_BF16_KERNEL
/* The instruction's forward. The n vectors sit at lanes pad .. np - 1 of np = 8 ceil(n / 8) (pad = np - n zero
 * lanes in front) and the Gram matrix is computed in 8 x 8 blocks (rows as broadcasts, lanes of one ymm): the
 * row block of lanes 8k .. 8k + 7 against lane groups k .. np / 8 - 1, so that the only lanes computed for
 * nothing are a triangle within each diagonal block (the padding's rows are never computed: its lanes come
 * first). Each pair's sum is the same instruction on the same operands (G_ij = G_ji bit for bit: a product
 * of two bf16 values is exact, so the order of its factors cannot show), whatever its block. */

/* pack_columns at lanes pad + j, eight vectors and four pairs of columns at a time (half a multiple of 4):
 * 4 x 4 dword transposes in the 128-bit lanes of registers loaded half from vector l, half from vector l + 4.
 * zero: a row of zeros, the padding's vectors. */
BF16_TARGET static void pack_columns_bf16(const struct job *J, int64_t b, uint32_t *restrict zp, int64_t np,
                                          int64_t pad, const uint16_t *zero)
{
    const int64_t half = J->dim / 2;
    for (int64_t p0 = 0; p0 < np; p0 += 8) {
        const uint32_t *row[8];
        for (int l = 0; l < 8; l++)
            row[l] = (const uint32_t *)(p0 + l < pad ? zero : vector_row(J, b, p0 + l - pad));
        for (int64_t t0 = 0; t0 < half; t0 += 4) {
            __m256i a[4];
            for (int l = 0; l < 4; l++)
                a[l] = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(row[l] + t0))),
                                               _mm_loadu_si128((const __m128i *)(row[l + 4] + t0)), 1);
            const __m256i lo01 = _mm256_unpacklo_epi32(a[0], a[1]), hi01 = _mm256_unpackhi_epi32(a[0], a[1]);
            const __m256i lo23 = _mm256_unpacklo_epi32(a[2], a[3]), hi23 = _mm256_unpackhi_epi32(a[2], a[3]);
            uint32_t *dst = zp + t0 * np + p0;
            _mm256_storeu_si256((__m256i *)dst, _mm256_unpacklo_epi64(lo01, lo23));
            _mm256_storeu_si256((__m256i *)(dst + np), _mm256_unpackhi_epi64(lo01, lo23));
            _mm256_storeu_si256((__m256i *)(dst + 2 * np), _mm256_unpacklo_epi64(hi01, hi23));
            _mm256_storeu_si256((__m256i *)(dst + 3 * np), _mm256_unpackhi_epi64(hi01, hi23));
        }
    }
}

/* Gram rows (lanes) q0 .. q0 + R - 1 against the lanes of groups g0 .. g0 + W - 1, rounded and stored straight
 * into the sample's pairs o: row q's pair with lane p > q is o[at + p - q - 1], at = i(2n - i - 1)/2 where
 * its run starts (i = q - pad). A masked store per two groups: lanes p <= q are not written (and, masked, not
 * touched, so that their addresses may lie before o). R and W constants: the accumulators stay in registers. */
BF16_TARGET static inline __attribute__((always_inline)) void
gram_tile(const uint32_t *zp, int64_t np, int64_t half, int64_t q0, const int R, int64_t g0, const int W,
          uint16_t *o, int64_t n, int64_t pad)
{
    __m256 acc[8][4];
    UNROLL
    for (int r = 0; r < R; r++)
        UNROLL
        for (int w = 0; w < W; w++)
            acc[r][w] = _mm256_setzero_ps();
    for (int64_t t = 0; t < half; t++) {
        const uint32_t *row = zp + t * np;
        __m256bh col[4];
        UNROLL
        for (int w = 0; w < W; w++)
            col[w] = (__m256bh)_mm256_loadu_si256((const __m256i *)(row + 8 * (g0 + w)));
        UNROLL
        for (int r = 0; r < R; r++) {
            const __m256bh s = (__m256bh)_mm256_set1_epi32((int)row[q0 + r]);
            UNROLL
            for (int w = 0; w < W; w++)
                acc[r][w] = _mm256_dpbf16_ps(acc[r][w], col[w], s);
        }
    }
    UNROLL
    for (int r = 0; r < R; r++) {
        const int64_t q = q0 + r, i = q - pad;
        uint16_t *run = o + i * (2 * n - i - 1) / 2 - q - 1;
        UNROLL
        for (int w = 0; w < W; w += 2) { /* two groups at a time, 16 lanes p0 .. p0 + 15 */
            const int64_t p0 = 8 * (g0 + w);
            if (q - p0 >= (w + 1 < W ? 15 : 7)) /* no lane p > q */
                continue;
            const uint32_t k = q < p0 ? 0xffffu : 0xffffu << (q - p0 + 1);
            if (w + 1 < W)
                _mm256_mask_storeu_epi16(run + p0, (__mmask16)k, narrow16_pair(acc[r][w], acc[r][w + 1]));
            else
                _mm_mask_storeu_epi16(run + p0, (__mmask8)k, narrow8(acc[r][w]));
        }
    }
}

#define GRAM_ACC 24 /* accumulators of a tile at most, R * W (R <= 8 rows, W <= 4 groups): 12 and more keep the
                      * instruction's throughput (its latency is about six of its issue slots of two a cycle) */

BF16_TARGET static void gram_tiles(const uint32_t *zp, int64_t np, int64_t half, int64_t q0, int R, int64_t g0, int W,
                                   uint16_t *o, int64_t n, int64_t pad)
{
#define TILE(R_, W_)                                                                                            \
    case (R_) * 8 + (W_):                                                                                       \
        gram_tile(zp, np, half, q0, R_, g0, W_, o, n, pad);                                                     \
        break;
#define TILES(R_) TILE(R_, 1) TILE(R_, 2) TILE(R_, 3) TILE(R_, 4)
    switch (R * 8 + W) {
        TILES(1) TILES(2) TILES(3) TILES(4) TILES(5) TILES(6)
        TILE(7, 1) TILE(7, 2) TILE(7, 3) TILE(8, 1) TILE(8, 2) TILE(8, 3)
    }
#undef TILES
#undef TILE
}

BF16_TARGET static void forward_range_bf16(struct job *J)
{
    const int64_t n = VECTORS(J), d = J->dim, half = d / 2, np = (n + 7) / 8 * 8, pad = np - n, width = d + PAIRS(n);
    uint32_t *zp = zeroed((size_t)(half * np) * sizeof(uint32_t));
    uint16_t *zero = zeroed((size_t)d * sizeof(uint16_t));
    if (zp == NULL || zero == NULL) {
        J->failed = 1;
        free(zp);
        free(zero);
        return;
    }
    for (int64_t b = J->lo; b < J->hi; b++) {
        prefetch_sample(J, b + 1, 0);
        if (half % 4 == 0)
            pack_columns_bf16(J, b, zp, np, pad, zero);
        else
            pack_columns(J, b, zp, np, pad);
        uint16_t *o = J->out + b * width;
        copy_words(o, J->dense + b * d, d);
        for (int64_t k = 0; k < np / 8; k++) { /* rows q of lanes 8k .. 8k + 7 that have pairs: pad <= q < np - 1 */
            const int64_t q0 = 8 * k > pad ? 8 * k : pad, q1 = 8 * k + 8 < np - 1 ? 8 * k + 8 : np - 1;
            if (q0 >= q1)
                continue;
            const int R = (int)(q1 - q0), wmax = GRAM_ACC / R < 4 ? GRAM_ACC / R : 4;
            for (int64_t g0 = k; g0 < np / 8; g0 += wmax)
                gram_tiles(zp, np, half, q0, R, g0, np / 8 - g0 < wmax ? (int)(np / 8 - g0) : wmax, o + d, n, pad);
        }
    }
    free(zp);
    free(zero);
}
#endif

__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
static void forward_range(struct job *J)
{
#ifdef HAVE_BF16_KERNEL
    if (J->bf16_kernel) {
        forward_range_bf16(J);
        return;
    }
#endif
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
        pack_columns(J, b, zp, np, 0);
        for (int64_t i0 = 0; i0 < n; i0 += RB)
            for (int64_t jv = 0; jv * 16 < n; jv++) {
                if (jv * 16 + 15 <= i0) /* every j of these lanes is at most every i of the block: no pair i < j */
                    continue;
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
 * zero) */
static inline void pack_pairs(const struct job *J, int64_t b, uint32_t *restrict zq, int64_t dp, int64_t half_n)
{
    const int64_t n = VECTORS(J), d = J->dim;
    for (int64_t t = 0; t < half_n; t++) {
        const uint16_t *r0 = vector_row(J, b, 2 * t), *r1 = 2 * t + 1 >= n ? NULL : vector_row(J, b, 2 * t + 1);
        for (int64_t c = 0; c < d; c++)
            zq[t * dp + c] = (uint32_t)r0[c] | (r1 == NULL ? 0u : (uint32_t)r1[c] << 16);
    }
}

/* sp[i * half_n + t] = the dword (S_i,2t, S_i,2t+1): S's rows, 2 half_n bf16 values each (S_i,n zero where n is
 * odd: sp is zeroed once and that value never written) */
static inline void pack_s(const struct job *J, int64_t b, uint32_t *restrict sp, int64_t half_n)
{
    const int64_t n = VECTORS(J), d = J->dim;
    uint16_t *s = (uint16_t *)sp;
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

#ifdef HAVE_BF16_KERNEL
/* The instruction's backward: blocks of R <= IB rows of the gradient and V <= 4 vectors of 16 columns, rounded
 * and stored from the registers; S's rows ss dwords apart (pack_s_bf16) */

/* pack_pairs, two vectors' 32 columns at a time: a word interleave (dp a multiple of 32; columns d .. dp - 1
 * zero) */
BF16_TARGET static void pack_pairs_bf16(const struct job *J, int64_t b, uint32_t *restrict zq, int64_t dp,
                                        int64_t half_n)
{
    const int64_t n = VECTORS(J), d = J->dim;
    /* word w of the result: word w / 2 (lo; hi: 16 + w / 2) of the first vector (w even) or of the second (w odd,
     * permutex2var's index + 32) */
    static const uint16_t lo[32] = {0,  32, 1,  33, 2,  34, 3,  35, 4,  36, 5,  37, 6,  38, 7,  39,
                                    8,  40, 9,  41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
    static const uint16_t hi[32] = {16, 48, 17, 49, 18, 50, 19, 51, 20, 52, 21, 53, 22, 54, 23, 55,
                                    24, 56, 25, 57, 26, 58, 27, 59, 28, 60, 29, 61, 30, 62, 31, 63};
    const __m512i ilo = _mm512_loadu_si512(lo), ihi = _mm512_loadu_si512(hi);
    for (int64_t t = 0; t < half_n; t++) {
        const uint16_t *r0 = vector_row(J, b, 2 * t), *r1 = 2 * t + 1 < n ? vector_row(J, b, 2 * t + 1) : NULL;
        for (int64_t c = 0; c < d; c += 32) {
            const __mmask32 k = lanes32(c, d);
            const __m512i x0 = k == 0xffffffffu ? _mm512_loadu_si512(r0 + c) : _mm512_maskz_loadu_epi16(k, r0 + c);
            const __m512i x1 = r1 == NULL       ? _mm512_setzero_si512()
                               : k == 0xffffffffu ? _mm512_loadu_si512(r1 + c)
                                                  : _mm512_maskz_loadu_epi16(k, r1 + c);
            _mm512_storeu_si512(zq + t * dp + c, _mm512_permutex2var_epi16(x0, ilo, x1));
            _mm512_storeu_si512(zq + t * dp + c + 16, _mm512_permutex2var_epi16(x0, ihi, x1));
        }
    }
}

/* t[c] = column c of the 16 x 16 words at src (rows ws words apart): 8 x 8 transposes in the 128-bit lanes,
 * lane 0 from rows 0 .. 7, lane 1 from rows 8 .. 15 */
BF16_TARGET static inline void transpose_words(const uint16_t *src, int64_t ws, __m256i t[16])
{
    for (int h = 0; h < 2; h++) { /* columns 8h .. 8h + 7 */
        __m256i a[8], x[8];
        for (int k = 0; k < 8; k++)
            a[k] = _mm256_inserti128_si256(
                _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(src + k * ws + 8 * h))),
                _mm_loadu_si128((const __m128i *)(src + (k + 8) * ws + 8 * h)), 1);
        for (int k = 0; k < 4; k++) { /* rows 2k, 2k + 1: their words 0 .. 3, 4 .. 7 interleaved */
            x[2 * k] = _mm256_unpacklo_epi16(a[2 * k], a[2 * k + 1]);
            x[2 * k + 1] = _mm256_unpackhi_epi16(a[2 * k], a[2 * k + 1]);
        }
        for (int k = 0; k < 2; k++) { /* rows 4k .. 4k + 3: their words (0, 1), (2, 3), (4, 5), (6, 7) */
            a[4 * k] = _mm256_unpacklo_epi32(x[4 * k], x[4 * k + 2]);
            a[4 * k + 1] = _mm256_unpackhi_epi32(x[4 * k], x[4 * k + 2]);
            a[4 * k + 2] = _mm256_unpacklo_epi32(x[4 * k + 1], x[4 * k + 3]);
            a[4 * k + 3] = _mm256_unpackhi_epi32(x[4 * k + 1], x[4 * k + 3]);
        }
        for (int k = 0; k < 4; k++) { /* words 2k and 2k + 1 of rows 0 .. 7 */
            t[8 * h + 2 * k] = _mm256_unpacklo_epi64(a[k], a[4 + k]);
            t[8 * h + 2 * k + 1] = _mm256_unpackhi_epi64(a[k], a[4 + k]);
        }
    }
}

/* pack_s with sp's rows ws words apart (ws: n rounded up to 16), from the upper triangle U: u (zeroed once,
 * rows of ws words) gets each row's run of pairs, then S = U | U^T, 16 x 16 words at a time. The non-zero
 * words of U and of U^T lie on either side of the diagonal (zero in both), so the OR is a copy of each value:
 * the same words as pack_s's (S_i,j zero for j >= n, U being zero there). */
BF16_TARGET static void pack_s_bf16(const struct job *J, int64_t b, uint16_t *restrict u, uint32_t *restrict sp,
                                    int64_t ws)
{
    const int64_t n = VECTORS(J), d = J->dim;
    const uint16_t *gp = J->grad_out + b * (d + PAIRS(n)) + d; /* row i's pairs (i, i + 1 ..) from i(2n - i - 1)/2 */
    for (int64_t i = 0; i + 1 < n; i++)
        copy_words(u + i * ws + i + 1, gp + i * (2 * n - i - 1) / 2, n - 1 - i);
    uint16_t *s = (uint16_t *)sp;
    for (int64_t i0 = 0; i0 < ws; i0 += 16)
        for (int64_t j0 = i0; j0 < ws; j0 += 16) { /* U's block (i0, j0) and its transpose, S's block (j0, i0) */
            __m256i t[16];
            transpose_words(u + i0 * ws + j0, ws, t);
            for (int c = 0; c < 16; c++) {
                const __m256i up = _mm256_loadu_si256((const __m256i *)(u + (i0 + c) * ws + j0));
                if (i0 == j0) {
                    _mm256_storeu_si256((__m256i *)(s + (i0 + c) * ws + i0), _mm256_or_si256(up, t[c]));
                } else {
                    _mm256_storeu_si256((__m256i *)(s + (i0 + c) * ws + j0), up);
                    _mm256_storeu_si256((__m256i *)(s + (j0 + c) * ws + i0), t[c]);
                }
            }
        }
}

BF16_TARGET static inline __attribute__((always_inline)) void
grad_tile(const struct job *J, int64_t b, const uint32_t *zq, int64_t dp, const uint32_t *sp, int64_t ss,
          int64_t half_n, int64_t i0, const int R, int64_t c0, const int V)
{
    __m512 acc[IB][4];
    UNROLL
    for (int r = 0; r < R; r++)
        UNROLL
        for (int v = 0; v < V; v++)
            acc[r][v] = _mm512_setzero_ps();
    for (int64_t t = 0; t < half_n; t++) {
        __m512bh z[4];
        UNROLL
        for (int v = 0; v < V; v++)
            z[v] = (__m512bh)_mm512_loadu_si512(zq + t * dp + c0 + 16 * v);
        UNROLL
        for (int r = 0; r < R; r++) {
            const __m512bh s = (__m512bh)_mm512_set1_epi32((int)sp[(i0 + r) * ss + t]);
            UNROLL
            for (int v = 0; v < V; v++)
                acc[r][v] = _mm512_dpbf16_ps(acc[r][v], z[v], s);
        }
    }
    const int64_t d = J->dim, n = VECTORS(J);
    UNROLL
    for (int r = 0; r < R; r++) {
        const int64_t i = i0 + r;
        UNROLL
        for (int v = 0; v < V; v++) {
            const int64_t c = c0 + 16 * v;
            const __mmask16 k = lanes16(c, d);
            if (i == 0) { /* the dense vector: its pairs' part rounded, plus the output's own slice */
                const __m256i own = _mm256_maskz_loadu_epi16(k, J->grad_out + b * (d + PAIRS(n)) + c);
                const __m256i sum = narrow16(_mm512_add_ps(widen16(own), widen16(narrow16(acc[r][v]))));
                /* where both are NaN, own's: x86's add gives its first operand's NaN, and the plain loop's
                 * own + part adds in that order; pinned here, as the compiler may swap an add's operands */
                const __mmask16 own_nan = _mm256_cmpgt_epu16_mask(_mm256_and_si256(own, _mm256_set1_epi16(0x7fff)),
                                                                 _mm256_set1_epi16(0x7f80));
                _mm256_mask_storeu_epi16(J->grad_dense + b * d + c, k,
                                         _mm256_mask_mov_epi16(sum, own_nan, _mm256_or_si256(own, _mm256_set1_epi16(0x40))));
            } else if (v % 2 == 1) { /* stored with v - 1 */
            } else if (v + 1 < V) {
                _mm512_mask_storeu_epi16(J->grad_sparse + (b * J->features + i - 1) * d + c, lanes32(c, d),
                                         narrow32(acc[r][v], acc[r][v + 1]));
            } else {
                _mm256_mask_storeu_epi16(J->grad_sparse + (b * J->features + i - 1) * d + c, k, narrow16(acc[r][v]));
            }
        }
    }
}

BF16_TARGET static void grad_tiles(const struct job *J, int64_t b, const uint32_t *zq, int64_t dp, const uint32_t *sp,
                                   int64_t ss, int64_t half_n, int64_t i0, int R, int64_t c0, int V)
{
#define TILE(R_, V_)                                                                                            \
    case (R_) * 8 + (V_):                                                                                       \
        grad_tile(J, b, zq, dp, sp, ss, half_n, i0, R_, c0, V_);                                                    \
        break;
#define TILES(R_) TILE(R_, 1) TILE(R_, 2) TILE(R_, 3) TILE(R_, 4)
    switch (R * 8 + V) {
        TILES(1) TILES(2) TILES(3) TILES(4)
    }
#undef TILES
#undef TILE
}

BF16_TARGET static void backward_range_bf16(struct job *J)
{
    const int64_t n = VECTORS(J), d = J->dim, half_n = (n + 1) / 2, dp = (d + 31) / 32 * 32, ws = (n + 15) / 16 * 16;
    uint32_t *zq = zeroed((size_t)(half_n * dp) * sizeof(uint32_t));
    uint32_t *sp = zeroed((size_t)(ws * ws / 2) * sizeof(uint32_t));
    uint16_t *u = zeroed((size_t)(ws * ws) * sizeof(uint16_t));
    if (zq == NULL || sp == NULL || u == NULL) {
        J->failed = 1;
        free(zq);
        free(sp);
        free(u);
        return;
    }
    for (int64_t b = J->lo; b < J->hi; b++) {
        prefetch_sample(J, b + 1, 1);
        pack_pairs_bf16(J, b, zq, dp, half_n);
        pack_s_bf16(J, b, u, sp, ws);
        for (int64_t i0 = 0; i0 < n; i0 += IB)
            for (int64_t c0 = 0; c0 < d; c0 += CB)
                grad_tiles(J, b, zq, dp, sp, ws / 2, half_n, i0, n - i0 < IB ? (int)(n - i0) : IB, c0,
                           d - c0 < CB ? (int)((d - c0 + 15) / 16) : CB / 16);
    }
    free(zq);
    free(sp);
    free(u);
}
#endif

__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
static void backward_range(struct job *J)
{
#ifdef HAVE_BF16_KERNEL
    if (J->bf16_kernel) {
        backward_range_bf16(J);
        return;
    }
#endif
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
        pack_pairs(J, b, zq, dp, half_n);
        pack_s(J, b, sp, half_n);
        for (int64_t i0 = 0; i0 < n; i0 += IB) {
            for (int64_t c0 = 0; c0 < d; c0 += CB) {
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
    return __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl");
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
