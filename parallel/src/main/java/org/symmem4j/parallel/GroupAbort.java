package org.symmem4j.parallel;

import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.Consumer;

/**
 * One rank's record that its group was aborted, and the hook through which every symmetric memory
 * and communicator of the rank hears of it. A group is aborted once: when this rank fails a wait
 * or fails inside a collective, when it sees a peer's abort, or when its code calls
 * {@link Group#abort(String)}. Afterwards every wait of the rank fails at once, and teardown
 * ({@code close()} of memories, communicators and the group) frees without waiting for peers again:
 * a failed group costs its ranks one timeout at most, never one per resource.
 *
 * <p>Thread-safe: raised from whichever thread failed first, read by every thread of the rank.
 */
public final class GroupAbort {

    /** An abort that has not been raised: one per group, created with it. */
    public GroupAbort() {
    }

    /**
     * What aborted the group.
     *
     * @param rank   the rank whose failure aborted it (the culprit errors name)
     * @param reason what happened, as that rank described it
     */
    public record Cause(int rank, String reason) {
    }

    private final AtomicReference<Cause> cause = new AtomicReference<>();
    private final List<Consumer<Cause>> listeners = new CopyOnWriteArrayList<>();

    /**
     * Whether the group was aborted (on this rank's knowledge).
     *
     * @return true once the group is aborted
     */
    public boolean isRaised() {
        return cause.get() != null;
    }

    /**
     * What aborted the group, or null.
     *
     * @return the cause, or null while the group is not aborted
     */
    public Cause cause() {
        return cause.get();
    }

    /**
     * Marks the group aborted by rank {@code culprit} with {@code reason}, the first time only, and
     * tells every listener (each writes the abort into the signal pads it owns, so peers waiting
     * there fail promptly too). Returns whether this call was the first.
     *
     * @param culprit the rank whose failure aborts the group
     * @param reason  what happened
     * @return true when this call aborted the group, false when it already was
     */
    public boolean raise(int culprit, String reason) {
        Cause c = new Cause(culprit, reason == null ? "aborted" : reason);
        if (!cause.compareAndSet(null, c)) {
            return false;
        }
        for (Consumer<Cause> l : listeners) {
            try {
                l.accept(c);
            } catch (RuntimeException ignored) {
                // a listener whose memory is already freed has nobody left to tell
            }
        }
        return true;
    }

    /**
     * Records that the group was aborted through a channel of its own (a pipeline's poisoned links,
     * say), which every peer hears of there: this rank's teardown then stops waiting for peers and
     * does not announce its departure as if it had failed first, but nothing is written into the
     * signal pads (the culprit is not known here, and peers learn it from that channel).
     *
     * @param reason what happened
     */
    public void noteAbortedElsewhere(String reason) {
        cause.compareAndSet(null, new Cause(-1, reason));
    }

    /**
     * Registers {@code listener}, called once with the cause when the group is aborted (at once if
     * it already was). Returns what removes it again (for a memory that is closed).
     *
     * @param listener told the cause once
     * @return removes the listener
     */
    public Runnable onRaise(Consumer<Cause> listener) {
        listeners.add(listener);
        Cause c = cause.get();
        if (c != null) {
            listener.accept(c);
        }
        return () -> listeners.remove(listener);
    }
}
