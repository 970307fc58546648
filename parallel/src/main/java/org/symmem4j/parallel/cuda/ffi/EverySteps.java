package org.symmem4j.parallel.cuda.ffi;

import java.util.List;

/**
 * Runs every step of a teardown even when some fail, then throws the first failure with the others
 * suppressed: releasing GPU resources must not stop at the first driver error and leak the rest.
 *
 * <p>Internal: public only so that {@code org.symmem4j.parallel.cuda} can call it; not part of symmem4j's API.
 */
public final class EverySteps {

    private EverySteps() {
    }

    /**
     * Runs each step in order.
     *
     * @param steps the teardown's steps
     * @throws RuntimeException the first step's failure, the later ones suppressed in it
     */
    public static void run(List<? extends Runnable> steps) {
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
