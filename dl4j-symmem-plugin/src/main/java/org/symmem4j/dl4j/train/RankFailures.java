package org.symmem4j.dl4j.train;

import java.time.Duration;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.function.Predicate;
import org.symmem4j.parallel.Invariants;
import org.symmem4j.parallel.SymmemException;

/**
 * The failures of one step, one per failed rank, in rank order, merged into the one exception a trainer throws: the
 * first failure that is a rank's own (not an echo: a peer's timeout or abort that another rank's failure caused) is
 * the origin, and every other failure is suppressed in what the trainer throws.
 */
public final class RankFailures {

    private RankFailures() {
    }

    /**
     * How long the trainer's thread waits for a rank's result of a step. Every wait inside a step is bounded by the
     * trainer's timeout; this bound, three timeouts and 30 s, only turns a wait that ignores it (a bug) into an error.
     *
     * @param timeout the trainer's bound of every wait for another rank
     * @return the bound of the wait for a step's result
     */
    public static Duration stepResultBound(Duration timeout) {
        return Duration.ofMillis(timeout.multipliedBy(3).plusSeconds(30).toMillis());
    }

    /**
     * Waits for one rank's result of a step: returns it, or adds what went wrong to {@code failures} and the rank to
     * {@code failedRanks} and returns null: the rank's own exception, or, past {@code bound}, an error saying the
     * step did not finish (a wait that ignores the timeout: a bug).
     *
     * @param result      the rank's result of the step
     * @param bound       how long to wait ({@link #stepResultBound})
     * @param who         the rank as the error names it ("worker 3", "rank 1")
     * @param rank        the rank's number, added to {@code failedRanks}
     * @param step        the step, as the error names it
     * @param failures    the step's failures so far, in the order of their ranks
     * @param failedRanks their ranks
     * @param <R>         the result's type
     * @return the result, or null when the rank failed
     * @throws InterruptedException when the waiting thread is interrupted (each trainer says what that means)
     */
    public static <R> R await(CompletableFuture<R> result, Duration bound, String who, int rank, long step,
                              List<Throwable> failures, List<Integer> failedRanks) throws InterruptedException {
        try {
            return result.get(bound.toMillis(), TimeUnit.MILLISECONDS);
        } catch (ExecutionException e) {
            failures.add(e.getCause());
        } catch (TimeoutException e) {
            // error-message: an internal invariant kept a SymmemException (it joins the step's failures); its text ends with Invariants.HOW_TO_REPORT
            failures.add(new SymmemException(who + " did not finish step " + step + " within " + bound
                    + " (a wait that ignores the timeout; " + Invariants.HOW_TO_REPORT + ")"));
        }
        failedRanks.add(rank);
        return null;
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
