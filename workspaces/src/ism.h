/* The insert-sort-merge runtime of Spindle's printed kernels (paper 001),
   the C twin of spindle_workspaces::ism. Before including it, define REAL
   (the value type), one policy (ISM_DENSE, ISM_BUCKET, ISM_HASH, ISM_COORD,
   ISM_MAP or ISM_VECTOR as 1), the switches ISM_INDEXING, ISM_REALLOC,
   ISM_DOUBLE_BUFFER and ISM_PIPELINE (0 or 1), and ISM_PIPELINE_MIN.

   Coordinates arrive as labels: the gathered coordinates linearised in the
   output's storage order, so label order is the order they are appended in.
   An accumulation array takes inserts (deduplicated as its policy can) until
   it is full; then it is sorted into a batch, and the batch merged into the
   all array (labels summed as they meet). With ISM_PIPELINE the sort and
   merge run on a second thread while inserts go on into a second
   accumulation array. */

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#if ISM_PIPELINE
#include <pthread.h>
#endif

/* The runtime's allocations: a kernel has no error path to return through,
   so running out of memory stops the process with the reason rather than
   writing through a null pointer. */
static inline void *ism_checked(void *p, size_t bytes) {
    if (!p && bytes) {
        fprintf(stderr, "spindle: a sparse workspace could not allocate %zu bytes (out of memory)\n", bytes);
        abort();
    }
    return p;
}
#define ism_malloc(bytes) ism_checked(malloc(bytes), (bytes))
#define ism_calloc(n, size) ism_checked(calloc((n), (size)), (size_t)(n) * (size))
#define ism_realloc(p, bytes) ism_checked(realloc((p), (bytes)), (bytes))

typedef struct {
    int64_t key;
    REAL val;
} ism_c;

/* Quicksort (median of three, the smaller side first on an explicit stack)
   down to runs of 24, then insertion sort: no comparator calls. */
#define SPINDLE_SORT(NAME, T, KEY, CTX)                                                     \
    static inline void NAME(T *x, int64_t n, CTX) {                                          \
        int64_t stack[128];                                                                 \
        int64_t top = 0, lo = 0, hi = n - 1;                                                \
        for (;;) {                                                                          \
            while (hi - lo > 24) {                                                          \
                const int64_t mid = lo + (hi - lo) / 2;                                     \
                const int64_t a = KEY(x[lo]), b = KEY(x[mid]), c = KEY(x[hi]);              \
                const int64_t pivot =                                                       \
                    a < b ? (b < c ? b : (a < c ? c : a)) : (a < c ? a : (b < c ? c : b));  \
                int64_t i = lo, j = hi;                                                     \
                while (i <= j) {                                                            \
                    while (KEY(x[i]) < pivot) i++;                                          \
                    while (KEY(x[j]) > pivot) j--;                                          \
                    if (i <= j) {                                                           \
                        const T t = x[i];                                                   \
                        x[i] = x[j];                                                        \
                        x[j] = t;                                                           \
                        i++;                                                                \
                        j--;                                                                \
                    }                                                                       \
                }                                                                           \
                if (j - lo < hi - i) {                                                      \
                    stack[top++] = i;                                                       \
                    stack[top++] = hi;                                                      \
                    hi = j;                                                                 \
                } else {                                                                    \
                    stack[top++] = lo;                                                      \
                    stack[top++] = j;                                                       \
                    lo = i;                                                                 \
                }                                                                           \
            }                                                                               \
            for (int64_t a = lo + 1; a <= hi; a++) {                                        \
                const T v = x[a];                                                           \
                int64_t b = a - 1;                                                          \
                while (b >= lo && KEY(x[b]) > KEY(v)) {                                     \
                    x[b + 1] = x[b];                                                        \
                    b--;                                                                    \
                }                                                                           \
                x[b + 1] = v;                                                               \
            }                                                                               \
            if (top == 0) break;                                                            \
            hi = stack[--top];                                                              \
            lo = stack[--top];                                                              \
        }                                                                                   \
    }

#define ISM_SELF(x) (x)
#define ISM_KEY(x) ((x).key)
#define ISM_ID_KEY(x) (ctx[x].key)
SPINDLE_SORT(spindle_sort_i64_, int64_t, ISM_SELF, const void *unused)
SPINDLE_SORT(ism_sort_c_, ism_c, ISM_KEY, const void *unused)
SPINDLE_SORT(ism_sort_ids_, int32_t, ISM_ID_KEY, const ism_c *ctx)

static inline void spindle_sort_i64(int64_t *x, int64_t n) { spindle_sort_i64_(x, n, 0); }

/* Grows `*p` (of `*cap` elements of `size` bytes) to hold at least `need`. */
static inline void ism_reserve(void **p, int64_t *cap, int64_t need, size_t size) {
    if (need <= *cap) return;
    int64_t c = *cap ? *cap : 64;
    while (c < need) c *= 2;
    *p = ism_realloc(*p, (size_t)c * size);
    *cap = c;
}

/* Sums neighbours with equal labels of a sorted run in place; its new length. */
static inline int64_t ism_sum_equal(ism_c *x, int64_t n) {
    int64_t m = 0;
    for (int64_t e = 0; e < n; e++) {
        if (m > 0 && x[m - 1].key == x[e].key) x[m - 1].val += x[e].val;
        else x[m++] = x[e];
    }
    return m;
}

