package org.symmem4j.state;

import java.lang.foreign.MemorySegment;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.layout.RingBufferLayout;

/**
 * A ring consumer's watch over the record at its head that stays in progress: when the producer that marked it
 * (a many-to-one record carries its producer's rank while in progress) has died, the record can never be committed,
 * so it is turned into padding and the ring goes on. Asking the group whether a rank lives costs more than a poll, so
 * the watch counts polls first and reads the clock only every {@link #POLLS_PER_CLOCK} of them: a consumer spinning
 * on a record its live producer commits within a microsecond reads no clock. Consumer thread only.
 */
final class AbandonedRecords {

    /** How long a record must stay in progress, from when it was first found stuck, before its producer is asked about. */
    private static final long CHECK_NANOS = 1_000_000;
    /**
     * Polls that find the same record in progress between two reads of the clock: a consumer spinning on a record
     * its producer is still writing (the common case, the producer commits within a microsecond) reads no clock.
     */
    private static final int POLLS_PER_CLOCK = 64;

    private long header;
    private int index = -1;
    private int polls;
    private long sinceNanos;
    private long count;

    /** {@return the records turned into padding because their producer died} */
    long count() {
        return count;
    }

    /**
     * Called by a poll that found the in-progress record {@code header} at {@code index}: turns it into padding when
     * it has been stuck long enough and its producer is dead.
     *
     * @param ring  the data ring
     * @param group the ring's group, asked whether the producer lives
     * @param index the record's byte index in the data ring
     * @param header its header word, as the poll read it (in progress)
     * @return true when the record is now padding (read it again), false to stop the poll here
     */
    boolean abandonIfProducerDead(MemorySegment ring, Group group, int index, long header) {
        if (header != this.header || index != this.index) {
            this.header = header; // a record newly seen in progress: count polls, no clock yet
            this.index = index;
            polls = 0;
            return false;
        }
        if (++polls % POLLS_PER_CLOCK != 0) {
            return false;
        }
        long now = System.nanoTime();
        if (polls == POLLS_PER_CLOCK) {
            sinceNanos = now; // stuck for a while: from here it has to stay so for CHECK_NANOS
            return false;
        }
        if (now - sinceNanos < CHECK_NANOS) {
            return false;
        }
        sinceNanos = now;
        int rank = RingBufferLayout.recordTypeOrRank(header);
        if (rank < 0 || rank >= group.worldSize() || group.isAlive(rank)) {
            return false;
        }
        // CAS: the dead producer writes no more; turning its record into padding happens once
        if (RingBufferLayout.abandonRecord(ring, index, header)) {
            count++;
        }
        this.header = 0;
        this.index = -1;
        return true;
    }
}
