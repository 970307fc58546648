package org.symmem4j.state;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;

import org.symmem4j.parallel.PeerTimeoutException;

/** The ring tests' check of a wait that ended because the ranks it waited on began closing the ring. */
final class PeerLeftAssert {

    private PeerLeftAssert() {
    }

    /**
     * Asserts that {@code left} was thrown, with reason {@code PEER_LEFT}, by {@code rank} waiting on {@code awaited}, and
     * that its message names the closing, a fix and every one of {@code phrases}.
     *
     * @param left     the exception the wait threw, or null when it did not end
     * @param why      why the wait must have ended, for the failure message
     * @param rank     the waiting rank
     * @param awaited  the ranks it waited on
     * @param phrases  more text the message must hold (the operation, the peer as named, ...)
     */
    static void assertPeerLeft(PeerTimeoutException left, String why, int rank, List<Integer> awaited,
                               String... phrases) {
        assertTrue(left != null, why);
        assertEquals(PeerTimeoutException.Reason.PEER_LEFT, left.reason(), left.getMessage());
        assertEquals(rank, left.rank());
        assertEquals(awaited, left.missingRanks());
        String message = left.getMessage();
        assertTrue(message.contains("began closing the ring") && message.contains("fix:"), message);
        for (String phrase : phrases) {
            assertTrue(message.contains(phrase), "'" + phrase + "' missing from: " + message);
        }
    }
}