/* The accumulation array of the chosen policy. */
typedef struct {
    int64_t n;   /* components held */
    int64_t cap; /* full at this many */
    int bits;    /* bits of the largest label */
    ism_c **tmp; /* the radix sort's second buffer: the ISM's spare all array, */
    int64_t *tmp_cap; /* free while a drain sorts */
    ism_c *c;    /* components: appended (Coord, Vector, Bucket) or sorted (Map) */
    int64_t c_cap;
#if ISM_HASH
    int64_t *keys;
    int32_t *used;    /* the occupied slots, in the order they were taken */
    int64_t *labels;  /* their labels, in the same order (the drain reads them in a row) */
    REAL *vals;
    int64_t slots;
#endif
#if ISM_BUCKET
    int64_t *head, *next, *flagged;
    int64_t next_cap, nflagged, buckets, div;
#endif
#if ISM_DENSE
    REAL *dv;
    uint8_t *flag;
    int64_t *list;
    int64_t range;
#endif
#if ISM_COORD && ISM_INDEXING
    int32_t *ids;
    int64_t ids_cap;
#endif
#if ISM_MAP
    ism_c **leaf;     /* sorted leaves, the first `nleaves` in label order; */
    int32_t *leaf_n;  /* those up to `nalloc` kept for the next gathering */
    int64_t nleaves, nalloc, leaf_cap, leaf_n_cap;
#endif
} ism_acc;

static inline void ism_acc_init(ism_acc *a, int64_t range, int64_t leading, int64_t cap) {
    memset(a, 0, sizeof *a);
    a->cap = cap;
    while (a->bits < 63 && ((int64_t)1 << a->bits) < range) a->bits++;
#if ISM_MAP || ISM_VECTOR || ISM_DENSE
    a->cap = INT64_MAX;
#endif
#if ISM_HASH
    a->slots = 2;
    while (a->slots < 2 * cap) a->slots *= 2;
    a->cap = a->slots / 2;
    a->keys = ism_malloc(a->slots * sizeof(int64_t));
    a->vals = ism_malloc(a->slots * sizeof(REAL));
    a->used = ism_malloc(a->cap * sizeof(int32_t));
    a->labels = ism_malloc(a->cap * sizeof(int64_t));
    for (int64_t s = 0; s < a->slots; s++) a->keys[s] = -1;
#endif
#if ISM_BUCKET
    a->buckets = leading;
    a->div = leading > 0 ? range / leading : 1;
    a->head = ism_malloc(leading * sizeof(int64_t));
    a->flagged = ism_malloc(leading * sizeof(int64_t));
    for (int64_t b = 0; b < leading; b++) a->head[b] = -1;
#endif
#if ISM_DENSE
    a->range = range;
    a->dv = ism_calloc(range, sizeof(REAL));
    a->flag = ism_calloc(range, 1);
    a->list = ism_malloc(range * sizeof(int64_t));
#endif
    (void)range;
    (void)leading;
}

static inline void ism_acc_free(ism_acc *a) {
    free(a->c);
#if ISM_HASH
    free(a->keys);
    free(a->vals);
    free(a->used);
    free(a->labels);
#endif
#if ISM_BUCKET
    free(a->head);
    free(a->next);
    free(a->flagged);
#endif
#if ISM_DENSE
    free(a->dv);
    free(a->flag);
    free(a->list);
#endif
#if ISM_COORD && ISM_INDEXING
    free(a->ids);
#endif
#if ISM_MAP
    for (int64_t l = 0; l < a->nalloc; l++) free(a->leaf[l]);
    free(a->leaf);
    free(a->leaf_n);
#endif
}

#if ISM_MAP
/* Map keeps its components sorted as they are inserted, in leaves of up to
   ISM_MAP_LEAF (a B+ tree of two levels): an insert searches the leaves'
   first labels, then its leaf, and moves at most a leaf. (One sorted array
   moved half of itself per insert: SpTTM on FROSTT med.tns gathered in 8.3
   s, Hash in 48 ms.) */
#define ISM_MAP_LEAF 128

/* An empty leaf at index `at` of the leaves: a kept one, or a new one. */
static inline ism_c *ism_map_new_leaf(ism_acc *a, int64_t at) {
    ism_reserve((void **)&a->leaf, &a->leaf_cap, a->nalloc + 1, sizeof(ism_c *));
    ism_reserve((void **)&a->leaf_n, &a->leaf_n_cap, a->nleaves + 1, sizeof(int32_t));
    ism_c *fresh;
    if (a->nleaves < a->nalloc) {
        fresh = a->leaf[a->nleaves];
    } else {
        fresh = ism_malloc(ISM_MAP_LEAF * sizeof(ism_c));
        a->nalloc++;
    }
    memmove(a->leaf + at + 1, a->leaf + at, (size_t)(a->nleaves - at) * sizeof(ism_c *));
    memmove(a->leaf_n + at + 1, a->leaf_n + at, (size_t)(a->nleaves - at) * sizeof(int32_t));
    a->leaf[at] = fresh;
    a->leaf_n[at] = 0;
    a->nleaves++;
    return fresh;
}

