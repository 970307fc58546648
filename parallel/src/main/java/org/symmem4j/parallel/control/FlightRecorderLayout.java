package org.symmem4j.parallel.control;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;

/**
 * Layout of one rank's flight-recorder storage: one off-heap segment per recorder, allocated page-aligned, so that
 * where each entry lies against a cache line and a 4 KiB page is the same in every JVM, and no other rank's data, pad
 * or heap object shares a line with what the recorder writes per collective (issue #36: the one-shot cost moved
 * between 4 and 60 ns from fork to fork while the recorder's heap array lay wherever the collector put it).
 *
 * <pre>
 *  byte offset (from the segment's page-aligned base)  field                        written by           read by
 *  0 .. 4095                 head padding, zero, never touched                      nobody               nobody
 *  4096 + 128 * slot         ENTRY of slot: this rank's own descriptor line and     this rank's thread   the same
 *                            the recorder's words ({@link FlightRecorder}'s class
 *                            comment)
 *  4096 + 128 * capacity     tail padding, 128 bytes, zero; the segment             nobody               nobody
 *                            rounded up to a whole page
 * </pre>
 *
 * <p>The head is a whole page (it held two counters at page offset 3968 in an earlier layout, none now), so the
 * entries start on the segment's second page, where they lay when they were measured ({@code
 * bench/results/2026-11-30-recorder-own-line-32core.md}); the entries walk every page offset, one 128-byte line pair
 * per collective, holding this recorder's words only.
 *
 * <p>Nothing here is shared between threads: the rank's thread that runs the communicator writes and reads it (dumps
 * too), so there is no release/acquire pair and plain accesses are enough ({@link FlightRecorder}'s memory-ordering
 * note). The segment belongs to an automatic arena: it is freed when the recorder is collected.
 */
public final class FlightRecorderLayout {

    /** A page: the segment's alignment, and what its size is rounded up to. */
    public static final long PAGE_BYTES = 4096;
    /** Byte offset of the first entry: the second page. */
    public static final long ENTRIES_OFFSET = PAGE_BYTES;
    /** Bytes of one entry: a signal pad's descriptor line (128 bytes), the recorder's words in its unused tail. */
    public static final long ENTRY_BYTES = SignalPadLayout.LINE_BYTES;
    /** Bytes of zero after the last entry. */
    public static final long TAIL_BYTES = 128;

    private FlightRecorderLayout() {
    }

    /**
     * {@return the bytes of the storage of {@code capacity} entries}, a whole number of pages
     *
     * @param capacity entries
     */
    public static long bytes(int capacity) {
        long used = ENTRIES_OFFSET + capacity * ENTRY_BYTES + TAIL_BYTES;
        return (used + PAGE_BYTES - 1) / PAGE_BYTES * PAGE_BYTES;
    }

    /**
     * Allocates the zeroed, page-aligned storage of one recorder (nothing recorded: every entry's BEGUN is 0).
     *
     * @param capacity entries
     * @return the segment, freed when it becomes unreachable
     */
    static MemorySegment allocate(int capacity) {
        MemorySegment s = Arena.ofAuto().allocate(bytes(capacity), PAGE_BYTES);
        verify(s, capacity);
        return s;
    }

    /**
     * Checks that {@code storage} is one recorder's storage as this layout places it.
     *
     * @param storage  the segment
     * @param capacity entries
     * @throws IllegalStateException when it is not page-aligned or not {@link #bytes} long
     */
    public static void verify(MemorySegment storage, int capacity) {
        long expected = bytes(capacity);
        if (storage.address() % PAGE_BYTES != 0 || storage.byteSize() != expected) {
            throw new IllegalStateException("flight recorder storage at address=0x" + Long.toHexString(storage.address())
                    + " bytes=" + storage.byteSize() + ", expected a " + PAGE_BYTES + "-byte aligned segment of bytes="
                    + expected + " for capacity=" + capacity + " (fix: allocate it with FlightRecorderLayout.allocate)");
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
