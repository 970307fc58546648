package org.symmem4j.state;

import java.time.Duration;
import java.util.List;
import java.util.function.BooleanSupplier;
import java.util.function.Predicate;

import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.PeerTimeoutException;
import org.symmem4j.parallel.sync.WaitSubject;

/**
 * A structure's wait on its peers (a ring's {@code take}, {@code put}, {@code claim}) that also ends, with
 * {@link PeerTimeoutException.Reason#PEER_LEFT}, once the ranks it waits on began closing the structure: they will not
 * write or free again. Without it, a rank whose code failed and closes the structure on its way out (its
 * try-with-resources) and a peer waiting here would wait for each other, the closing rank in the collective free,
 * until the group's timeout. Everything else (abort, exited peers, the timeout itself) is the inner wait's.
 */
final class PeersClosingWait implements WaitSubject {

    private final WaitSubject inner;
    private final Group group;
    private final String operation;
    private final List<Integer> awaited;
    private final String waitedFor;
    private final String consequence;
    private final String fix;
    private final BooleanSupplier closed;

    /**
     * Wraps {@code inner}.
     *
     * @param inner     the wait's own checks and timeout
     * @param group     the structure's group
     * @param operation what waits, e.g. "ring buffer take"
     * @param awaited   the ranks waited on, ascending
     * @param waitedFor   what they would have provided, e.g. "room freed by consumer rank=0"
     * @param consequence what their closing means, e.g. "it will not poll again"
     * @param fix         what to change where no rank failed (a failed one's own error comes first)
     * @param closed      whether they all began closing the structure, so that the wait can never succeed (an acquire
     *                    load that pairs with their release as they close)
     */
    PeersClosingWait(WaitSubject inner, Group group, String operation, List<Integer> awaited, String waitedFor,
                     String consequence, String fix, BooleanSupplier closed) {
        this.inner = inner;
        this.group = group;
        this.operation = operation;
        this.awaited = awaited;
        this.waitedFor = waitedFor;
        this.consequence = consequence;
        this.fix = fix;
        this.closed = closed;
    }

    /**
     * A ring consumer's wait for a message that also ends once every rank that could send one began closing the ring:
     * the one producer ({@code producer >= 0}, one-to-one) or every other rank (many-to-one, {@code producer} -1).
     *
     * @param inner          the wait's own checks and timeout
     * @param group          the ring's group
     * @param operation      what waits, e.g. "ring buffer take"
     * @param producer       the one producer rank, or -1 for every other rank
     * @param verb           what producers do, as the ring names it: "offer", "append"
     * @param closedOnEmpty  given the producers, whether they all began closing while the ring is empty at its head
     * @return the wait
     */
    static PeersClosingWait forMessage(WaitSubject inner, Group group, String operation, int producer, String verb,
                                       Predicate<List<Integer>> closedOnEmpty) {
        List<Integer> producers = producer >= 0 ? List.of(producer) : SharedMemories.others(group);
        return new PeersClosingWait(inner, group, operation, producers, producer >= 0 ? "a message from producer rank="
                + producer : "a message from any of ranks " + producers + " (all of them)", "it will not " + verb
                + " again", "make every rank take only the messages the producers " + verb + " before they close",
                () -> closedOnEmpty.test(producers));
    }

    @Override
    public void checkProgressPossible(long waitedNanos) {
        inner.checkProgressPossible(waitedNanos);
        if (closed.getAsBoolean()) {
            throw new PeerTimeoutException(operation + ": rank=" + group.rank() + " waited for " + waitedFor + ", which"
                    + " began closing the ring: " + consequence + " (fix: read that rank's own error if its code failed;"
                    + " otherwise " + fix + ")", group.rank(), awaited, operation, PeerTimeoutException.Reason.PEER_LEFT,
                    group.options().timeout());
        }
    }

    @Override
    public RuntimeException deadlinePassed(Duration timeout) {
        return inner.deadlinePassed(timeout);
    }
}