static inline void ism_map_insert(ism_acc *a, int64_t key, REAL val) {
    if (a->nleaves == 0) ism_map_new_leaf(a, 0);
    /* The last leaf whose first label is at most `key` (the first for a
       smaller one); only the first leaf can be empty, when it is the only. */
    int64_t l = 0, hi = a->nleaves - 1;
    while (l < hi) {
        const int64_t mid = (l + hi + 1) / 2;
        if (a->leaf[mid][0].key <= key) l = mid;
        else hi = mid - 1;
    }
    ism_c *c = a->leaf[l];
    int64_t n = a->leaf_n[l], p = 0, q = n;
    while (p < q) {
        const int64_t mid = (p + q) / 2;
        if (c[mid].key < key) p = mid + 1;
        else q = mid;
    }
    if (p < n && c[p].key == key) {
        c[p].val += val;
        return;
    }
    if (n == ISM_MAP_LEAF) {
        /* Split: the upper half moves to a new leaf after this one. */
        const int64_t half = n / 2;
        ism_c *right = ism_map_new_leaf(a, l + 1);
        memcpy(right, c + half, (size_t)(n - half) * sizeof(ism_c));
        a->leaf_n[l + 1] = (int32_t)(n - half);
        a->leaf_n[l] = (int32_t)half;
        if (p > half) {
            l++;
            c = right;
            p -= half;
        }
        n = a->leaf_n[l];
    }
    memmove(c + p + 1, c + p, (size_t)(n - p) * sizeof(ism_c));
    c[p].key = key;
    c[p].val = val;
    a->leaf_n[l]++;
    a->n++;
}
#endif

/* Bytes the accumulation array holds. */
static inline int64_t ism_acc_bytes(const ism_acc *a) {
    int64_t b = a->c_cap * (int64_t)sizeof(ism_c);
#if ISM_HASH
    b += a->slots * (int64_t)(sizeof(int64_t) + sizeof(REAL)) + a->cap * (int64_t)(sizeof(int32_t) + sizeof(int64_t));
#endif
#if ISM_BUCKET
    b += 2 * a->buckets * (int64_t)sizeof(int64_t) + a->next_cap * (int64_t)sizeof(int64_t);
#endif
#if ISM_DENSE
    b += a->range * (int64_t)(sizeof(REAL) + 1 + sizeof(int64_t));
#endif
#if ISM_COORD && ISM_INDEXING
    b += a->ids_cap * (int64_t)sizeof(int32_t);
#endif
#if ISM_MAP
    b += a->nalloc * ISM_MAP_LEAF * (int64_t)sizeof(ism_c) + a->leaf_cap * (int64_t)sizeof(ism_c *) +
         a->leaf_n_cap * (int64_t)sizeof(int32_t);
#endif
    return b;
}

/* Bits of the radix sort's digit for `n` components of `bits`-bit labels:
   about log2(n), so a short run does not pay for 256 counters a pass, at
   most 8, and the passes split the bits evenly. */
static inline int ism_digit_bits(int64_t n, int bits) {
    int d = 4;
    while (d < 8 && ((int64_t)1 << d) < n) d++;
    const int passes = (bits + d - 1) / d;
    return passes > 0 ? (bits + passes - 1) / passes : 1;
}

/* Sorts components by label: a comparison sort for short runs, else an
   LSD radix sort (branch-free, unlike a comparison sort on unpredictable
   keys) over the bits of the labels' span, so a run of nearby labels (a
   banded matrix's row) sorts in one pass; ping-pongs with *a->tmp. */
static inline void ism_sort_c(ism_acc *a, ism_c *x, int64_t n) {
    if (n <= 16 || a->bits > 40) {
        ism_sort_c_(x, n, 0);
        return;
    }
    int64_t lo = x[0].key, hi = x[0].key;
    for (int64_t e = 1; e < n; e++) {
        lo = x[e].key < lo ? x[e].key : lo;
        hi = x[e].key > hi ? x[e].key : hi;
    }
    int bits = 0;
    while (bits < 63 && ((hi - lo) >> bits) != 0) bits++;
    if (bits == 0) return;
    ism_reserve((void **)a->tmp, a->tmp_cap, n, sizeof(ism_c));
    ism_c *src = x, *dst = *a->tmp;
    const int d = ism_digit_bits(n, bits);
    const int64_t mask = ((int64_t)1 << d) - 1;
    for (int shift = 0; shift < bits; shift += d) {
        int64_t count[257];
        memset(count, 0, (size_t)(mask + 2) * sizeof(int64_t));
        for (int64_t e = 0; e < n; e++) count[(((src[e].key - lo) >> shift) & mask) + 1]++;
        for (int64_t b = 0; b < mask + 1; b++) count[b + 1] += count[b];
        for (int64_t e = 0; e < n; e++) dst[count[((src[e].key - lo) >> shift) & mask]++] = src[e];
        ism_c *t = src;
        src = dst;
        dst = t;
    }
    if (src != x) memcpy(x, src, n * sizeof(ism_c));
}
/* The same radix sort for accumulation ids (by their components' labels)
   and for plain labels; `spare` holds n more. */
#define ISM_RADIX(NAME, T, KEY)                                                                 \
    static inline void NAME(T *x, int64_t n, const ism_c *ctx, int bits, T *spare) {           \
        T *src = x, *dst = spare;                                                               \
        for (int shift = 0; shift < bits; shift += 8) {                                         \
            int64_t count[257] = {0};                                                           \
            for (int64_t e = 0; e < n; e++) count[((KEY(src[e]) >> shift) & 255) + 1]++;        \
            if (count[((KEY(src[0]) >> shift) & 255) + 1] == n) continue;                       \
            for (int d = 0; d < 256; d++) count[d + 1] += count[d];                             \
            for (int64_t e = 0; e < n; e++) dst[count[(KEY(src[e]) >> shift) & 255]++] = src[e]; \
            T *t = src;                                                                         \
            src = dst;                                                                          \
            dst = t;                                                                            \
        }                                                                                       \
        if (src != x) memcpy(x, src, n * sizeof(T));                                            \
        (void)ctx;                                                                              \
    }
ISM_RADIX(ism_radix_ids, int32_t, ISM_ID_KEY)
ISM_RADIX(ism_radix_i64, int64_t, ISM_SELF)

