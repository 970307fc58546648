package org.symmem4j.benchmarks;

import java.io.PrintStream;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import org.symmem4j.benchmarks.DoctorMpi.Pattern;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.SymmetricMemory;
import org.symmem4j.parallel.TensorParallelGemm.Mode;
import org.symmem4j.parallel.cuda.CudaTransport;
import org.symmem4j.parallel.group.InJvmWorld;

/**
 * The doctor's patterns beyond the all-reduce: what symmem4j uses for an all-gather, a pipeline hand-off and the
 * tensor-parallel activations on this machine, with their measured times beside the anchors' (Open MPI between
 * processes on the host, NCCL on the GPUs), so a user sees per size and pattern what runs and what it costs here.
 *
 * <p>The all-reduce has a size-based choice (the threshold table, printed above it); these patterns have one
 * mechanism per transport, so their rows say which, and the tensor-parallel rows say which {@link Mode} was fastest
 * for the shape, which is the caller's choice.
 */
final class DoctorPatterns {

    /** Timings per host cell; the median is printed. */
    private static final int REPS = 5;
    private static final String HOST_ALL_GATHER = "every rank copies each peer's block straight out of the peer's"
            + " symmetric memory (one copy per peer, no staging)";
    private static final String HOST_HAND_OFF = "the stage link: a put into the next stage's slot and a release"
            + " signal; the receiver copies it out and returns the slot's credit";

    private DoctorPatterns() {
    }

    /**
     * Prints {@code == host patterns}: all-gather on {@code ranks} threads and the pipeline hand-off between 2
     * threads (one way: half a round trip, each side copying the message into its stage's private buffer, as
     * {@code MPI_Recv} delivers it), beside Open MPI's {@code MPI_Allgather} and {@code MPI_Send}/{@code MPI_Recv}.
     *
     * @param out   where to print
     * @param ranks threads of the all-gather (the hand-off always has 2)
     * @param sizes bytes, ascending, multiples of 4: the gathered result's size, and the hand-off's message
     * @param mpi   Open MPI's timings of the same sizes, or why there are none
     */
    static void host(PrintStream out, int ranks, List<Long> sizes, DoctorMpi.Result mpi) {
        out.println("== host patterns, " + ranks + " threads (hand-off: 2), float32, median microseconds per call");
        out.println("all-gather: " + HOST_ALL_GATHER);
        out.println("pipeline hand-off: " + HOST_HAND_OFF);
        double[] gather = hostAllGather(ranks, sizes);
        double[] handOff = hostHandOff(sizes);
        out.println(String.format(Locale.ROOT, "%-18s  %12s  %10s  %10s  %9s", "pattern", "bytes", "symmem4j", "Open MPI",
                "MPI/ours"));
        for (int s = 0; s < sizes.size(); s++) {
            row(out, "all-gather", sizes.get(s), gather[s], mpi.of(Pattern.ALL_GATHER, sizes.get(s)));
        }
        for (int s = 0; s < sizes.size(); s++) {
            row(out, "hand-off", sizes.get(s), handOff[s], mpi.of(Pattern.HAND_OFF, sizes.get(s)));
        }
        out.println(mpi.problem() == null ? "(Open MPI: processes, its own transport choice; all-gather not timed where the"
                + " size is not a whole number of elements per rank; one run of " + REPS + " timings per cell)"
                : "(Open MPI not measured: " + mpi.problem() + ")");
    }

    private static void row(PrintStream out, String pattern, long bytes, double ours, double theirs) {
        out.println(String.format(Locale.ROOT, "%-18s  %12d  %10s  %10s  %9s", pattern, bytes, micros(ours),
                micros(theirs), Double.isNaN(ours) || Double.isNaN(theirs) ? "-"
                        : String.format(Locale.ROOT, "%.2f", theirs / ours)));
    }

    private static String micros(double t) {
        return Double.isNaN(t) ? "-" : String.format(Locale.ROOT, "%.2f", t);
    }

    /** Rank 0's median microseconds per in-place all-gather of each size's result on {@code ranks} threads. */
    private static double[] hostAllGather(int ranks, List<Long> sizes) {
        long max = sizes.getLast();
        return InJvmWorld.runOnEveryRank(ranks, GroupOptions.defaults(), group -> {
            double[] t = new double[sizes.size()];
            try (Communicator comm = Communicator.create(group);
                 SymmetricMemory memory = SymmetricMemory.allocate(group, max)) {
                for (int s = 0; s < sizes.size(); s++) {
                    long count = sizes.get(s) / DType.FLOAT32.byteSize();
                    t[s] = median(comm, batch(sizes.get(s)), () -> comm.allGather(memory, 0, count, DType.FLOAT32));
                }
            }
            return t;
        }).getFirst();
    }

    /** Rank 0's median microseconds per one-way hand-off (half a ping-pong round trip) of each size, 2 threads. */
    private static double[] hostHandOff(List<Long> sizes) {
        return InJvmWorld.runOnEveryRank(2, GroupOptions.defaults(), group -> {
            double[] t = new double[sizes.size()];
            try (Communicator comm = Communicator.create(group)) {
                for (int s = 0; s < sizes.size(); s++) {
                    try (StageLinkPingPong link = StageLinkPingPong.open(group, sizes.get(s))) {
                        Runnable roundTrip = group.rank() == 0 ? link::roundTrip : link::echo;
                        t[s] = median(comm, batch(sizes.get(s)), roundTrip) / 2;
                        if (group.rank() == 0) {
                            link.requireEchoMatchesPayload();
                        }
                    }
                }
            }
            return t;
        }).getFirst();
    }

    private static int batch(long bytes) {
        return bytes >= (1L << 20) ? 10 : 200;
    }

