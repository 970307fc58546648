package org.symmem4j.examples.bench;

import org.symmem4j.parallel.Algorithm;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.ProcessGroup;
import org.symmem4j.parallel.ReduceOp;
import org.symmem4j.parallel.SymmetricMemory;

/** Rank 1 of {@link ProcessAllReduceBenchmark}: {@code BenchPeer <bytes> <algorithm>}, torchrun variables set. */
public final class BenchPeer {

    private BenchPeer() {
    }

    public static void main(String[] args) {
        long bytes = Long.parseLong(args[0]);
        Algorithm algorithm = Algorithm.valueOf(args[1]);
        long count = bytes / 4;
        try (ProcessGroup group = ProcessGroup.fromEnvironment();
             Communicator comm = Communicator.create(group);
             SymmetricMemory mem = SymmetricMemory.allocate(group, bytes);
             SymmetricMemory control = SymmetricMemory.allocate(group, 0)) {
            HostAllReduceBenchmark.fill(mem);
            PeerDriver.serve(new PeerDriver.Channel() {
                @Override
                public long requested() {
                    return control.readSignal(ProcessAllReduceBenchmark.REQUESTED_SLOT);
                }

                @Override
                public boolean stopRequested() {
                    return control.readSignal(ProcessAllReduceBenchmark.STOP_SLOT) != 0;
                }
            }, () -> comm.allReduce(mem, 0, count, DType.FLOAT32, ReduceOp.SUM, algorithm));
        }
    }
}
