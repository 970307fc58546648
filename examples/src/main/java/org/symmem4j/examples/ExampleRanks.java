package org.symmem4j.examples;

import java.nio.ByteBuffer;
import java.util.List;
import java.util.function.Function;
import java.util.function.Supplier;

import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.group.InJvmWorld;
import org.symmem4j.parallel.group.ProcessGroup;

/**
 * How the shared-state examples run their ranks and how a rank fails, written once:
 * <ul>
 *   <li>{@link #runAndPrintRankZero}: one JVM per rank when a launcher started this process ({@code RANK} set), else
 *       rank threads in this JVM; rank 0 prints its line; a failure prints its messages and exits 1;</li>
 *   <li>{@link #allGatherLongs}: every rank's numbers, through the group's set-up exchange (the examples' results
 *       and checks, not their data path);</li>
 *   <li>{@link #abortingOnFailure}: a rank that fails aborts its group first, then throws. A rank that fails outside a
 *       collective (a check of its own result, a refused argument) leaves its peers waiting for it in the next
 *       exchange or in the structures' collective close, each for the group's whole timeout; after the abort their
 *       waits fail at once, naming this rank and its reason (a rank that fails first names the cause; a later abort
 *       changes nothing). Call it inside the structures' try-with-resources, so that the abort comes before their
 *       collective close.</li>
 * </ul>
 */
final class ExampleRanks {

    private ExampleRanks() {
    }

    /**
     * Runs {@code task} on every rank and prints rank 0's line; on a failure, prints {@code example} and the messages
     * of the failure and its causes to standard error and exits with status 1.
     *
     * @param example     the example's name, for the failure line
     * @param threadRanks ranks as threads when no launcher started this process
     * @param task        one rank's work
     * @param line        rank 0's result as the line to print
     * @param <T>         a rank's result
     */
    static <T> void runAndPrintRankZero(String example, int threadRanks, InJvmWorld.RankTask<T> task,
                                        Function<T, String> line) {
        try {
            if (System.getenv("RANK") != null) {
                try (ProcessGroup group = ProcessGroup.fromEnvironment()) {
                    T result = task.run(group);
                    if (group.rank() == 0) {
                        System.out.println(line.apply(result));
                    }
                }
            } else {
                List<T> results = InJvmWorld.runOnEveryRank(threadRanks, GroupOptions.defaults(), task);
                System.out.println(line.apply(results.getFirst()));
            }
        } catch (Exception e) {
            System.err.println(example + " failed: " + messages(e));
            System.exit(1);
        }
    }

    /** The messages of {@code e} and its causes, outermost first: a rank's failure arrives wrapped in thread mode. */
    static String messages(Throwable e) {
        StringBuilder text = new StringBuilder(String.valueOf(e.getMessage()));
        for (Throwable cause = e.getCause(); cause != null && cause != cause.getCause(); cause = cause.getCause()) {
            if (cause.getMessage() != null && text.indexOf(cause.getMessage()) < 0) {
                text.append(" <- ").append(cause.getMessage());
            }
        }
        return text.toString();
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

    /**
     * Collective: every rank's {@code mine}, in rank order (each rank passes as many as every other).
     *
     * @param group this rank's group
     * @param tag   the exchange's name, the same on every rank
     * @param mine  this rank's numbers
     * @return {@code [rank][i]}
     */
    static long[][] allGatherLongs(Group group, String tag, long[] mine) {
        ByteBuffer b = ByteBuffer.allocate(Long.BYTES * mine.length);
        b.asLongBuffer().put(mine);
        List<byte[]> all = group.allGatherBytes(tag, b.array());
        long[][] out = new long[all.size()][mine.length];
        for (int r = 0; r < all.size(); r++) {
            ByteBuffer.wrap(all.get(r)).asLongBuffer().get(out[r]);
        }
        return out;
    }
}
