package org.symmem4j.parallel.control;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;

/**
 * Layout of one rank's flight-recorder storage off the heap ({@link
 * org.symmem4j.parallel.Configuration#FLIGHT_RECORDER_STORAGE}, the default): one segment per recorder, allocated
 * page-aligned, so that where each word lies against a cache line and a 4 KiB page is the same in every JVM, and no
 * other rank's data, pad or heap object shares a line with what the recorder writes per collective (issue #36: the
 * one-shot cost moved between 4 and 60 ns from fork to fork while the recorder's heap array and counters lay wherever
 * the collector put them).
 *
 * <pre>
 *  byte offset (from the segment's page-aligned base)  field                      written by           read by
 *  0 .. 3967                 head padding, zero, never touched                    nobody               nobody
 *  3968  (page offset 3968)  LAST_SEQ (long): newest recorded collective          this rank's thread   the same
 *  3976                      STARTED_SEQ (long): newest one whose entry           this rank's thread   the same
 *                            barrier passed
 *  3984 .. 4095              rest of the counters' 128-byte line pair, zero       nobody               nobody
 *  4096 + stride * slot      ENTRY of slot (stride 64 bytes, 32 compact:          this rank's thread   the same
 *                            {@link FlightRecorder}'s class comment)
 *  4096 + stride * capacity  tail padding, 128 bytes, zero; the segment           nobody               nobody
 *                            rounded up to a whole page
 * </pre>
 *
 * <p>Why page offset 3968 for the counters, which are written on every collective: a load that follows a store whose
 * address matches it in bits 0-11 waits for that store on x86 (4 KiB aliasing), and the loads that follow the
 * counters' stores are the entry barrier's polls and the reads of the peers' staged data. A signal pad's hot lines for
 * up to 4 ranks lie at page offsets 0-2303 ({@link SignalPadLayout}: header, abort word, entry and barrier lines), and a
 * 1 KiB all-reduce stages at the start of a page; 3968 is neither. The entries walk every page offset, one line per
 * collective, so an entry aliases a given pad line once per 64 collectives whatever the base. Each 128-byte pair
 * (adjacent-line prefetch) holds this recorder's words only.
 *
 * <p>Nothing here is shared between threads: the rank's thread that runs the communicator writes and reads it (dumps
 * too), so there is no release/acquire pair and plain accesses are enough ({@link FlightRecorder}'s memory-ordering
 * note). The segment belongs to an automatic arena: it is freed when the recorder is collected, as its heap array was.
 */
public final class FlightRecorderLayout {

    /** A page: the segment's alignment, and what its size is rounded up to. */
    public static final long PAGE_BYTES = 4096;
    /** Byte offset of the newest recorded collective (long). */
    public static final long LAST_SEQ_OFFSET = 3968;
    /** Byte offset of the newest collective whose entry barrier passed (long). */
    public static final long STARTED_SEQ_OFFSET = LAST_SEQ_OFFSET + Long.BYTES;
    /** Byte offset of the first entry: the second page. */
    public static final long ENTRIES_OFFSET = PAGE_BYTES;
    /** Bytes of zero after the last entry. */
    public static final long TAIL_BYTES = 128;

    /**
     * All of memory as one segment, a constant (as {@code RingBufferLayout}'s hot path uses one): an access through it
     * at an address reads no {@code MemorySegment} object and no arena session, whose heap lines a collection could put
     * next to a field another thread writes, and carries no per-segment check beyond the alignment. Only for
     * addresses inside a recorder's storage while the recorder holds that storage's segment (its automatic arena frees
     * the memory once the segment is unreachable, and the control plane holds its recorder for the communicator's life).
     */
    private static final MemorySegment EVERYTHING = MemorySegment.NULL.reinterpret(Long.MAX_VALUE);

    private FlightRecorderLayout() {
    }

    /**
     * {@return the long at index {@code index} (8 bytes each) of the storage at {@code base}}: a plain load, the
     * recorder's thread being the only one that reads and writes it
     *
     * @param base  the storage's address (page-aligned, {@link #allocate})
     * @param index a long index below {@link #bytes} / 8
     */
    static long getAt(long base, int index) {
        return EVERYTHING.get(ValueLayout.JAVA_LONG, base + (long) index * Long.BYTES);
    }

    /**
     * Stores {@code value} at long index {@code index} of the storage at {@code base}: a plain store (one thread).
     *
     * @param base  the storage's address (page-aligned, {@link #allocate})
     * @param index a long index below {@link #bytes} / 8
     * @param value the value
     */
    static void putAt(long base, int index, long value) {
        EVERYTHING.set(ValueLayout.JAVA_LONG, base + (long) index * Long.BYTES, value);
    }

    /**
     * {@return the bytes of the storage of {@code capacity} entries of {@code strideLongs} longs}, a whole number of
     * pages
     *
     * @param capacity    entries
     * @param strideLongs longs per entry
     */
    public static long bytes(int capacity, int strideLongs) {
        long used = ENTRIES_OFFSET + (long) capacity * strideLongs * Long.BYTES + TAIL_BYTES;
        return (used + PAGE_BYTES - 1) / PAGE_BYTES * PAGE_BYTES;
    }

    /**
     * Allocates the zeroed, page-aligned storage of one recorder, with both counters at -1 (nothing recorded).
     *
     * @param capacity    entries
     * @param strideLongs longs per entry
     * @return the segment, freed when it becomes unreachable
     */
    static MemorySegment allocate(int capacity, int strideLongs) {
        MemorySegment s = Arena.ofAuto().allocate(bytes(capacity, strideLongs), PAGE_BYTES);
        // plain: the segment is not published to another thread; the recorder's thread reads it (construction happens
        // before the communicator is handed to the thread that runs it)
        s.setAtIndex(ValueLayout.JAVA_LONG, LAST_SEQ_OFFSET / Long.BYTES, -1);
        s.setAtIndex(ValueLayout.JAVA_LONG, STARTED_SEQ_OFFSET / Long.BYTES, -1);
        verify(s, capacity, strideLongs);
        return s;
    }

    /**
     * Checks that {@code storage} is one recorder's storage as this layout places it.
     *
     * @param storage     the segment
     * @param capacity    entries
     * @param strideLongs longs per entry
     * @throws IllegalStateException when it is not page-aligned or not {@link #bytes} long
     */
    public static void verify(MemorySegment storage, int capacity, int strideLongs) {
        long expected = bytes(capacity, strideLongs);
        if (storage.address() % PAGE_BYTES != 0 || storage.byteSize() != expected) {
            throw new IllegalStateException("flight recorder storage at address=0x" + Long.toHexString(storage.address())
                    + " bytes=" + storage.byteSize() + ", expected a " + PAGE_BYTES + "-byte aligned segment of bytes="
                    + expected + " for capacity=" + capacity + " stride=" + strideLongs + " longs (fix: allocate it with"
                    + " FlightRecorderLayout.allocate)");
        }
    }

    /**
     * {@return where a segment lies against lines and pages, for placement reports}: "0x7f..000 (page offset 0, line
     * offset 0)"
     *
     * @param address a native address
     */
    public static String describe(long address) {
        return "0x" + Long.toHexString(address) + " (page offset " + (address % PAGE_BYTES) + ", line offset "
                + (address % 64) + ")";
    }
}
