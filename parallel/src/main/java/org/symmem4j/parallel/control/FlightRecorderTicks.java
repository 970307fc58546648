package org.symmem4j.parallel.control;

import java.util.function.LongSupplier;
import org.symmem4j.parallel.trace.CoarseClock;

/**
 * The flight recorder's times, taken off the rank's thread: {@link CoarseClock}'s thread samples, once a millisecond,
 * how many collectives the rank has begun and how many it has completed (counters the hot path keeps anyway, or with
 * one plain store), and keeps a row (epoch ms, begun, completed) whenever either moved. A collective's begin is then the
 * first row that counts it begun, its end the first row that counts it completed: about 1 ms late (more when the
 * machine is loaded and the ticks run late), the resolution the entries had when the rank stamped them itself from a
 * field that thread refreshed, at no instruction of the rank's. Measured: the stamps, a clock read and two stores per
 * collective, cost about 12 ns of a 1 KiB one-shot all-reduce (1.2 %) that the entry without them did not
 * ({@code bench/results/2026-11-30-recorder-ticks.md}).
 *
 * <pre>
 *  row r (of the newest {@code capacity}, a ring):  millis[r]  begun[r]  completed[r]
 *  rows only grow: begun and completed never go down, so "the first row with begun &gt; s" is a binary search
 * </pre>
 *
 * <p><b>Memory ordering.</b> The counters are written by the rank's thread and read here with opaque loads (each read
 * is whole and no older than the last one); nothing is published by them, a late value only dates a collective one
 * tick later. Completed is read before begun, so a row never counts a collective completed that it does not count
 * begun. The rows are guarded by this object's monitor: the ticker appends under it, and the rank's failure path reads
 * under it (never the hot path).
 */
final class FlightRecorderTicks implements CoarseClock.Listener {

    private final LongSupplier begun;
    private final LongSupplier completed;
    private final int mask;
    private final long[] millis;
    private final long[] begunAt;
    private final long[] completedAt;
    /** Rows appended so far (the newest is {@code rows - 1}). */
    private long rows;
    private long lastBegun = Long.MIN_VALUE;
    private long lastCompleted = Long.MIN_VALUE;

    /**
     * @param begun     how many collectives the rank has begun (its next sequence number), read off its thread
     * @param completed how many it has completed, read off its thread
     * @param entries   the recorder's capacity: the rows kept cover at least its entries (a collective moves each
     *                  counter once, so 2 rows per collective at most; 4 per entry are kept)
     */
    FlightRecorderTicks(LongSupplier begun, LongSupplier completed, int entries) {
        this.begun = begun;
        this.completed = completed;
        int capacity = Integer.highestOneBit(Math.max(64, 4 * entries) - 1) << 1; // a power of two, at least 4 per entry
        this.mask = capacity - 1;
        this.millis = new long[capacity];
        this.begunAt = new long[capacity];
        this.completedAt = new long[capacity];
    }

    @Override
    public synchronized void tick(long nowMillis) {
        long c = completed.getAsLong(); // first: see the class comment
        long b = begun.getAsLong();
        c = Math.max(c, lastCompleted);
        b = Math.max(b, Math.max(c, lastBegun));
        if (b == lastBegun && c == lastCompleted) {
            return;
        }
        int i = (int) (rows & mask);
        millis[i] = nowMillis;
        begunAt[i] = b;
        completedAt[i] = c;
        rows++;
        lastBegun = b;
        lastCompleted = c;
    }

    /**
     * {@return epoch ms of the first tick that counted collective {@code s} begun; 0 when none did yet, or when the
     * rows kept no longer reach back to it}
     *
     * @param s a sequence number
     */
    synchronized long begunMillis(long s) {
        return firstReaching(begunAt, s + 1);
    }

    /**
     * {@return epoch ms of the first tick that counted collective {@code s} completed; 0 when none did yet, or when the
     * rows kept no longer reach back to it}
     *
     * @param s a sequence number
     */
    synchronized long completedMillis(long s) {
        return firstReaching(completedAt, s + 1);
    }

    /** The time of the first row whose count reaches {@code n}, by binary search (counts never go down). */
    private long firstReaching(long[] counts, long n) {
        long oldest = Math.max(0, rows - (mask + 1));
        long lo = oldest;
        long hi = rows;
        while (lo < hi) {
            long mid = (lo + hi) >>> 1;
            if (counts[(int) (mid & mask)] >= n) {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        if (lo == rows || lo == oldest && oldest > 0) {
            return 0; // not counted yet, or counted already by the oldest row kept (its first tick is gone)
        }
        return millis[(int) (lo & mask)];
    }
}
