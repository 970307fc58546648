/*
 * Open MPI baseline for the symmem4j pipeline hand-off benchmark.
 *
 * Measures point-to-point latency between 2 ranks as a ping-pong of blocking
 * MPI_Send/MPI_Recv on MPI_COMM_WORLD: rank 0 sends BYTES to rank 1, rank 1
 * receives them into its buffer and sends that buffer back, rank 0 receives
 * the echo into a second buffer. One-way latency = round trip / 2, the same
 * definition as the Java side (StageLinkHandoffBenchmark). Prints, from rank 0
 * only, one machine-readable line per size, all times one-way:
 *
 *     bytes=1024 mean_us=0.61 median_us=0.55 min_us=0.50 iters=200000
 *
 * preceded by '#' header lines (the first line of MPI_Get_library_version and
 * the run parameters).
 *
 * Usage: pingpong_bench [--max-seconds-per-size X] [BYTES ...]
 *   BYTES  message sizes in bytes (positive, at most INT_MAX); default:
 *          powers of 4 from 1 KiB to 16 MiB.
 *   --max-seconds-per-size X  time budget per size, warm-up included
 *          (default 1.0); the largest sizes still run at least MIN_ITERS
 *          timed round trips and may exceed it.
 *
 * Exits non-zero if the echo that comes back differs from what was sent.
 */
#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_harness.h"

enum {
    ALIGNMENT = 4096, /* page alignment, like the Java side's private buffers */
    TAG = 0,
};

static const size_t DEFAULT_SIZES[] = {
    1u << 10, 1u << 12, 1u << 14, 1u << 16,
    1u << 18, 1u << 20, 1u << 22, 1u << 24,
};

/* MPI counts are ints (MPI_BYTE). */
static int size_ok(unsigned long long bytes)
{
    return bytes <= INT_MAX;
}

/* The same bytes as the Java side's payload: i % 251 + 1. */
static unsigned char pattern(size_t index)
{
    return (unsigned char)(index % PATTERN_PERIOD + 1);
}

/* Rank 0's payload, and the buffer each rank receives into. Rank 1 echoes the
 * buffer it received into, as the Java peer echoes its copied-out input. */
typedef struct {
    unsigned char *payload; /* rank 0 only */
    unsigned char *received;
    int bytes;
    int rank;
} Buffers;

/* One round trip, both directions; rank 0 starts it, rank 1 answers it. */
static void round_trip(const Buffers *b, int rank)
{
    if (rank == 0) {
        CHECK_MPI(MPI_Send(b->payload, b->bytes, MPI_BYTE, 1, TAG, MPI_COMM_WORLD));
        CHECK_MPI(MPI_Recv(b->received, b->bytes, MPI_BYTE, 1, TAG, MPI_COMM_WORLD,
                           MPI_STATUS_IGNORE));
    } else {
        CHECK_MPI(MPI_Recv(b->received, b->bytes, MPI_BYTE, 0, TAG, MPI_COMM_WORLD,
                           MPI_STATUS_IGNORE));
        CHECK_MPI(MPI_Send(b->received, b->bytes, MPI_BYTE, 0, TAG, MPI_COMM_WORLD));
    }
}

/* round_trip as a harness Operation: the state is this rank's Buffers. */
static void round_trip_op(void *state)
{
    const Buffers *b = state;
    round_trip(b, b->rank);
}

/*
 * Timing method: rank 0 times every round trip separately (a ping-pong
 * synchronises the two ranks by itself, so no barrier is needed), and each
 * one-way latency is half a round trip. Per-iteration times give a median and
 * a minimum as well as a mean; the median is what the report compares, as on
 * the Java side (JMH sample time), because this shared 2-vCPU VM has stretches
 * several times slower than usual.
 */
static void time_iterations(const Buffers *b, int rank, long iters, double *one_way)
{
    for (long i = 0; i < iters; i++) {
        double start = MPI_Wtime();
        round_trip(b, rank);
        one_way[i] = 0.5 * (MPI_Wtime() - start);
    }
}

/* Rank 0: the number of bytes of the last echo that differ from the payload. */
static long long count_wrong(const Buffers *b)
{
    long long wrong = 0;
    for (int i = 0; i < b->bytes; i++)
        if (b->received[i] != b->payload[i])
            wrong++;
    return wrong;
}

static void print_header(const Options *opt, int nranks)
{
    print_library_line();
    printf("# ranks=%d ping-pong MPI_Send/MPI_Recv MPI_BYTE, times one-way (round trip / 2)"
           " max_seconds_per_size=%g\n", nranks, opt->max_seconds);
    fflush(stdout);
}

/* Returns 0 on success, 1 if the echo was wrong. */
static int bench_size(size_t bytes, double budget, int rank)
{
    Buffers b = {NULL, xaligned_alloc(bytes, ALIGNMENT), (int)bytes, rank};
    memset(b.received, 0, bytes);
    if (rank == 0) {
        b.payload = xaligned_alloc(bytes, ALIGNMENT);
        for (size_t i = 0; i < bytes; i++)
            b.payload[i] = pattern(i);
    }

    long iters = choose_iters(round_trip_op, &b, budget);
    double *one_way = xaligned_alloc((size_t)iters * sizeof(double), ALIGNMENT);
    time_iterations(&b, rank, iters, one_way);

    int failed = 0;
    if (rank == 0) {
        long long wrong = count_wrong(&b);
        if (wrong != 0) {
            fprintf(stderr, "bytes=%zu: verification FAILED, %lld bytes of the echo differ"
                            " from the payload\n", bytes, wrong);
            failed = 1;
        } else {
            print_stats(bytes, one_way, iters);
        }
    }
    /* Rank 1 learns the verdict too, so both ranks stop after a failure. */
    CHECK_MPI(MPI_Bcast(&failed, 1, MPI_INT, 0, MPI_COMM_WORLD));
    free(one_way);
    free(b.payload);
    free(b.received);
    return failed;
}

int main(int argc, char **argv)
{
    int rank, nranks;
    start_mpi(&argc, &argv, &rank, &nranks);

    Options opt;
    int parsed = parse_options(argc, argv, &opt, DEFAULT_SIZES,
                               (int)(sizeof(DEFAULT_SIZES) / sizeof(DEFAULT_SIZES[0])), size_ok);
    if (!parsed || nranks != 2) {
        if (rank == 0) {
            if (!parsed)
                fprintf(stderr, "usage: %s [--max-seconds-per-size X] [BYTES ...]\n"
                                "  BYTES: positive, at most %d\n", argv[0], INT_MAX);
            else
                fprintf(stderr, "%s: ranks=%d expected=2 (run with mpirun -np 2)\n",
                        argv[0], nranks);
        }
        free(opt.sizes);
        MPI_Finalize();
        return 2;
    }

    if (rank == 0)
        print_header(&opt, nranks);

    int failed = 0;
    for (int i = 0; i < opt.size_count && !failed; i++)
        failed = bench_size(opt.sizes[i], opt.max_seconds, rank);

    free(opt.sizes);
    CHECK_MPI(MPI_Finalize());
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
