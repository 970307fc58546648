package org.symmem4j.parallel.control;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;
import org.symmem4j.parallel.trace.CoarseClock;

/**
 * The flight recorder's run-length layout ({@link org.symmem4j.parallel.Configuration#FLIGHT_RECORDER_RUNS}): a ring of
 * runs, each one or more consecutive collectives with the same name and arguments, instead of one entry per
 * collective. Nothing is written when a rank arrives at its entry barrier: while it waits there its arguments are the
 * descriptor it published into its own pad ({@link PadSynchronizer#arrive}), which the failure and message paths copy
 * in ({@link #scheduled}). Once the barrier passed ({@link #started}) a collective equal to the newest run's and
 * numbered right after it costs one store, the run's last sequence number, into a line this core just wrote; one that
 * differs opens a run. The return stores the run's newest completed number ({@link #completed}). Clock stamps are
 * stored only when the millisecond changed (a coarse clock: about one store per thousand 1 µs collectives).
 *
 * <pre>
 *  entry e = 16 longs, ring[e .. e + 15], newest at {@code head}, overwritten capacity runs later:
 *  [0] FIRST_SEQ     the run's first collective            [6] MEMORY_OFFSET
 *  [1] LAST_SEQ      its last (bumped per collective)       [7] DONE_SEQ     its newest completed collective
 *  [2] SHAPE         shape | name index &lt;&lt; 33 | flags    [8] LAST_BEGUN   epoch ms the last one began (-1: unknown)
 *  [3] COUNT                                                [9] LAST_ENDED   epoch ms the newest completed one ended
 *  [4] BYTES                                                [10] FIRST_BEGUN, [11] FIRST_ENDED: the first one's
 *  [5] MEMORY_ID
 * </pre>
 *
 * <p>What a dump shows is the per-collective view ({@link #ops}): each run expanded to its collectives, with the run's
 * arguments, each one's state (COMPLETED up to DONE_SEQ, STARTED after; a run copied in at a failure is SCHEDULED or
 * FAILED and holds one collective), and begin and end times for the first and the last of a run and for the one in
 * flight; a collective inside a run has none (null in the JSON: it lies between its run's first and last). The ring
 * keeps {@code capacity} runs, so it always covers at least the last {@code capacity} collectives; a dump shows the
 * last {@code capacity}.
 *
 * <p>Memory ordering: none needed; one thread writes and reads it (the rank's), as {@link FlightRecorder} says.
 */
final class FlightRuns {

    static final int STRIDE = 16;
    static final int FIRST_SEQ = 0;
    static final int LAST_SEQ = 1;
    static final int SHAPE = 2;
    static final int COUNT = 3;
    static final int BYTES = 4;
    static final int MEMORY_ID = 5;
    static final int MEMORY_OFFSET = 6;
    static final int DONE_SEQ = 7;
    static final int LAST_BEGUN = 8;
    static final int LAST_ENDED = 9;
    static final int FIRST_BEGUN = 10;
    static final int FIRST_ENDED = 11;
    /** SHAPE's flags: the run's one collective failed; it arrived and has not passed its entry barrier. */
    static final long FAILED = 1L << 32;
    static final long SCHEDULED = 1L << 63;
    private static final int NAME_SHIFT = 33;
    private static final long NAME_MASK = (1L << 30) - 1;
    /** FIRST_SEQ and LAST_SEQ of an entry never written: below every sequence number and every {@code s - 1}. */
    private static final long UNWRITTEN = -2;
    private static final long UNKNOWN = -1;

    private final long[] ring;
    private final int capacity;
    /** Where the newest run begins in {@link #ring}. */
    private int head;
    /** Epoch ms at which the latest collective began ({@link #begun}); 0 before the first. */
    private long begunAt;
    private String[] names = new String[8];
    private int nameCount;
    private String lastName;
    private long lastNameBits;

    FlightRuns(int capacity) {
        this.capacity = capacity;
        this.ring = new long[capacity * STRIDE];
        for (int e = 0; e < ring.length; e += STRIDE) {
            ring[e + FIRST_SEQ] = UNWRITTEN;
            ring[e + LAST_SEQ] = UNWRITTEN;
        }
    }

    /** A collective began on this rank: its begin time, stored only when the clock's millisecond moved. */
    void begun() {
        long now = CoarseClock.millis();
        if (now != begunAt) {
            begunAt = now;
        }
    }

