package org.symmem4j.gradsync;

import java.util.Arrays;
import java.util.List;
import java.util.concurrent.atomic.AtomicBoolean;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.symmem4j.parallel.Algorithm;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.ReduceOp;

/** The user's override: one algorithm for every message, logged once as forced. */
final class ForcedPolicy implements AlgorithmPolicy {

    private static final Logger LOG = LoggerFactory.getLogger(ForcedPolicy.class);

    private final Algorithm algorithm;
    private final AtomicBoolean logged = new AtomicBoolean();

    ForcedPolicy(Algorithm algorithm) {
        if (algorithm == null) {
            throw new IllegalArgumentException("forced algorithm is null, expected one of "
                    + java.util.Arrays.toString(Algorithm.values()) + " (fix: pass one, e.g. Algorithm.ONE_SHOT, or use"
                    + " AlgorithmPolicy.calibrated() to let the measured thresholds choose)");
        }
        this.algorithm = algorithm;
    }

    @Override
    public Algorithm choose(Communicator comm, long count, DType dtype, ReduceOp op) {
        if (!comm.supports(algorithm)) {
            List<Algorithm> runs = Arrays.stream(Algorithm.values()).filter(comm::supports).toList();
            throw new IllegalArgumentException("forced algorithm=" + algorithm + " cannot run on transport="
                    + comm.transportName() + "; expected one this communicator runs: " + runs + " (fix: force one of"
                    + " those, or leave the algorithm to the calibrated policy)");
        }
        if (logged.compareAndSet(false, true)) {
            LOG.info("all-reduce algorithm forced by the user: " + algorithm
                    + " for every message (the calibrated policy is bypassed)");
        }
        return algorithm;
    }

    @Override
    public String toString() {
        return "forced(" + algorithm + ")";
    }
}
