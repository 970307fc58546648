package org.symmem4j.dl4j.train;

import java.util.List;
import java.util.function.Predicate;

/**
 * The failures of one step, one per failed rank, in rank order, merged into the one exception a trainer throws: the
 * first failure that is a rank's own (not an echo: a peer's timeout or abort that another rank's failure caused) is
 * the origin, and every other failure is suppressed in what the trainer throws.
 */
public final class RankFailures {

    private RankFailures() {
    }

    /**
     * Where the failures began.
     *
     * @param failures the step's failures, in the order of their ranks
     * @param echo     whether a failure only reports another rank's (a timeout waiting for it, an abort it sent)
     * @return the index of the first failure that is not an echo; 0 when all are
     */
    public static int origin(List<Throwable> failures, Predicate<Throwable> echo) {
        for (int i = 0; i < failures.size(); i++) {
            if (!echo.test(failures.get(i))) {
                return i;
            }
        }
        return 0;
    }

    /**
     * Suppresses every failure but the origin's in {@code thrown} (and never {@code thrown} in itself).
     *
     * @param thrown   what the trainer throws: the origin's failure, or an exception wrapping it
     * @param failures the step's failures, in the order of their ranks
     * @param origin   the index of the origin ({@link #origin})
     * @param <T>      the thrown exception's type
     * @return {@code thrown}
     */
    public static <T extends Throwable> T suppressOthers(T thrown, List<Throwable> failures, int origin) {
        for (int i = 0; i < failures.size(); i++) {
            if (i != origin && failures.get(i) != thrown) {
                thrown.addSuppressed(failures.get(i));
            }
        }
        return thrown;
    }
}