    /**
     * Collective {@code d.seq()} passed its entry barrier with these arguments: the hot path's one write (see the
     * class comment).
     *
     * @param d         its descriptor
     * @param operation its name, a constant
     */
    void started(OpDescriptorLayout.Descriptor d, String operation) {
        long s = d.seq();
        long[] r = ring;
        int e = head;
        long shape = shapeOf(d, operation);
        if (r[e + LAST_SEQ] == s - 1 && r[e + SHAPE] == shape && r[e + COUNT] == d.count()
                && r[e + BYTES] == d.bufferBytes() && r[e + MEMORY_ID] == d.memoryId()
                && r[e + MEMORY_OFFSET] == d.memoryOffset()) {
            r[e + LAST_SEQ] = s;
            long b = begunAt;
            if (r[e + LAST_BEGUN] != b) {
                r[e + LAST_BEGUN] = b;
            }
            return;
        }
        if (!startScheduled(s)) {
            push(s, shape, d.count(), d.bufferBytes(), d.memoryId(), d.memoryOffset(), begunAt);
        }
    }

    /**
     * Collective {@code s} passed its entry barrier, its arguments already copied in ({@link #scheduled}): the run
     * loses its flag and joins the run before it when equal. Nothing when {@code s} has no such run.
     *
     * @param s its sequence number
     * @return whether {@code s} had a scheduled run
     */
    boolean startScheduled(long s) {
        long[] r = ring;
        int e = head;
        if (r[e + FIRST_SEQ] != s || (r[e + SHAPE] & (SCHEDULED | FAILED)) != SCHEDULED) {
            return false;
        }
        r[e + SHAPE] &= ~SCHEDULED;
        int p = previous(e);
        if (r[p + LAST_SEQ] == s - 1 && r[p + SHAPE] == r[e + SHAPE] && r[p + COUNT] == r[e + COUNT]
                && r[p + BYTES] == r[e + BYTES] && r[p + MEMORY_ID] == r[e + MEMORY_ID]
                && r[p + MEMORY_OFFSET] == r[e + MEMORY_OFFSET]) {
            r[p + LAST_SEQ] = s;
            r[p + LAST_BEGUN] = r[e + LAST_BEGUN];
            r[e + FIRST_SEQ] = UNWRITTEN;
            r[e + LAST_SEQ] = UNWRITTEN;
            head = p;
        }
        return true;
    }

    /**
     * This rank arrived at collective {@code d.seq()} with these arguments and has not passed the barrier (failure
     * and message paths, from the descriptor it published): a run of one, SCHEDULED; nothing when it has one.
     *
     * @param d         its descriptor
     * @param operation its name
     */
    void scheduled(OpDescriptorLayout.Descriptor d, String operation) {
        if (find(d.seq()) < 0) {
            push(d.seq(), shapeOf(d, operation) | SCHEDULED, d.count(), d.bufferBytes(), d.memoryId(),
                    d.memoryOffset(), begunAt != 0 ? begunAt : CoarseClock.millis());
        }
    }

    /**
     * Collective {@code s} returned on this rank; a failed one stays failed.
     *
     * @param s its sequence number
     */
    void completed(long s) {
        long[] r = ring;
        int e = head;
        if (r[e + LAST_SEQ] != s || (r[e + SHAPE] & FAILED) != 0) {
            return;
        }
        if ((r[e + SHAPE] & SCHEDULED) != 0) {
            r[e + SHAPE] &= ~SCHEDULED; // returned without a recorded verdict: it passed
        }
        r[e + DONE_SEQ] = s;
        long now = CoarseClock.millis();
        if (r[e + LAST_ENDED] != now) {
            r[e + LAST_ENDED] = now;
        }
        if (s == r[e + FIRST_SEQ]) {
            r[e + FIRST_ENDED] = now;
        }
    }

    /**
     * Collective {@code s} failed on this rank: its run of one is flagged; the last of a longer newest run is split
     * off into a flagged run of its own; one with no run gets one without arguments (it never arrived). A collective
     * inside an older run (only a caller outside the control plane fails one there) is left as it is.
     *
     * @param s         its sequence number
     * @param operation its name
     * @param now       the failure's time
     * @param firstSeq  the recorder's first recorded collective: a run before it does not count
     */
    void failed(long s, String operation, long now, long firstSeq) {
        long[] r = ring;
        int e = s >= firstSeq ? find(s) : -1;
        if (e < 0) {
            push(s, nameBits(operation), -1, -1, -1, 0, now);
            e = head;
        } else if (r[e + FIRST_SEQ] != r[e + LAST_SEQ]) {
            if (e != head || r[e + LAST_SEQ] != s) {
                return;
            }
            r[e + LAST_SEQ] = s - 1;
            r[e + DONE_SEQ] = Math.min(r[e + DONE_SEQ], s - 1);
            long begun = r[e + LAST_BEGUN];
            r[e + LAST_BEGUN] = UNKNOWN; // s - 1's own begin was overwritten by s's
            push(s, r[e + SHAPE], r[e + COUNT], r[e + BYTES], r[e + MEMORY_ID], r[e + MEMORY_OFFSET], begun);
            e = head;
        }
        r[e + SHAPE] |= FAILED;
        r[e + FIRST_ENDED] = now;
        r[e + LAST_ENDED] = now;
    }

