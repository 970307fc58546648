package org.symmem4j.parallel.group;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import org.symmem4j.parallel.Invariants;
import org.symmem4j.parallel.RendezvousStore;
import org.symmem4j.parallel.StoreTimeoutException;

/**
 * One set-up exchange through the rendezvous store, as {@link ProcessGroup} and its {@link StoreSubGroup}s run it:
 * this rank sets {@code prefix + rank}, then waits for every rank's key in slices of {@link #POLL_SLICE}, so that
 * between slices the group can tell a rank that exited, or an aborted group, from a rank that is only late. What
 * the group checks between slices, and the errors it throws, stay the group's.
 */
final class StoreExchange {

    /** Longest slice a store wait blocks before the group re-checks aborts and the liveness of missing ranks. */
    static final Duration POLL_SLICE = Duration.ofMillis(200);

    /** The group's checks after a slice ended with keys still missing. */
    @FunctionalInterface
    interface BetweenSlices {
        /**
         * Throws to give up the exchange; must throw once {@code deadlinePassed}.
         *
         * @param missingRanks   the ranks whose keys are still absent, in rank order
         * @param deadlinePassed whether the exchange's timeout has run out
         */
        void check(List<Integer> missingRanks, boolean deadlinePassed);
    }

    private StoreExchange() {
    }

    /**
     * Sets this rank's key and returns every rank's value, in rank order.
     *
     * @param prefix the exchange's key prefix, ending in {@code /} (a key is the prefix and the rank)
     * @throws IllegalStateException when {@code between} did not give up at the deadline (a bug of the caller)
     */
    static List<byte[]> exchange(RendezvousStore store, String prefix, int rank, int worldSize, byte[] mine,
                                 Duration timeout, BetweenSlices between) {
        store.set(prefix + rank, mine);
        List<String> keys = new ArrayList<>(worldSize);
        for (int r = 0; r < worldSize; r++) {
            keys.add(prefix + r);
        }
        long deadline = System.nanoTime() + timeout.toNanos();
        while (true) {
            long left = deadline - System.nanoTime();
            Duration slice = Duration.ofNanos(Math.max(1_000_000, Math.min(left, POLL_SLICE.toNanos())));
            try {
                return store.getAll(keys, slice);
            } catch (StoreTimeoutException e) {
                List<Integer> missing = new ArrayList<>();
                for (String k : e.missingKeys()) {
                    missing.add(Integer.parseInt(k.substring(k.lastIndexOf('/') + 1))); // keys end in "/<rank>"
                }
                boolean deadlinePassed = System.nanoTime() - deadline >= 0;
                between.check(missing, deadlinePassed);
                if (deadlinePassed) {
                    throw Invariants.violated("set-up exchange " + prefix + ": past its deadline with ranks "
                            + missing + " missing, and the group did not give up");
                }
            }
        }
    }
}