/* Ids by label: radix where long enough (*a->tmp lends its bytes). */
static inline void ism_sort_ids(ism_acc *a, int32_t *ids, int64_t n, const ism_c *c) {
    if (n <= 32 || a->bits > 40) {
        ism_sort_ids_(ids, n, c);
        return;
    }
    ism_reserve((void **)a->tmp, a->tmp_cap, n / 4 + 1, sizeof(ism_c));
    ism_radix_ids(ids, n, c, a->bits, (int32_t *)*a->tmp);
}

/* Labels: radix where long enough. */
static inline void ism_sort_labels(ism_acc *a, int64_t *x, int64_t n) {
    if (n <= 32 || a->bits > 40) {
        spindle_sort_i64(x, n);
        return;
    }
    ism_reserve((void **)a->tmp, a->tmp_cap, n / 2 + 1, sizeof(ism_c));
    ism_radix_i64(x, n, 0, a->bits, (int64_t *)*a->tmp);
}

static inline void ism_acc_insert(ism_acc *a, int64_t key, REAL val) {
#if ISM_COORD || ISM_VECTOR
    ism_reserve((void **)&a->c, &a->c_cap, a->n + 1, sizeof(ism_c));
    a->c[a->n].key = key;
    a->c[a->n].val = val;
    a->n++;
#elif ISM_HASH
    const int64_t mask = a->slots - 1;
    int64_t *restrict keys = a->keys;
    int64_t s = key & mask;
    int64_t k = keys[s];
    while (k != key && k != -1) {
        s = (s + 1) & mask;
        k = keys[s];
    }
    if (k == key) {
        a->vals[s] += val;
    } else {
        keys[s] = key;
        a->vals[s] = val;
        a->used[a->n] = (int32_t)s;
        a->labels[a->n++] = key;
    }
#elif ISM_BUCKET
    const int64_t b = key / a->div;
    for (int64_t id = a->head[b]; id >= 0; id = a->next[id]) {
        if (a->c[id].key == key) {
            a->c[id].val += val;
            return;
        }
    }
    if (a->head[b] < 0) a->flagged[a->nflagged++] = b;
    ism_reserve((void **)&a->c, &a->c_cap, a->n + 1, sizeof(ism_c));
    ism_reserve((void **)&a->next, &a->next_cap, a->n + 1, sizeof(int64_t));
    a->c[a->n].key = key;
    a->c[a->n].val = val;
    a->next[a->n] = a->head[b];
    a->head[b] = a->n++;
#elif ISM_MAP
    ism_map_insert(a, key, val);
#elif ISM_DENSE
    if (!a->flag[key]) {
        a->flag[key] = 1;
        a->list[a->n++] = key;
    }
    a->dv[key] += val;
#endif
}

#if ISM_HASH
/* The hash table's components into `out` by label, the table emptied; the
   labels are read in the order their slots were taken (`labels`), not
   through the slots. A run of up to 16 is sorted by comparisons. A longer
   one whose labels span at most 8 words of 64 per component (most rows of
   a graph's product) is placed by rank, counted in a bitmap of the span;
   failing that, one of up to 64 by rank counted by comparisons. Otherwise
   it sorts 8-byte words (its label's offset from the smallest, above its
   slot) by an LSD radix sort over the offsets' bits, then reads each value
   from its slot: half the bytes a pass of the components would move. */
static inline void ism_hash_drain(ism_acc *a, ism_c *out) {
    const int64_t n = a->n;
    if (n <= 16 || a->bits > 32) {
        for (int64_t e = 0; e < n; e++) {
            const int64_t s = a->used[e];
            out[e].key = a->labels[e];
            out[e].val = a->vals[s];
            a->keys[s] = -1;
        }
        ism_sort_c(a, out, n);
        return;
    }
    const int64_t *labels = a->labels;
    int64_t lo = labels[0], hi = lo;
    for (int64_t e = 1; e < n; e++) {
        const int64_t k = labels[e];
        lo = k < lo ? k : lo;
        hi = k > hi ? k : hi;
    }
    const int64_t words = (hi - lo) / 64 + 1;
    if (words <= 8 * n) {
        /* Each label's place is the number of labels below it, read from a
           bitmap of the span: the set bits of the words before its own
           (a prefix count per word) and of its word below it. No compare
           depends on another and nothing is probed again. */
        ism_reserve((void **)a->tmp, a->tmp_cap, words * 3 / 4 + 1, sizeof(ism_c));
        uint64_t *bitmap = (uint64_t *)*a->tmp;
        int32_t *before = (int32_t *)(bitmap + words);
        memset(bitmap, 0, (size_t)words * sizeof(uint64_t));
        for (int64_t e = 0; e < n; e++) {
            const int64_t off = labels[e] - lo;
            bitmap[off >> 6] |= (uint64_t)1 << (off & 63);
        }
        int32_t total = 0;
        for (int64_t w = 0; w < words; w++) {
            before[w] = total;
            total += __builtin_popcountll(bitmap[w]);
        }
        for (int64_t e = 0; e < n; e++) {
            const int64_t s = a->used[e];
            const int64_t key = labels[e];
            const int64_t off = key - lo;
            const uint64_t below = bitmap[off >> 6] & (((uint64_t)1 << (off & 63)) - 1);
            const int64_t rank = before[off >> 6] + __builtin_popcountll(below);
            out[rank].key = key;
            out[rank].val = a->vals[s];
            a->keys[s] = -1;
        }
        return;
    }
    if (n <= 64 && a->bits <= 31) {
        /* A short run by rank: each label's place is the number of labels
           below it (distinct labels), counted by comparisons the compiler
           vectorizes: no branch to mispredict, no counters to clear. */
        int32_t k[64];
        for (int64_t e = 0; e < n; e++) k[e] = (int32_t)labels[e];
        for (int64_t e = 0; e < n; e++) {
            const int32_t key = k[e];
            int32_t rank = 0;
            for (int64_t j = 0; j < n; j++) rank += k[j] < key;
            const int64_t s = a->used[e];
            out[rank].key = key;
            out[rank].val = a->vals[s];
            a->keys[s] = -1;
        }
        return;
    }
    int bits = 0;
    while (bits < 32 && ((hi - lo) >> bits) != 0) bits++;
    ism_reserve((void **)a->tmp, a->tmp_cap, n, sizeof(ism_c));
    uint64_t *src = (uint64_t *)*a->tmp, *dst = src + n;
    for (int64_t e = 0; e < n; e++) {
        const int64_t s = a->used[e];
        src[e] = (uint64_t)(labels[e] - lo) << 32 | (uint64_t)s;
    }
    const int d = ism_digit_bits(n, bits);
    const uint64_t mask = ((uint64_t)1 << d) - 1;
    for (int shift = 32; shift < 32 + bits; shift += d) {
        int64_t count[257];
        memset(count, 0, (size_t)(mask + 2) * sizeof(int64_t));
        for (int64_t e = 0; e < n; e++) count[((src[e] >> shift) & mask) + 1]++;
        for (uint64_t b = 0; b < mask + 1; b++) count[b + 1] += count[b];
        for (int64_t e = 0; e < n; e++) dst[count[(src[e] >> shift) & mask]++] = src[e];
        uint64_t *t = src;
        src = dst;
        dst = t;
    }
    for (int64_t e = 0; e < n; e++) {
        const int64_t s = (int64_t)(src[e] & 0xffffffffu);
        out[e].key = lo + (int64_t)(src[e] >> 32);
        out[e].val = a->vals[s];
        a->keys[s] = -1;
    }
}
#endif

