/*
 * Open MPI baseline for the symmem4j host all-reduce benchmark.
 *
 * Measures in-place MPI_Allreduce (float32, MPI_SUM, MPI_IN_PLACE) on
 * MPI_COMM_WORLD for a list of message sizes and prints, from rank 0 only,
 * one machine-readable line per size:
 *
 *     bytes=1024 mean_us=1.23 median_us=1.10 min_us=1.01 iters=200000
 *
 * preceded by '#' header lines (the first line of MPI_Get_library_version and
 * the run parameters).
 *
 * Usage: allreduce_bench [--max-seconds-per-size X] [BYTES ...]
 *   BYTES  message sizes in bytes (positive multiples of 4); default: powers
 *          of 4 from 1 KiB to 256 MiB.
 *   --max-seconds-per-size X  time budget per size, warm-up included
 *          (default 1.0); the largest sizes still run at least MIN_ITERS
 *          timed iterations and may exceed it.
 *
 * Exits non-zero if the verified all-reduce produces a wrong result.
 */
#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    ALIGNMENT = 64,        /* cache-line alignment, like the Java side */
    MIN_ITERS = 5,         /* floor for the slowest (largest) sizes */
    MAX_ITERS = 1000000,   /* bounds the per-iteration timing array (8 MB) */
    PATTERN_PERIOD = 251,  /* small prime: data varies along the buffer */
};

/* Calibration stops once one batch takes at least this share of the budget,
 * long enough for its mean to be a stable per-iteration estimate. */
static const double CALIBRATION_SHARE = 0.05;
static const double DEFAULT_MAX_SECONDS = 1.0;

static const size_t DEFAULT_SIZES[] = {
    1u << 10, 1u << 12, 1u << 14, 1u << 16, 1u << 18,
    1u << 20, 1u << 22, 1u << 24, 1u << 26, 1u << 28,
};

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

typedef struct {
    size_t *sizes;
    int size_count;
    double max_seconds;
} Options;

static void *xaligned_alloc(size_t bytes)
{
    /* C11 aligned_alloc wants the size to be a multiple of the alignment. */
    size_t rounded = (bytes + ALIGNMENT - 1) / ALIGNMENT * ALIGNMENT;
    void *p = aligned_alloc(ALIGNMENT, rounded);
    if (p == NULL) {
        fprintf(stderr, "aligned_alloc(%zu) failed\n", rounded);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    return p;
}

/* Every rank parses the same argv, so every rank reaches the same verdict and
 * a bad argument ends all of them without any communication. */
static int parse_options(int argc, char **argv, Options *opt)
{
    opt->max_seconds = DEFAULT_MAX_SECONDS;
    opt->size_count = 0;
    opt->sizes = malloc(sizeof(DEFAULT_SIZES) + (size_t)argc * sizeof(size_t));
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
            if (argv[i][0] == '-' || *end != '\0' || bytes == 0 ||
                bytes % sizeof(float) != 0 ||
                bytes / sizeof(float) > INT_MAX) /* MPI count is an int */
                return 0;
            opt->sizes[opt->size_count++] = (size_t)bytes;
        }
    }
    if (opt->size_count == 0) {
        memcpy(opt->sizes, DEFAULT_SIZES, sizeof(DEFAULT_SIZES));
        opt->size_count = (int)(sizeof(DEFAULT_SIZES) / sizeof(DEFAULT_SIZES[0]));
    }
    return 1;
}

/* Small integers, so every partial sum is exact in float32 and the check can
 * compare for equality. Rank r contributes (r + 1) * pattern(i). */
static float pattern(int index)
{
    return (float)(index % PATTERN_PERIOD + 1);
}

static void fill(float *buf, int count, int rank)
{
    for (int i = 0; i < count; i++)
        buf[i] = (float)(rank + 1) * pattern(i);
}

static void allreduce(float *buf, int count)
{
    CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, buf, count, MPI_FLOAT, MPI_SUM,
                            MPI_COMM_WORLD));
}

/* One barrier-aligned iteration, the same shape as the timed loop, so the
 * calibration estimate includes the barrier cost. */
static void synced_allreduce(float *buf, int count)
{
    CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
    allreduce(buf, count);
}

/* Runs a batch and returns the slowest rank's wall time; being agreed across
 * ranks, it lets all ranks make identical loop decisions. */
static double timed_batch(float *buf, int count, long iters)
{
    double start = MPI_Wtime();
    for (long i = 0; i < iters; i++)
        synced_allreduce(buf, count);
    double local = MPI_Wtime() - start, slowest;
    CHECK_MPI(MPI_Allreduce(&local, &slowest, 1, MPI_DOUBLE, MPI_MAX,
                            MPI_COMM_WORLD));
    return slowest;
}

/* Warms up (the first call page-faults the buffer into MPI's shared-memory
 * path and sets up protocol state) and picks the timed iteration count so the
 * whole size, warm-up included, fits the budget. */
