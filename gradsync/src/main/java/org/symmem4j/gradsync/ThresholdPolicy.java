package org.symmem4j.gradsync;

import org.symmem4j.parallel.Algorithm;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.ReduceOp;

/**
 * Eligibility first, then the calibrated table's choice; where the table's pick cannot run, the first of TWO_SHOT,
 * NCCL, ONE_SHOT that can; a group across machines (its communicator runs HIERARCHICAL) takes flat MPI or NCCL or
 * hierarchical by size ({@link AlgorithmPolicy#acrossMachines}).
 */
final class ThresholdPolicy implements AlgorithmPolicy {

    private final ThresholdTable table;

    ThresholdPolicy(ThresholdTable table) {
        this.table = table;
    }

    @Override
    public Algorithm choose(Communicator comm, long count, DType dtype, ReduceOp op) {
        if (comm.supports(Algorithm.HIERARCHICAL)) {
            // a group across machines: the single-machine table does not apply (its GPU communicator runs NCCL too)
            java.util.Optional<Algorithm> across = AlgorithmPolicy.acrossMachines(comm, count, dtype, op);
            if (across.isPresent()) {
                return across.get();
            }
        }
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