/* Sorts the accumulation array into `out` (room for a->n), each label once;
   empties it. Returns the components written. */
static inline int64_t ism_acc_drain(ism_acc *a, ism_c *out) {
    int64_t m = 0;
#if ISM_COORD && ISM_INDEXING
    /* Accumulation indexing: sort 4-byte ids, not the components. */
    ism_reserve((void **)&a->ids, &a->ids_cap, a->n, sizeof(int32_t));
    for (int64_t e = 0; e < a->n; e++) a->ids[e] = (int32_t)e;
    ism_sort_ids(a, a->ids, a->n, a->c);
    for (int64_t e = 0; e < a->n; e++) out[e] = a->c[a->ids[e]];
    m = ism_sum_equal(out, a->n);
#elif ISM_COORD || ISM_VECTOR
    ism_sort_c(a, a->c, a->n);
    memcpy(out, a->c, a->n * sizeof(ism_c));
    m = ism_sum_equal(out, a->n);
#elif ISM_HASH
    ism_hash_drain(a, out);
    m = a->n;
#elif ISM_BUCKET
    ism_sort_labels(a, a->flagged, a->nflagged);
    for (int64_t f = 0; f < a->nflagged; f++) {
        const int64_t b = a->flagged[f];
        const int64_t start = m;
        for (int64_t id = a->head[b]; id >= 0; id = a->next[id]) out[m++] = a->c[id];
        ism_sort_c(a, out + start, m - start);
        a->head[b] = -1;
    }
    a->nflagged = 0;
#elif ISM_MAP
    for (int64_t l = 0; l < a->nleaves; l++) {
        memcpy(out + m, a->leaf[l], (size_t)a->leaf_n[l] * sizeof(ism_c));
        m += a->leaf_n[l];
    }
    a->nleaves = 0;
#elif ISM_DENSE
    if (a->n * 16 > a->range) {
        for (int64_t k = 0; k < a->range; k++) {
            if (a->flag[k]) {
                out[m].key = k;
                out[m++].val = a->dv[k];
                a->flag[k] = 0;
                a->dv[k] = 0;
            }
        }
    } else {
        ism_sort_labels(a, a->list, a->n);
        for (int64_t e = 0; e < a->n; e++) {
            const int64_t k = a->list[e];
            out[m].key = k;
            out[m++].val = a->dv[k];
            a->flag[k] = 0;
            a->dv[k] = 0;
        }
    }
#endif
    a->n = 0;
    return m;
}

/* Empties the accumulation array without sorting it (what a count needs). */
static inline void ism_acc_reset(ism_acc *a) {
#if ISM_HASH
    for (int64_t e = 0; e < a->n; e++) a->keys[a->used[e]] = -1;
#elif ISM_BUCKET
    for (int64_t f = 0; f < a->nflagged; f++) a->head[a->flagged[f]] = -1;
    a->nflagged = 0;
#elif ISM_DENSE
    for (int64_t e = 0; e < a->n; e++) {
        a->flag[a->list[e]] = 0;
        a->dv[a->list[e]] = 0;
    }
#elif ISM_MAP
    a->nleaves = 0;
#endif
    a->n = 0;
}

/* The capacity after a merge: piecewise-linear growth (quick while small,
   slower as it grows, bounded), as spindle_workspaces::ism::next_capacity. */
static inline int64_t ism_next_capacity(int64_t c) {
    if (c < 4096) return c * 4;
    if (c < 262144) return c * 2;
    const int64_t n = c + c / 4;
    return n < ((int64_t)1 << 24) ? n : ((int64_t)1 << 24);
}