    /** The median of {@link #REPS} timings of {@code batch} calls after {@code batch} warm-ups, microseconds per call. */
    private static double median(Communicator comm, int batch, Runnable call) {
        return RepetitionSpread.medianMicrosPerCall(REPS, batch, comm::barrier, call);
    }

    /**
     * Prints {@code == gpu patterns}: the pipeline hand-off between GPUs 0 and 1 (symmem4j's put with signal against
     * NCCL send/recv, eager, one way) per size, and the tensor-parallel activations (all-gather + matmul and matmul +
     * reduce-scatter, bf16, one shape) per {@link Mode}, with the fastest mode.
     *
     * @param out        where to print
     * @param gpus       GPUs found (at least 2)
     * @param sizes      hand-off sizes, bytes, ascending
     * @param reps       timings per cell
     * @param tpShape    the tensor-parallel GEMM's N x K
     * @param tpRows     the tensor-parallel GEMM's M (the group's rows)
     */
    static void gpu(PrintStream out, int gpus, List<Long> sizes, int reps, String tpShape, int tpRows) {
        int world = Math.min(8, gpus);
        long[] handOffSizes = sizes.stream().mapToLong(Long::longValue).toArray();
        CudaTransport cuda = CudaTransport.create();
        TensorParallelGemmBench.Flags tp = new TensorParallelGemmBench.Flags();
        tp.shapes = List.of(tpShape);
        tp.ms = List.of(tpRows);
        tp.mlp = "none";
        tp.reps = reps;
        List<List<GpuHandoffBench.Cell>> handOff = InJvmWorld.runOnEveryRank(2,
                GroupOptions.defaults().withTimeout(Duration.ofSeconds(120)), cuda, group -> {
            try (SymmetricMemory inbox = SymmetricMemory.allocate(group, handOffSizes[handOffSizes.length - 1])) {
                return GpuHandoffBench.measure(group, Map.of(GpuHandoffBench.SYMMEM, inbox), reps,
                        cuda.programmaticLaunch(group), handOffSizes);
            }
        });
        String gemmProblem = CudaTransport.cublasUnavailableReason();
        List<TensorParallelGemmBench.RankCells> gemm = gemmProblem != null ? List.of()
                : InJvmWorld.runOnEveryRank(world, GroupOptions.defaults().withTimeout(Duration.ofSeconds(300)), cuda,
                        group -> TensorParallelGemmBench.measure(group, tp));
        out.println("== gpu patterns, median microseconds per call");
        out.println("pipeline hand-off: GPU 0 -> GPU 1, eager, one way (half a round trip); symmem4j: a put with signal"
                + " into the next stage's symmetric memory (" + GpuHandoffBench.SYMMEM + "); NCCL: send/recv");
        out.println(String.format(Locale.ROOT, "%12s  %10s  %10s  %10s", "bytes", "symmem4j", "NCCL", "NCCL/ours"));
        List<GpuHandoffBench.Cell> first = handOff.getFirst(); // rank 0 is the boundary's earlier GPU: it timed them
        for (long bytes : handOffSizes) {
            double ours = oneWay(first, bytes, GpuHandoffBench.SYMMEM);
            double nccl = oneWay(first, bytes, GpuHandoffBench.NCCL);
            out.println(String.format(Locale.ROOT, "%12d  %10s  %10s  %10s", bytes, micros(ours), micros(nccl),
                    Double.isNaN(ours) || Double.isNaN(nccl) ? "-" : String.format(Locale.ROOT, "%.2f", nccl / ours)));
        }
        if (gemmProblem != null) {
            out.println("tensor-parallel activations: not measured: " + gemmProblem);
            cuda.close();
            return;
        }
        out.println("tensor-parallel activations: " + world + " GPUs, bf16, M=" + tpRows + " N x K=" + tpShape + ","
                + " the slowest rank's median; the mode is the caller's choice (TensorParallelGemm.Mode)");
        List<TensorParallelGemmBench.Cell> cells = TensorParallelGemmBench.slowestOverRanks(
                gemm.stream().map(TensorParallelGemmBench.RankCells::cells).toList());
        out.println(String.format(Locale.ROOT, "%-24s  %10s  %10s  %10s  %12s  %-8s", "op", "FUSED", "SYMMEM", "NCCL",
                "cuBLAS alone", "fastest"));
        for (String op : List.of("all-gather + matmul", "matmul + reduce-scatter")) {
            List<String> row = new ArrayList<>();
            String fastest = "-";
            double best = Double.MAX_VALUE;
            for (Mode mode : Mode.values()) {
                double t = gemmMicros(cells, op, TensorParallelGemmBench.variantName(mode));
                row.add(micros(t));
                if (!Double.isNaN(t) && t < best) {
                    best = t;
                    fastest = mode.name();
                }
            }
            out.println(String.format(Locale.ROOT, "%-24s  %10s  %10s  %10s  %12s  %-8s", op, row.get(0), row.get(1),
                    row.get(2), micros(gemmMicros(cells, op, "cuBLAS alone")), fastest));
        }
        gemm.getFirst().notes().forEach(n -> out.println("(" + n + ")"));
        cuda.close();
    }

    private static double oneWay(List<GpuHandoffBench.Cell> cells, long bytes, String variant) {
        return cells.stream().filter(c -> c.from() == 0 && c.bytes() == bytes && c.variant().equals(variant) && !c.graph())
                .mapToDouble(GpuHandoffBench.Cell::oneWayMicros).findFirst().orElse(Double.NaN);
    }

    private static double gemmMicros(List<TensorParallelGemmBench.Cell> cells, String op, String variant) {
        return cells.stream().filter(c -> c.op().equals(op) && c.variant().equals(variant))
                .mapToDouble(TensorParallelGemmBench.Cell::micros).findFirst().orElse(Double.NaN);
    }
}
