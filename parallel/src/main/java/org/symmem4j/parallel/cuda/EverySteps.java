package org.symmem4j.parallel.cuda;

import java.util.List;

/**
 * Runs every step of a teardown even when some fail, then throws the first failure with the others
 * suppressed: releasing GPU resources must not stop at the first driver error and leak the rest.
 */
final class EverySteps {

    private EverySteps() {
    }

    /**
     * Runs each step in order.
     *
     * @param steps the teardown's steps
     * @throws RuntimeException the first step's failure, the later ones suppressed in it
     */
    static void run(List<? extends Runnable> steps) {
        RuntimeException first = null;
        for (Runnable step : steps) {
            try {
                step.run();
            } catch (RuntimeException e) {
                if (first == null) {
                    first = e;
                } else {
                    first.addSuppressed(e);
                }
            }
        }
        if (first != null) {
            throw first;
        }
    }
}
