package org.symmem4j.gradsync;

import org.symmem4j.parallel.Algorithm;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.ReduceOp;

/**
 * Eligibility first, then the calibrated table's choice; where the table's pick cannot run, the first of TWO_SHOT,
 * NCCL, ONE_SHOT that can, and for a group across machines flat MPI or hierarchical by size
 * ({@link AlgorithmPolicy#acrossMachines}).
 */
final class ThresholdPolicy implements AlgorithmPolicy {

    private final ThresholdTable table;

    ThresholdPolicy(ThresholdTable table) {
        this.table = table;
    }

    @Override
    public Algorithm choose(Communicator comm, long count, DType dtype, ReduceOp op) {
        long bytes = dtype.bytes(count);
        Algorithm pick = table.lookup(comm.transportName(), comm.group().worldSize(), dtype, bytes);
        if (AlgorithmPolicy.eligible(pick, comm, count, dtype, op)) {
            return pick;
        }
        for (Algorithm a : new Algorithm[] {Algorithm.TWO_SHOT, Algorithm.NCCL, Algorithm.ONE_SHOT}) {
            if (AlgorithmPolicy.eligible(a, comm, count, dtype, op)) {
                return a;
            }
        }
        return AlgorithmPolicy.acrossMachines(comm, count, dtype, op).orElse(Algorithm.ONE_SHOT);
    }

    ThresholdTable table() {
        return table;
    }

    @Override
    public String toString() {
        return "calibrated(" + table.source() + ")";
    }
}
