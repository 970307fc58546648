package org.symmem4j.gradsync;

import org.symmem4j.parallel.Algorithm;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.ReduceOp;

/**
 * Chooses the all-reduce algorithm for one message, in two steps (as NCCL does): an eligibility
 * filter — what can run here — then a calibrated {@link ThresholdTable} — what is fastest here.
 */
public interface AlgorithmPolicy {

    /**
     * The algorithm for an all-reduce ({@code op}) of {@code count} elements of {@code dtype} on {@code comm}.
     *
     * @param comm  the communicator that will run it
     * @param count the number of elements (not bytes)
     * @param dtype the element type
     * @param op    the reduction
     * @return an algorithm that can run there
     */
    Algorithm choose(Communicator comm, long count, DType dtype, ReduceOp op);

    /**
     * Calibrated thresholds: {@link ThresholdTable#load()} (a calibration file if present, else the shipped defaults).
     *
     * @return the policy
     * @throws IllegalArgumentException when a named calibration file cannot be read
     */
    static AlgorithmPolicy calibrated() {
        return new ThresholdPolicy(ThresholdTable.load());
    }

    /**
     * Eligibility, then {@code table}'s choice (for a table measured elsewhere, such as the GPU bench's).
     *
     * @param table the thresholds
     * @return the policy
     */
    static AlgorithmPolicy fromTable(ThresholdTable table) {
        return new ThresholdPolicy(table);
    }

    /**
     * Always {@code algorithm}; logged once as forced by the user. Rejected at first use if it cannot run there.
     *
     * @param algorithm the algorithm every all-reduce uses
     * @return the policy
     */
    static AlgorithmPolicy forced(Algorithm algorithm) {
        return new ForcedPolicy(algorithm);
    }

    /**
     * Whether {@code algorithm} can run this message: supported by the transport for this dtype, op
     * and size, and for TWO_SHOT and RING, at least one cache line (16 elements) per rank, below
     * which their chunks are empty and they only add synchronization.
     *
     * @param algorithm the algorithm
     * @param comm      the communicator
     * @param count     the number of elements
     * @param dtype     the element type
     * @param op        the reduction
     * @return true when it can run
     */
    static boolean eligible(Algorithm algorithm, Communicator comm, long count, DType dtype, ReduceOp op) {
        if (!comm.supports(algorithm, dtype, op, count)) {
            return false;
        }
        int n = comm.group().worldSize();
        return switch (algorithm) {
            case ONE_SHOT, NCCL, NCCL_SYMMETRIC, MPI, HIERARCHICAL -> true;
            case TWO_SHOT, RING -> n > 1 && count >= 16L * n;
        };
    }
}
