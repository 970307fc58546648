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

enum {
    ALIGNMENT = 4096,      /* page alignment, like the Java side's private buffers */
    MIN_ITERS = 5,         /* floor for the slowest (largest) sizes */
    MAX_ITERS = 1000000,   /* bounds the per-iteration timing array (8 MB) */
    PATTERN_PERIOD = 251,  /* small prime: data varies along the buffer */
    TAG = 0,
};

/* Calibration stops once one batch takes at least this share of the budget,
 * long enough for its mean to be a stable per-iteration estimate. */
static const double CALIBRATION_SHARE = 0.05;
static const double DEFAULT_MAX_SECONDS = 1.0;

static const size_t DEFAULT_SIZES[] = {
    1u << 10, 1u << 12, 1u << 14, 1u << 16,
    1u << 18, 1u << 20, 1u << 22, 1u << 24,
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
                bytes > INT_MAX) /* MPI count is an int (MPI_BYTE) */
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

/* Runs a batch of round trips and returns the slowest rank's wall time; being
 * agreed across ranks, it lets both ranks make identical loop decisions. */
static double timed_batch(const Buffers *b, int rank, long iters)
{
    double start = MPI_Wtime();
    for (long i = 0; i < iters; i++)
        round_trip(b, rank);
    double local = MPI_Wtime() - start, slowest;
    CHECK_MPI(MPI_Allreduce(&local, &slowest, 1, MPI_DOUBLE, MPI_MAX,
                            MPI_COMM_WORLD));
    return slowest;
}

/* Warms up (the first round trip page-faults the buffers and sets up the
 * shared-memory path's protocol state) and picks the timed iteration count so
 * the whole size, warm-up included, fits the budget. */
static long choose_iters(const Buffers *b, int rank, double budget)
{
    double spent = timed_batch(b, rank, 1); /* cold call: never an estimate */
    double per_iter, batch_time;
    long batch = 1;
    do {
        batch_time = timed_batch(b, rank, batch);
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
    char version[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    CHECK_MPI(MPI_Get_library_version(version, &len));
    version[strcspn(version, "\n")] = '\0';
    printf("# library=%s\n", version);
    printf("# ranks=%d ping-pong MPI_Send/MPI_Recv MPI_BYTE, times one-way (round trip / 2)"
           " max_seconds_per_size=%g\n", nranks, opt->max_seconds);
    fflush(stdout);
}

static int compare_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median of n values; sorts them in place. */
static double median(double *values, long n)
{
    qsort(values, (size_t)n, sizeof(double), compare_double);
    return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

/* Returns 0 on success, 1 if the echo was wrong. */
static int bench_size(size_t bytes, double budget, int rank)
{
    Buffers b = {NULL, xaligned_alloc(bytes), (int)bytes};
    memset(b.received, 0, bytes);
    if (rank == 0) {
        b.payload = xaligned_alloc(bytes);
        for (size_t i = 0; i < bytes; i++)
            b.payload[i] = pattern(i);
    }

    long iters = choose_iters(&b, rank, budget);
    double *one_way = xaligned_alloc((size_t)iters * sizeof(double));
    time_iterations(&b, rank, iters, one_way);

    int failed = 0;
    if (rank == 0) {
        long long wrong = count_wrong(&b);
        if (wrong != 0) {
            fprintf(stderr, "bytes=%zu: verification FAILED, %lld bytes of the echo differ"
                            " from the payload\n", bytes, wrong);
            failed = 1;
        } else {
            double sum = 0.0, min = one_way[0];
            for (long i = 0; i < iters; i++) {
                sum += one_way[i];
                if (one_way[i] < min)
                    min = one_way[i];
            }
            printf("bytes=%zu mean_us=%.2f median_us=%.2f min_us=%.2f iters=%ld\n", bytes,
                   sum / (double)iters * 1e6, median(one_way, iters) * 1e6, min * 1e6, iters);
            fflush(stdout);
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
    CHECK_MPI(MPI_Init(&argc, &argv));
    CHECK_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));

    int rank, nranks;
    CHECK_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    CHECK_MPI(MPI_Comm_size(MPI_COMM_WORLD, &nranks));

    Options opt;
    int parsed = parse_options(argc, argv, &opt);
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
