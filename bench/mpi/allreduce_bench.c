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

#include "bench_harness.h"

enum {
    ALIGNMENT = 64, /* cache-line alignment, like the Java side */
};

static const size_t DEFAULT_SIZES[] = {
    1u << 10, 1u << 12, 1u << 14, 1u << 16, 1u << 18,
    1u << 20, 1u << 22, 1u << 24, 1u << 26, 1u << 28,
};

/* A size must be a whole number of floats, and MPI counts are ints. */
static int size_ok(unsigned long long bytes)
{
    return bytes % sizeof(float) == 0 && bytes / sizeof(float) <= INT_MAX;
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

typedef struct {
    float *buf;
    int count;
} Buffer;

/* One barrier-aligned iteration, the same shape as the timed loop, so the
 * calibration estimate includes the barrier cost. */
static void synced_allreduce(void *state)
{
    Buffer *b = state;
    CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
    allreduce(b->buf, b->count);
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
    print_library_line();
    printf("# ranks=%d dtype=float32 op=sum in_place=1 max_seconds_per_size=%g\n",
           nranks, opt->max_seconds);
    fflush(stdout);
}

/* Returns 0 on success, 1 if the verified result was wrong. */
static int bench_size(size_t bytes, double budget, int rank, int nranks)
{
    int count = (int)(bytes / sizeof(float));
    float *buf = xaligned_alloc(bytes, ALIGNMENT);
    fill(buf, count, rank);

    Buffer state = {buf, count};
    long iters = choose_iters(synced_allreduce, &state, budget);
    double *elapsed = xaligned_alloc((size_t)iters * sizeof(double), ALIGNMENT);
    time_iterations(buf, count, iters, elapsed);
    CHECK_MPI(MPI_Reduce(rank == 0 ? MPI_IN_PLACE : elapsed, elapsed,
                         (int)iters, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD));

    long long wrong = verify(buf, count, rank, nranks);
    if (rank == 0) {
        if (wrong != 0) {
            fprintf(stderr, "bytes=%zu: verification FAILED, %lld wrong elements\n",
                    bytes, wrong);
        } else {
            print_stats(bytes, elapsed, iters);
        }
    }
    free(elapsed);
    free(buf);
    return wrong != 0;
}

int main(int argc, char **argv)
{
    int rank, nranks;
    start_mpi(&argc, &argv, &rank, &nranks);

    Options opt;
    if (!parse_options(argc, argv, &opt, DEFAULT_SIZES,
                       (int)(sizeof(DEFAULT_SIZES) / sizeof(DEFAULT_SIZES[0])), size_ok)) {
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