static inline void ism_acc_set_capacity(ism_acc *a, int64_t cap) {
#if ISM_HASH
    int64_t slots = 2;
    while (slots < 2 * cap) slots *= 2;
    if (slots > a->slots) {
        free(a->keys);
        free(a->vals);
        free(a->used);
        free(a->labels);
        a->slots = slots;
        a->keys = ism_malloc(slots * sizeof(int64_t));
        a->vals = ism_malloc(slots * sizeof(REAL));
        a->used = ism_malloc(slots / 2 * sizeof(int32_t));
        a->labels = ism_malloc(slots / 2 * sizeof(int64_t));
        for (int64_t s = 0; s < slots; s++) a->keys[s] = -1;
    }
    a->cap = a->slots / 2;
#elif ISM_COORD || ISM_BUCKET
    a->cap = cap;
#else
    (void)a;
    (void)cap;
#endif
}

/* An ISM workspace: two accumulation arrays (the second only when
   pipelined), the all array and its spare, the batch being merged. */
typedef struct {
    ism_acc acc[2];
    int cur;
    ism_c *all, *spare, *batch;
    int64_t all_n, all_cap, spare_cap, batch_cap;
    int64_t peak, merges;
#if ISM_PIPELINE
    /* A merge thread started at the first merge, woken per merge. */
    pthread_t worker;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    int started, pending, quit, merging;
#endif
} spindle_ism;

/* Bytes held: the all arrays, the batch, and the accumulation arrays as
   large as `a` (read only by the thread that merges `a`). */
static inline int64_t ism_bytes(const spindle_ism *w, const ism_acc *a) {
    return (1 + ISM_PIPELINE) * ism_acc_bytes(a) + (w->all_cap + w->spare_cap + w->batch_cap) * (int64_t)sizeof(ism_c);
}

/* Labels below `range`, `leading` values of the first gathered coordinate,
   an accumulation array full at `cap` components to begin with. */
static inline void spindle_ism_init(spindle_ism *w, int64_t range, int64_t leading, int64_t cap) {
    memset(w, 0, sizeof *w);
    for (int i = 0; i < 1 + ISM_PIPELINE; i++) {
        ism_acc_init(&w->acc[i], range, leading, cap);
        w->acc[i].tmp = &w->spare;
        w->acc[i].tmp_cap = &w->spare_cap;
    }
}

/* Two arrays trade places, with their capacities. */
static inline void ism_swap(ism_c **a, int64_t *a_cap, ism_c **b, int64_t *b_cap) {
    ism_c *t = *a;
    *a = *b;
    *b = t;
    const int64_t c = *a_cap;
    *a_cap = *b_cap;
    *b_cap = c;
}

/* Sorts accumulation array `a` and merges it into the all array. */
/* Out of line: the insert loop stays small. */
__attribute__((noinline)) static void ism_merge(spindle_ism *w, ism_acc *a) {
    const int full = a->n >= a->cap;
    ism_reserve((void **)&w->batch, &w->batch_cap, a->n, sizeof(ism_c));
    const int64_t n = ism_acc_drain(a, w->batch);
    if (w->all_n == 0 && ISM_DOUBLE_BUFFER) {
        ism_swap(&w->all, &w->all_cap, &w->batch, &w->batch_cap);
        w->all_n = n;
    } else {
        ism_reserve((void **)&w->spare, &w->spare_cap, w->all_n + n, sizeof(ism_c));
        int64_t i = 0, j = 0, m = 0;
        while (i < w->all_n && j < n) {
            if (w->all[i].key < w->batch[j].key) w->spare[m++] = w->all[i++];
            else if (w->all[i].key > w->batch[j].key) w->spare[m++] = w->batch[j++];
            else {
                w->spare[m] = w->all[i++];
                w->spare[m++].val += w->batch[j++].val;
            }
        }
        while (i < w->all_n) w->spare[m++] = w->all[i++];
        while (j < n) w->spare[m++] = w->batch[j++];
        if (ISM_DOUBLE_BUFFER) {
            ism_swap(&w->all, &w->all_cap, &w->spare, &w->spare_cap);
        } else {
            /* One all array: the merge went to a temporary, copied back. */
            ism_reserve((void **)&w->all, &w->all_cap, m, sizeof(ism_c));
            memcpy(w->all, w->spare, m * sizeof(ism_c));
        }
        w->all_n = m;
    }
    w->merges++;
    /* An array that filled grows, from the capacity it filled (a batch of
       repeated labels is shorter); a last, partial one keeps its size, and
       the policies that are never full keep theirs. */
    if (ISM_REALLOC && full && (ISM_BUCKET || ISM_HASH || ISM_COORD)) ism_acc_set_capacity(a, ism_next_capacity(a->cap));
    const int64_t b = ism_bytes(w, a);
    if (b > w->peak) w->peak = b;
}

#if ISM_PIPELINE
/* Accumulation arrays shorter than ISM_PIPELINE_MIN are merged by the
   inserting thread. */
#ifndef ISM_PIPELINE_MIN
#define ISM_PIPELINE_MIN ((int64_t)1 << 15)
#endif

/* The merge thread: waits for a posted array, merges it, says so. */
static void *ism_worker(void *arg) {
    spindle_ism *w = arg;
    pthread_mutex_lock(&w->lock);
    for (;;) {
        while (!w->pending && !w->quit) pthread_cond_wait(&w->wake, &w->lock);
        if (!w->pending) break;
        pthread_mutex_unlock(&w->lock);
        ism_merge(w, &w->acc[w->merging]);
        pthread_mutex_lock(&w->lock);
        w->pending = 0;
        pthread_cond_broadcast(&w->wake);
    }
    pthread_mutex_unlock(&w->lock);
    return 0;
}