static long choose_iters(float *buf, int count, double budget)
{
    double spent = timed_batch(buf, count, 1); /* cold call: never an estimate */
    double per_iter, batch_time;
    long batch = 1;
    do {
        batch_time = timed_batch(buf, count, batch);
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

/*
 * Timing method: every iteration is started together by MPI_Barrier and timed
 * separately on each rank; after the loop a single element-wise MPI_Reduce
 * (MAX) over the per-iteration arrays gives, for each iteration, the time of
 * the slowest rank, i.e. when the collective was complete everywhere. We
 * prefer this to timing a batch and dividing because (a) it yields a true
 * minimum, not only a mean, (b) it measures isolated operations, matching a
 * caller that synchronises between all-reduces, rather than back-to-back
 * pipelined calls where one rank can run ahead into the next operation, and
 * (c) the reduction happens outside the timed region. The cost is that the
 * barrier's exit skew between ranks (sub-microsecond on shared memory) is
 * included, which only matters for the smallest sizes.
 */
static void time_iterations(float *buf, int count, long iters, double *elapsed)
{
    for (long i = 0; i < iters; i++) {
        CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
        double start = MPI_Wtime();
        allreduce(buf, count);
        elapsed[i] = MPI_Wtime() - start;
    }
}

/* In-place repeated sums grow without bound (to inf after ~128 iterations),
 * so the buffer is re-filled before this single checked run. Returns the
 * number of wrong elements across all ranks. */
static long long verify(float *buf, int count, int rank, int nranks)
{
    fill(buf, count, rank);
    allreduce(buf, count);
    const float rank_weight = (float)nranks * (float)(nranks + 1) / 2.0f;
    long long local = 0, total;
    for (int i = 0; i < count; i++)
        if (buf[i] != rank_weight * pattern(i))
            local++;
    CHECK_MPI(MPI_Allreduce(&local, &total, 1, MPI_LONG_LONG, MPI_SUM,
                            MPI_COMM_WORLD));
    return total;
}

static void print_header(const Options *opt, int nranks)
{
    char version[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    CHECK_MPI(MPI_Get_library_version(version, &len));
    version[strcspn(version, "\n")] = '\0';
    printf("# library=%s\n", version);
    printf("# ranks=%d dtype=float32 op=sum in_place=1 max_seconds_per_size=%g\n",
           nranks, opt->max_seconds);
    fflush(stdout);
}

static int compare_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median of n values; sorts them in place. The median is what the report compares: on a shared
 * 2-vCPU VM some stretches run several times slower, and the median is robust to them. */
static double median(double *values, long n)
{
    qsort(values, (size_t)n, sizeof(double), compare_double);
    return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

/* Returns 0 on success, 1 if the verified result was wrong. */
static int bench_size(size_t bytes, double budget, int rank, int nranks)
{
    int count = (int)(bytes / sizeof(float));
    float *buf = xaligned_alloc(bytes);
    fill(buf, count, rank);

    long iters = choose_iters(buf, count, budget);
    double *elapsed = xaligned_alloc((size_t)iters * sizeof(double));
    time_iterations(buf, count, iters, elapsed);
    CHECK_MPI(MPI_Reduce(rank == 0 ? MPI_IN_PLACE : elapsed, elapsed,
                         (int)iters, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD));

    long long wrong = verify(buf, count, rank, nranks);
    if (rank == 0) {
        if (wrong != 0) {
            fprintf(stderr, "bytes=%zu: verification FAILED, %lld wrong elements\n",
                    bytes, wrong);
        } else {
            double sum = 0.0, min = elapsed[0];
            for (long i = 0; i < iters; i++) {
                sum += elapsed[i];
                if (elapsed[i] < min)
                    min = elapsed[i];
            }
            printf("bytes=%zu mean_us=%.2f median_us=%.2f min_us=%.2f iters=%ld\n", bytes,
                   sum / (double)iters * 1e6, median(elapsed, iters) * 1e6, min * 1e6, iters);
            fflush(stdout);
        }
    }
    free(elapsed);
    free(buf);
    return wrong != 0;
}

int main(int argc, char **argv)
{
    CHECK_MPI(MPI_Init(&argc, &argv));
    CHECK_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));

    int rank, nranks;
    CHECK_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    CHECK_MPI(MPI_Comm_size(MPI_COMM_WORLD, &nranks));

    Options opt;
    if (!parse_options(argc, argv, &opt)) {
        if (rank == 0)
            fprintf(stderr, "usage: %s [--max-seconds-per-size X] [BYTES ...]\n"
                            "  BYTES: positive multiples of 4, at most %lld\n",
                    argv[0], (long long)INT_MAX * (long long)sizeof(float));
        free(opt.sizes);
        MPI_Finalize();
        return 2;
    }

    if (rank == 0)
        print_header(&opt, nranks);

    int failed = 0;
    for (int i = 0; i < opt.size_count && !failed; i++)
        failed = bench_size(opt.sizes[i], opt.max_seconds, rank, nranks);

    free(opt.sizes);
    CHECK_MPI(MPI_Finalize());
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
