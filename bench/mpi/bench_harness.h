/*
 * What the Open MPI baselines (allreduce_bench.c, pingpong_bench.c) share: error checks, argument
 * parsing, the calibration that fits each size into a time budget, and the statistics line that
 * the Java report generators read:
 *
 *     bytes=1024 mean_us=1.23 median_us=1.10 min_us=1.01 iters=200000
 *
 * Header-only (static functions): each benchmark is one translation unit, built by run.sh.
 */
#ifndef SYMMEM4J_BENCH_HARNESS_H
#define SYMMEM4J_BENCH_HARNESS_H

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    MIN_ITERS = 5,         /* floor for the slowest (largest) sizes */
    MAX_ITERS = 1000000,   /* bounds the per-iteration timing array (8 MB) */
    PATTERN_PERIOD = 251,  /* small prime: data varies along the buffer */
};

/* Calibration stops once one batch takes at least this share of the budget,
 * long enough for its mean to be a stable per-iteration estimate. */
static const double CALIBRATION_SHARE = 0.05;
static const double DEFAULT_MAX_SECONDS = 1.0;

/* MPI_COMM_WORLD is switched to MPI_ERRORS_RETURN so failures land here with
 * a readable message instead of the default silent abort. */
#define CHECK_MPI(call)                                                      \
    do {                                                                     \
        int rc_ = (call);                                                    \
        if (rc_ != MPI_SUCCESS) {                                            \
            char msg_[MPI_MAX_ERROR_STRING];                                 \
            int len_ = 0;                                                    \
            MPI_Error_string(rc_, msg_, &len_);                              \
            fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__,    \
                    #call, msg_);                                            \
            MPI_Abort(MPI_COMM_WORLD, 1);                                    \
        }                                                                    \
    } while (0)

/* MPI_Init with errors returned to CHECK_MPI, and this process's rank and the world size. */
static void start_mpi(int *argc, char ***argv, int *rank, int *nranks)
{
    CHECK_MPI(MPI_Init(argc, argv));
    CHECK_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    CHECK_MPI(MPI_Comm_rank(MPI_COMM_WORLD, rank));
    CHECK_MPI(MPI_Comm_size(MPI_COMM_WORLD, nranks));
}

typedef struct {
    size_t *sizes;
    int size_count;
    double max_seconds;
} Options;

static void *xaligned_alloc(size_t bytes, size_t alignment)
{
    /* C11 aligned_alloc wants the size to be a multiple of the alignment. */
    size_t rounded = (bytes + alignment - 1) / alignment * alignment;
    void *p = aligned_alloc(alignment, rounded);
    if (p == NULL) {
        fprintf(stderr, "aligned_alloc(%zu) failed\n", rounded);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    return p;
}

/* Every rank parses the same argv, so every rank reaches the same verdict and
 * a bad argument ends all of them without any communication. `size_ok` says
 * whether a message size suits the benchmark. Returns 0 on a bad argument. */
static int parse_options(int argc, char **argv, Options *opt, const size_t *default_sizes,
                         int default_count, int (*size_ok)(unsigned long long bytes))
{
    opt->max_seconds = DEFAULT_MAX_SECONDS;
    opt->size_count = 0;
    opt->sizes = malloc(((size_t)default_count + (size_t)argc) * sizeof(size_t));
    if (opt->sizes == NULL)
        return 0;

    for (int i = 1; i < argc; i++) {
        char *end;
        if (strcmp(argv[i], "--max-seconds-per-size") == 0) {
            if (++i == argc)
                return 0;
            opt->max_seconds = strtod(argv[i], &end);
            if (*end != '\0' || !(opt->max_seconds > 0.0))
                return 0;
        } else {
            unsigned long long bytes = strtoull(argv[i], &end, 10);
            if (argv[i][0] == '-' || *end != '\0' || bytes == 0 || !size_ok(bytes))
                return 0;
            opt->sizes[opt->size_count++] = (size_t)bytes;
        }
    }
    if (opt->size_count == 0) {
        memcpy(opt->sizes, default_sizes, (size_t)default_count * sizeof(size_t));
        opt->size_count = default_count;
    }
    return 1;
}

/* One timed operation of a benchmark (an all-reduce, a round trip), on its own state. */
typedef void (*Operation)(void *state);

/* Runs a batch and returns the slowest rank's wall time; being agreed across
 * ranks, it lets all ranks make identical loop decisions. */
static double timed_batch(Operation op, void *state, long iters)
{
    double start = MPI_Wtime();
    for (long i = 0; i < iters; i++)
        op(state);
    double local = MPI_Wtime() - start, slowest;
    CHECK_MPI(MPI_Allreduce(&local, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
    return slowest;
}

/* Warms up (the first call page-faults the buffers into MPI's shared-memory
 * path and sets up protocol state) and picks the timed iteration count so the
 * whole size, warm-up included, fits the budget. */
static long choose_iters(Operation op, void *state, double budget)
{
    double spent = timed_batch(op, state, 1); /* cold call: never an estimate */
    double per_iter, batch_time;
    long batch = 1;
    do {
        batch_time = timed_batch(op, state, batch);
        spent += batch_time;
        per_iter = batch_time / (double)batch;
        batch *= 2;
    } while (batch_time < CALIBRATION_SHARE * budget);

    double iters = (budget - spent) / per_iter;
    if (iters < MIN_ITERS)
        return MIN_ITERS;
    if (iters > MAX_ITERS)
        return MAX_ITERS;
    return (long)iters;
}

/* The first line of MPI_Get_library_version, as the '# library=' header line. */
static void print_library_line(void)
{
    char version[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    CHECK_MPI(MPI_Get_library_version(version, &len));
    version[strcspn(version, "\n")] = '\0';
    printf("# library=%s\n", version);
}

static int compare_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median of n values; sorts them in place. The median is what the reports compare: on a shared
 * 2-vCPU VM some stretches run several times slower, and the median is robust to them. */
static double median(double *values, long n)
{
    qsort(values, (size_t)n, sizeof(double), compare_double);
    return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

/* The statistics line for one size, from per-iteration seconds (reordered: sorted). */
static void print_stats(size_t bytes, double *seconds, long iters)
{
    double sum = 0.0, min = seconds[0];
    for (long i = 0; i < iters; i++) {
        sum += seconds[i];
        if (seconds[i] < min)
            min = seconds[i];
    }
    printf("bytes=%zu mean_us=%.2f median_us=%.2f min_us=%.2f iters=%ld\n", bytes,
           sum / (double)iters * 1e6, median(seconds, iters) * 1e6, min * 1e6, iters);
    fflush(stdout);
}

#endif