    /** {@return the newest recorded sequence number, or -2 while none} */
    long lastSeq() {
        return ring[head + LAST_SEQ];
    }

    /** {@return where the run holding collective {@code s} begins, or -1 when none does} */
    int find(long s) {
        long[] r = ring;
        int e = head;
        long after = Long.MAX_VALUE;
        for (int k = 0; k < capacity && r[e + FIRST_SEQ] >= 0 && r[e + LAST_SEQ] < after; k++) {
            if (r[e + FIRST_SEQ] <= s && s <= r[e + LAST_SEQ]) {
                return e;
            }
            after = r[e + FIRST_SEQ];
            e = previous(e);
        }
        return -1;
    }

    /**
     * The recorded collectives numbered {@code from} and later, oldest first, at most {@code n}: the runs expanded.
     *
     * @param from the first sequence number wanted
     * @param n    how many at most (the newest)
     * @return the collectives
     */
    List<FlightRecorder.Op> ops(long from, int n) {
        List<FlightRecorder.Op> out = new ArrayList<>();
        long[] r = ring;
        int e = head;
        long after = Long.MAX_VALUE;
        for (int k = 0; k < capacity && out.size() < n && r[e + FIRST_SEQ] >= 0 && r[e + LAST_SEQ] < after; k++) {
            for (long q = r[e + LAST_SEQ]; q >= Math.max(from, r[e + FIRST_SEQ]) && out.size() < n; q--) {
                out.add(op(e, q));
            }
            after = r[e + FIRST_SEQ];
            e = previous(e);
        }
        Collections.reverse(out);
        return out;
    }

    private FlightRecorder.Op op(int e, long q) {
        long[] r = ring;
        long shape = r[e + SHAPE];
        long first = r[e + FIRST_SEQ];
        long last = r[e + LAST_SEQ];
        FlightRecorder.State state = (shape & FAILED) != 0 ? FlightRecorder.State.FAILED
                : (shape & SCHEDULED) != 0 ? FlightRecorder.State.SCHEDULED
                : q <= r[e + DONE_SEQ] ? FlightRecorder.State.COMPLETED : FlightRecorder.State.STARTED;
        boolean ended = state == FlightRecorder.State.COMPLETED || state == FlightRecorder.State.FAILED;
        Long begun = q == first ? Long.valueOf(r[e + FIRST_BEGUN])
                : q == last && r[e + LAST_BEGUN] != UNKNOWN ? Long.valueOf(r[e + LAST_BEGUN]) : null;
        Long end = !ended ? Long.valueOf(0) : q == last ? Long.valueOf(r[e + LAST_ENDED])
                : q == first ? Long.valueOf(r[e + FIRST_ENDED]) : null;
        int name = (int) ((shape >>> NAME_SHIFT) & NAME_MASK);
        return new FlightRecorder.Op(q, names[name], (int) shape, r[e + COUNT], r[e + BYTES], r[e + MEMORY_ID],
                r[e + MEMORY_OFFSET], state, begun, end, first, last);
    }

    private int previous(int e) {
        return (e - STRIDE) & (ring.length - 1);
    }

    private void push(long s, long shape, long count, long bytes, long memoryId, long memoryOffset, long begun) {
        long[] r = ring;
        int e = (head + STRIDE) & (r.length - 1);
        r[e + FIRST_SEQ] = s;
        r[e + LAST_SEQ] = s;
        r[e + SHAPE] = shape;
        r[e + COUNT] = count;
        r[e + BYTES] = bytes;
        r[e + MEMORY_ID] = memoryId;
        r[e + MEMORY_OFFSET] = memoryOffset;
        r[e + DONE_SEQ] = s - 1;
        r[e + LAST_BEGUN] = begun;
        r[e + LAST_ENDED] = 0;
        r[e + FIRST_BEGUN] = begun;
        r[e + FIRST_ENDED] = 0;
        head = e;
    }

    /** The SHAPE word of a collective: {@link FlightRecorder#shapeOf}'s 32 bits and the name's index. */
    private long shapeOf(OpDescriptorLayout.Descriptor d, String operation) {
        return FlightRecorder.shapeOf(d) & 0xffff_ffffL | nameBits(operation);
    }

    /** The name's index, shifted into place (names are constants: the same one is compared by reference first). */
    private long nameBits(String operation) {
        if (operation == lastName) {
            return lastNameBits;
        }
        int n = 0;
        while (n < nameCount && !java.util.Objects.equals(names[n], operation)) {
            n++;
        }
        if (n == nameCount) {
            if (n == names.length) {
                names = Arrays.copyOf(names, 2 * n);
            }
            names[nameCount++] = operation;
        }
        lastName = operation;
        lastNameBits = (long) n << NAME_SHIFT;
        return lastNameBits;
    }
}