/* Waits until the posted merge is done. */
static inline void ism_wait(spindle_ism *w) {
    if (!w->started) return;
    pthread_mutex_lock(&w->lock);
    while (w->pending) pthread_cond_wait(&w->wake, &w->lock);
    pthread_mutex_unlock(&w->lock);
}

/* Hands accumulation array `m` to the merge thread (started on first use;
   merged here if it cannot start). */
static inline void ism_post(spindle_ism *w, int m) {
    if (!w->started) {
        pthread_mutex_init(&w->lock, 0);
        pthread_cond_init(&w->wake, 0);
        w->started = pthread_create(&w->worker, 0, ism_worker, w) == 0;
        if (!w->started) {
            pthread_mutex_destroy(&w->lock);
            pthread_cond_destroy(&w->wake);
            ism_merge(w, &w->acc[m]);
            return;
        }
    }
    pthread_mutex_lock(&w->lock);
    w->merging = m;
    w->pending = 1;
    pthread_cond_broadcast(&w->wake);
    pthread_mutex_unlock(&w->lock);
}
#endif

static inline void spindle_ism_insert(spindle_ism *w, int64_t key, REAL val) {
#if ISM_PIPELINE
    ism_acc *a = &w->acc[w->cur];
#else
    ism_acc *a = &w->acc[0];
#endif
#if ISM_HASH
    /* A label already held (most inserts, where rows repeat columns) is
       one probe and an add; a new one claims the empty slot the probe
       ended on, unless the table is full. */
    {
        const int64_t mask = a->slots - 1;
        int64_t s = key & mask;
        int64_t k = a->keys[s];
        while (k != key && k != -1) {
            s = (s + 1) & mask;
            k = a->keys[s];
        }
        if (k == key) {
            a->vals[s] += val;
            return;
        }
        if (a->n < a->cap) {
            a->keys[s] = key;
            a->vals[s] = val;
            a->used[a->n] = (int32_t)s;
            a->labels[a->n++] = key;
            return;
        }
    }
#endif
    if (a->n >= a->cap) {
#if ISM_PIPELINE
        /* The full array is sorted and merged on a second thread while
           inserts go on into the other one. */
        /* Short arrays merge here: a hand-off costs more than their sort. */
        ism_wait(w);
        if (a->n >= ISM_PIPELINE_MIN) {
            ism_post(w, w->cur);
            w->cur ^= 1;
            a = &w->acc[w->cur];
        } else {
            ism_merge(w, a);
        }
#else
        ism_merge(w, a);
#endif
    }
    ism_acc_insert(a, key, val);
}

/* Merges what is left: the components are then w->all[0 .. w->all_n],
   sorted by label, each label once. */
static inline void spindle_ism_finish(spindle_ism *w) {
#if ISM_PIPELINE
    ism_wait(w);
    if (w->acc[w->cur ^ 1].n) ism_merge(w, &w->acc[w->cur ^ 1]);
#endif
    if (w->acc[w->cur].n) ism_merge(w, &w->acc[w->cur]);
    const int64_t b = ism_bytes(w, &w->acc[w->cur]);
    if (b > w->peak) w->peak = b;
}

/* The distinct labels inserted since the last clear, the workspace left
   empty: without a sort where the policy deduplicated every insert and
   nothing was merged yet. */
