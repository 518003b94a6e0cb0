#define _POSIX_C_SOURCE 199309L
// Paper 003's Listing 1 by hand: SDDMM A[i,j] = B[i,j] * (C[i,k] * D[k,j])
// as TACO fuses it (the multiply by B inside the k loop) and as ReACT does
// (the sum over k first, then one multiply by B), each at the listing's
// loop order (i, k, j over B's row) and at i, j, k, with A in B's pattern.
// It measures what removing the reduction redundancy is worth on this
// machine, apart from any code generator. Built and run by
// sddmm_listing1.sh; one thread, f64, medians of 9, A zeroed outside the
// clock.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifndef NK
#define NK 16
#endif

typedef struct { int64_t i, j; double v; } Entry;

static int by_row(const void *a, const void *b) {
    const Entry *x = a, *y = b;
    if (x->i != y->i) return x->i < y->i ? -1 : 1;
    return (x->j > y->j) - (x->j < y->j);
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static int64_t ni, nj, nnz;
static int32_t *pos, *crd;
static double *val;

// A MatrixMarket coordinate file (general or symmetric, real, integer or
// pattern) into CSR, duplicates summed.
static void load(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) { perror(path); exit(1); }
    char line[1024];
    if (!fgets(line, sizeof line, f)) exit(1);
    int symmetric = strstr(line, "symmetric") != NULL, pattern = strstr(line, "pattern") != NULL;
    while (fgets(line, sizeof line, f) && line[0] == '%') {}
    int64_t n;
    sscanf(line, "%ld %ld %ld", &ni, &nj, &n);
    Entry *e = malloc(sizeof(Entry) * 2 * n);
    int64_t m = 0;
    for (int64_t t = 0; t < n; t++) {
        int64_t i, j;
        double v = 1;
        if (pattern ? fscanf(f, "%ld %ld", &i, &j) != 2 : fscanf(f, "%ld %ld %lf", &i, &j, &v) != 3) exit(1);
        e[m++] = (Entry){i - 1, j - 1, v};
        if (symmetric && i != j) e[m++] = (Entry){j - 1, i - 1, v};
    }
    fclose(f);
    qsort(e, m, sizeof(Entry), by_row);
    pos = calloc(ni + 1, sizeof(int32_t));
    crd = malloc(sizeof(int32_t) * m);
    val = malloc(sizeof(double) * m);
    nnz = 0;
    for (int64_t t = 0; t < m; t++) {
        if (nnz && e[t].i == e[nnz - 1].i && e[t].j == e[nnz - 1].j) { val[nnz - 1] += e[t].v; continue; }
        e[nnz] = e[t];
        crd[nnz] = (int32_t)e[t].j;
        val[nnz] = e[t].v;
        pos[e[t].i + 1]++;
        nnz++;
    }
    for (int64_t i = 0; i < ni; i++) pos[i + 1] += pos[i];
    free(e);
}

typedef void Kernel(const double *restrict C, const double *restrict D, double *restrict A, double *restrict T);

// TACO, i, j, k: B multiplied in every step of the sum.
static void taco_ijk(const double *restrict C, const double *restrict D, double *restrict A, double *restrict T) {
    (void)T;
    for (int64_t i = 0; i < ni; i++)
        for (int64_t p = pos[i]; p < pos[i + 1]; p++) {
            double acc = 0;
            for (int64_t k = 0; k < NK; k++) acc += val[p] * (C[i * NK + k] * D[k * nj + crd[p]]);
            A[p] = acc;
        }
}

// ReACT, i, j, k: the sum a scalar, then one multiply.
static void react_ijk(const double *restrict C, const double *restrict D, double *restrict A, double *restrict T) {
    (void)T;
    for (int64_t i = 0; i < ni; i++)
        for (int64_t p = pos[i]; p < pos[i + 1]; p++) {
            double t = 0;
            for (int64_t k = 0; k < NK; k++) t += C[i * NK + k] * D[k * nj + crd[p]];
            A[p] = val[p] * t;
        }
}

// TACO, Listing 1's order i, k, j: A in B's pattern updated per k.
static void taco_ikj(const double *restrict C, const double *restrict D, double *restrict A, double *restrict T) {
    (void)T;
    for (int64_t i = 0; i < ni; i++)
        for (int64_t k = 0; k < NK; k++) {
            const double c = C[i * NK + k];
            for (int64_t p = pos[i]; p < pos[i + 1]; p++) A[p] += val[p] * c * D[k * nj + crd[p]];
        }
}

// ReACT, Listing 1's order: the row's sums in T, then one multiply each.
static void react_ikj(const double *restrict C, const double *restrict D, double *restrict A, double *restrict T) {
    for (int64_t i = 0; i < ni; i++) {
        const int64_t p0 = pos[i], n = pos[i + 1] - p0;
        for (int64_t q = 0; q < n; q++) T[q] = 0;
        for (int64_t k = 0; k < NK; k++) {
            const double c = C[i * NK + k];
            for (int64_t q = 0; q < n; q++) T[q] += c * D[k * nj + crd[p0 + q]];
        }
        for (int64_t q = 0; q < n; q++) A[p0 + q] = val[p0 + q] * T[q];
    }
}

static int by_value(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc != 2) { fprintf(stderr, "usage: %s MATRIX.mtx\n", argv[0]); return 2; }
    load(argv[1]);
    double *C = malloc(sizeof(double) * ni * NK), *D = malloc(sizeof(double) * NK * nj);
    double *A = malloc(sizeof(double) * nnz), *T = malloc(sizeof(double) * (ni > nj ? ni : nj));
    srand(1);
    for (int64_t t = 0; t < ni * NK; t++) C[t] = 0.1 + rand() / (double)RAND_MAX;
    for (int64_t t = 0; t < NK * nj; t++) D[t] = 0.1 + rand() / (double)RAND_MAX;
    Kernel *kernels[4] = {taco_ijk, react_ijk, taco_ikj, react_ikj};
    double ms[4], sums[4];
    for (int q = 0; q < 4; q++) {
        double times[9];
        for (int r = 0; r < 10; r++) {
            memset(A, 0, sizeof(double) * nnz);
            const double t0 = now();
            kernels[q](C, D, A, T);
            if (r > 0) times[r - 1] = now() - t0;
        }
        qsort(times, 9, sizeof(double), by_value);
        ms[q] = times[4] * 1e3;
        sums[q] = 0;
        for (int64_t t = 0; t < nnz; t++) sums[q] += A[t];
    }
    const char *name = strrchr(argv[1], '/') ? strrchr(argv[1], '/') + 1 : argv[1];
    double worst = 0;
    for (int q = 1; q < 4; q++) {
        const double d = (sums[q] - sums[0]) / sums[0];
        worst = d < 0 ? (-d > worst ? -d : worst) : (d > worst ? d : worst);
    }
    printf("%-28s NK=%-3d taco_ijk %8.3f react_ijk %8.3f taco_ikj %8.3f react_ikj %8.3f ms | "
           "taco/react i,j,k %.2f  i,k,j %.2f | agree %.0e\n",
           name, NK, ms[0], ms[1], ms[2], ms[3], ms[0] / ms[1], ms[2] / ms[3], worst);
    return 0;
}
