package org.symmem4j.gradsync;

import org.symmem4j.parallel.Algorithm;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.Provider;
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
     * From this size up a group across machines all-reduces hierarchically, below it with one flat MPI call: on one
     * machine pretending to be 2 machines x 2 ranks (bench/results/2026-11-26-multinode-allreduce-2x2.md) the
     * hierarchical all-reduce was slower than flat MPI up to 1 MiB and faster from 4 MiB (0.94x at 4 MiB, 0.60x at
     * 64 MiB); the model for 8 machines x 8 ranks (2026-11-26-multinode-model.md) moves the crossing lower, so this
     * errs towards flat MPI until real machines calibrate it.
     */
    long HIERARCHICAL_FROM_BYTES = 4L << 20;

    /**
     * From this size up a GPU group across machines all-reduces hierarchically (our kernels inside each machine, NCCL
     * between), below it with one flat NCCL call: on 4 H200s pretending to be 2 machines x 2 GPUs with NCCL's traffic
     * through sockets (bench/results/2026-11-27-gpu-hierarchical.md) the hierarchy was 0.89x flat NCCL at 1 KiB and
     * 1.9-2.9x from 16 KiB; that flat NCCL lost NVLink inside the pretend machines too, which a real cluster's keeps, so
     * the crossing sits higher, where the hierarchy won 2.55x, until real machines calibrate it. With NCCL on NVLink
     * between the pretend machines the hierarchy only costs (0.41-0.63x): links as fast as a machine's own are not what
     * it is for.
     */
    long HIERARCHICAL_FROM_BYTES_GPU = 1L << 20;

    /**
     * For a communicator whose group spans machines (one that runs {@link Algorithm#HIERARCHICAL}, or {@link Algorithm#MPI}
     * and none of the single-machine algorithms): hierarchical from {@link #HIERARCHICAL_FROM_BYTES}, flat MPI below; for
     * GPUs (flat NCCL beside hierarchical) from {@link #HIERARCHICAL_FROM_BYTES_GPU}, flat NCCL below; whichever of the two
     * can run.
     *
     * @param comm  the communicator
     * @param count the number of elements
     * @param dtype the element type
     * @param op    the reduction
     * @return the algorithm, or empty when the communicator runs neither
     */
    static java.util.Optional<Algorithm> acrossMachines(Communicator comm, long count, DType dtype, ReduceOp op) {
        boolean mpi = eligible(Algorithm.MPI, comm, count, dtype, op);
        boolean hierarchical = eligible(Algorithm.HIERARCHICAL, comm, count, dtype, op);
        // the library between machines: MPI on the host, NCCL on GPUs (which run NCCL, not MPI, beside hierarchical)
        Provider between = mpi || !hierarchical ? Provider.MPI : Provider.NCCL;
        Algorithm flat = between.library();
        long crossing = between == Provider.NCCL ? HIERARCHICAL_FROM_BYTES_GPU : HIERARCHICAL_FROM_BYTES;
        boolean large = dtype.bytes(count) >= crossing;
        Algorithm first = large ? Algorithm.HIERARCHICAL : flat;
        Algorithm second = large ? flat : Algorithm.HIERARCHICAL;
        if (eligible(first, comm, count, dtype, op)) {
            return java.util.Optional.of(first);
        }
        return eligible(second, comm, count, dtype, op) ? java.util.Optional.of(second) : java.util.Optional.empty();
    }

    /**
     * ONE_SHOT where it runs (ranks added in rank order, the same bits on every rank: what losses, norms, agreements
     * and state reductions rely on), else the first that does of NCCL, flat MPI and hierarchical (a group across
     * machines, where each gives every rank the same bits in its own order).
     *
     * @param comm  the communicator
     * @param count the number of elements
     * @param dtype the element type
     * @param op    the reduction
     * @return the algorithm
     * @throws IllegalArgumentException when none of them runs this message (says what the communicator is)
     */
    static Algorithm oneShotWhereItRuns(Communicator comm, long count, DType dtype, ReduceOp op) {
        for (Algorithm a : new Algorithm[] {Algorithm.ONE_SHOT, Algorithm.NCCL, Algorithm.MPI, Algorithm.HIERARCHICAL}) {
            if (eligible(a, comm, count, dtype, op)) {
                return a;
            }
        }
        throw new IllegalArgumentException("no algorithm of ONE_SHOT, NCCL, MPI, HIERARCHICAL runs an all-reduce of " + count
                + " " + dtype + " " + op + " on " + comm.transportName() + " (expected at least one of them to support"
                + " this dtype, op and size; fix: reduce FLOAT32 or FLOAT64 with SUM, MIN or MAX in fewer elements per"
                + " call, or create the group on a transport that runs one of them, e.g. host-shm, or with NCCL or MPI"
                + " enabled)");
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
            case ONE_SHOT, NCCL, NCCL_SYMMETRIC, MPI, HIERARCHICAL, NVSHMEM -> true;
            case TWO_SHOT, RING -> n > 1 && count >= 16L * n;
        };
    }
}