static inline int64_t spindle_ism_distinct(spindle_ism *w) {
#if ISM_HASH || ISM_BUCKET || ISM_MAP || ISM_DENSE
#if ISM_PIPELINE
    ism_wait(w);
    if (w->all_n == 0 && w->acc[w->cur ^ 1].n == 0) {
#else
    if (w->all_n == 0) {
#endif
        const int64_t n = w->acc[w->cur].n;
        ism_acc_reset(&w->acc[w->cur]);
        return n;
    }
#endif
    spindle_ism_finish(w);
    return w->all_n;
}

/* Empties the all array for the next gathering (capacities kept). */
static inline void spindle_ism_clear(spindle_ism *w) { w->all_n = 0; }

static inline void spindle_ism_free(spindle_ism *w) {
#if ISM_PIPELINE
    if (w->started) {
        pthread_mutex_lock(&w->lock);
        w->quit = 1;
        pthread_cond_broadcast(&w->wake);
        pthread_mutex_unlock(&w->lock);
        pthread_join(w->worker, 0);
        pthread_mutex_destroy(&w->lock);
        pthread_cond_destroy(&w->wake);
    }
    ism_acc_free(&w->acc[1]);
#endif
    ism_acc_free(&w->acc[0]);
    free(w->all);
    free(w->spare);
    free(w->batch);
}

/* The count phase's gatherings kept for the fill phase. The count phase
   computes each gathering's entries (sorted, each label once) and keeps
   them; the fill phase copies them into the output's arrays, once those
   are sized, instead of inserting every contribution a second time. Each
   thread keeps its gatherings in order in chunks that never move (a
   chunk of a few MB comes back from malloc's heap on the next run, where
   one growing array would be mapped and faulted in page by page each
   time); a gathering is found by its row (the outermost loop's iteration,
   which the fill may run on another thread) and its number within the
   row. */
#define ISM_KEEP_CHUNK ((int64_t)1 << 17)

typedef struct ism_chunk {
    struct ism_chunk *prev;
    int64_t cap, n;
    ism_c entries[];
} ism_chunk;

/* Chunks of earlier launches, kept for the next (up to ISM_POOL_BYTES):
   malloc hands chunks this large out of fresh mappings, faulted in page
   by page on every launch. */
#define ISM_POOL_BYTES ((int64_t)1 << 28)
static ism_chunk *ism_pool;
static int64_t ism_pool_bytes;

/* A chunk of at least `cap` entries: from the pool, else new. */
static ism_chunk *ism_chunk_get(int64_t cap) {
    ism_chunk *c = 0;
#pragma omp critical(ism_pool)
    {
        for (ism_chunk **at = &ism_pool; *at; at = &(*at)->prev) {
            if ((*at)->cap >= cap) {
                c = *at;
                *at = c->prev;
                ism_pool_bytes -= c->cap * (int64_t)sizeof(ism_c);
                break;
            }
        }
    }
    if (!c) {
        c = ism_malloc(sizeof(ism_chunk) + (size_t)cap * sizeof(ism_c));
        c->cap = cap;
    }
    c->n = 0;
    return c;
}

/* Returns a chunk to the pool, or frees it when the pool is full. */
static void ism_chunk_put(ism_chunk *c) {
    int kept = 0;
#pragma omp critical(ism_pool)
    {
        if (ism_pool_bytes + c->cap * (int64_t)sizeof(ism_c) <= ISM_POOL_BYTES) {
            c->prev = ism_pool;
            ism_pool = c;
            ism_pool_bytes += c->cap * (int64_t)sizeof(ism_c);
            kept = 1;
        }
    }
    if (!kept) free(c);
}

typedef struct {
    ism_chunk *chunk; /* the newest; older ones by prev */
    const ism_c **at; /* where each gathering starts */
    int64_t *len;     /* and its entries */
    int64_t gathered, cap;
} ism_kept;

typedef struct {
    int threads;
    int32_t *thread_of; /* per row: the thread that gathered it */
    int64_t *first;     /* per row: its first gathering on that thread */
    ism_kept *kept;     /* per thread */
} spindle_keep;

/* The calling thread's number in its parallel region. */
static inline int spindle_thread(void) {
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

static inline spindle_keep *spindle_keep_new(int64_t rows, int64_t threads) {
    spindle_keep *k = ism_calloc(1, sizeof *k);
    k->threads = threads > 0 ? (int)threads : 1;
    k->thread_of = ism_calloc(rows > 0 ? rows : 1, sizeof(int32_t));
    k->first = ism_calloc(rows > 0 ? rows : 1, sizeof(int64_t));
    k->kept = ism_calloc(k->threads, sizeof(ism_kept));
    return k;
}

/* Row `row` starts on thread `t`: its gatherings follow. */
static inline void spindle_keep_row(spindle_keep *k, int t, int64_t row) {
    k->thread_of[row] = t;
    k->first[row] = k->kept[t].gathered;
}

/* Room for the next gathering of thread `t`, up to `n` entries. */
static inline ism_c *spindle_keep_open(spindle_keep *k, int t, int64_t n) {
    ism_kept *p = &k->kept[t];
    if (!p->chunk || p->chunk->n + n > p->chunk->cap) {
        ism_chunk *c = ism_chunk_get(n > ISM_KEEP_CHUNK ? n : ISM_KEEP_CHUNK);
        c->prev = p->chunk;
        p->chunk = c;
    }
    return p->chunk->entries + p->chunk->n;
}

/* The gathering opened at `at` holds `n` entries. */
static inline void spindle_keep_close(spindle_keep *k, int t, const ism_c *at, int64_t n) {
    ism_kept *p = &k->kept[t];
    p->chunk->n += n;
    if (p->gathered == p->cap) {
        p->cap = p->cap ? 2 * p->cap : 1024;
        p->at = ism_realloc(p->at, (size_t)p->cap * sizeof *p->at);
        p->len = ism_realloc(p->len, (size_t)p->cap * sizeof *p->len);
    }
    p->at[p->gathered] = at;
    p->len[p->gathered++] = n;
}

/* Ends a gathering of `w` on thread `t` and keeps it: its entries, and
   their number in `*n`. Where one accumulation array holds them all (no
   merge yet), they are drained straight into the kept chunk. */
static inline const ism_c *spindle_ism_keep(spindle_ism *w, spindle_keep *k, int t, int64_t *n) {
#if !ISM_PIPELINE
    ism_acc *a = &w->acc[0];
    if (w->all_n == 0) {
        ism_c *to = spindle_keep_open(k, t, a->n);
        *n = ism_acc_drain(a, to);
        const int64_t b = ism_bytes(w, a);
        if (b > w->peak) w->peak = b;
        spindle_keep_close(k, t, to, *n);
        return to;
    }
#endif
    spindle_ism_finish(w);
    ism_c *to = spindle_keep_open(k, t, w->all_n);
    if (w->all_n > 0) memcpy(to, w->all, (size_t)w->all_n * sizeof(ism_c));
    spindle_keep_close(k, t, to, w->all_n);
    *n = w->all_n;
    return to;
}

/* Gathering `nth` of row `row`: its entries, and their number in `*n`. */
static inline const ism_c *spindle_keep_get(const spindle_keep *k, int64_t row, int64_t nth, int64_t *n) {
    const ism_kept *p = &k->kept[k->thread_of[row]];
    const int64_t g = k->first[row] + nth;
    *n = p->len[g];
    return p->at[g];
}

static inline void spindle_keep_free(spindle_keep *k) {
    if (!k) return;
    for (int t = 0; t < k->threads; t++) {
        for (ism_chunk *c = k->kept[t].chunk; c;) {
            ism_chunk *prev = c->prev;
            ism_chunk_put(c);
            c = prev;
        }
        free(k->kept[t].at);
        free(k->kept[t].len);
    }
    free(k->kept);
    free(k->thread_of);
    free(k->first);
    free(k);
}
