package org.symmem4j.examples;

import java.util.function.Supplier;

import org.symmem4j.parallel.Group;

/**
 * How an example's rank fails: it aborts its group first, then throws. A rank that fails outside a collective
 * (a check of its own result, a refused argument) leaves its peers waiting for it in the next exchange or in the
 * structures' collective close, each for the group's whole timeout; after the abort their waits fail at once, naming
 * this rank and its reason (a rank that fails first names the cause; a later abort changes nothing). Call it inside
 * the structures' try-with-resources, so that the abort comes before their collective close.
 */
final class RankFailures {

    private RankFailures() {
    }

    /**
     * @param group this rank's group
     * @param work  the rank's work
     * @param <T>   its result
     * @return {@code work}'s result
     */
    static <T> T abortingOnFailure(Group group, Supplier<T> work) {
        try {
            return work.get();
        } catch (RuntimeException | Error e) {
            group.abort(String.valueOf(e.getMessage()));
            throw e;
        }
    }

    /**
     * {@link #abortingOnFailure(Group, Supplier)} for work without a result.
     *
     * @param group this rank's group
     * @param work  the rank's work
     */
    static void abortingOnFailure(Group group, Runnable work) {
        abortingOnFailure(group, () -> {
            work.run();
            return null;
        });
    }
}
