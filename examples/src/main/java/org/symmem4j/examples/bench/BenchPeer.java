package org.symmem4j.examples.bench;

import org.symmem4j.parallel.Algorithm;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.ProcessGroup;
import org.symmem4j.parallel.ReduceOp;
import org.symmem4j.parallel.SymmetricMemory;

/**
 * Rank 1 of the process benchmarks, started by {@link PeerProcess} with torchrun's variables set:
 *
 * <pre>
 *   BenchPeer allreduce &lt;bytes&gt; &lt;algorithm&gt;   ({@link ProcessAllReduceBenchmark})
 *   BenchPeer handoff &lt;bytes&gt; &lt;waits&gt;         ({@link StageLinkHandoffBenchmark})
 * </pre>
 */
public final class BenchPeer {

    static final String ALL_REDUCE = "allreduce";
    static final String HANDOFF = "handoff";

    private BenchPeer() {
    }

    public static void main(String[] args) {
        if (args.length != 3) {
            throw new IllegalArgumentException("usage: BenchPeer " + ALL_REDUCE + " <bytes> <algorithm> | BenchPeer "
                    + HANDOFF + " <bytes> <waits>");
        }
        long bytes = Long.parseLong(args[1]);
        switch (args[0]) {
            case ALL_REDUCE -> allReduce(bytes, Algorithm.valueOf(args[2]));
            case HANDOFF -> {
                StageLinkHandoffBenchmark.Waits waits = StageLinkHandoffBenchmark.Waits.valueOf(args[2]);
                try (ProcessGroup group = ProcessGroup.fromEnvironment(waits.options())) {
                    StageLinkPingPong.serveEchoes(group, bytes);
                }
            }
            default -> throw new IllegalArgumentException("unknown benchmark peer workload=" + args[0] + " expected="
                    + ALL_REDUCE + " or " + HANDOFF);
        }
    }

    private static void allReduce(long bytes, Algorithm algorithm) {
        long count = bytes / 4;
        try (ProcessGroup group = ProcessGroup.fromEnvironment();
             Communicator comm = Communicator.create(group);
             SymmetricMemory mem = SymmetricMemory.allocate(group, bytes);
             SymmetricMemory control = SymmetricMemory.allocate(group, 0)) {
            HostAllReduceBenchmark.fill(mem);
            PeerDriver.serve(new PeerDriver.SignalChannel(control),
                    () -> comm.allReduce(mem, 0, count, DType.FLOAT32, ReduceOp.SUM, algorithm));
        }
    }
}
