package org.symmem4j.parallel.control;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.lang.reflect.Field;
import java.lang.reflect.Method;
import java.lang.reflect.Modifier;
import org.junit.jupiter.api.Test;
import org.symmem4j.parallel.Algorithm;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.ReduceOp;
import org.symmem4j.parallel.control.OpDescriptorLayout.Descriptor;
import org.symmem4j.parallel.control.OpDescriptorLayout.Kind;
import org.symmem4j.parallel.control.OpDescriptorLayout.Problem;

/**
 * Where the flight recorder keeps what it writes per collective (issue #36): in the default off-heap storage, a
 * page-aligned segment whose counters sit at page offset 3968 and whose entries start on the next page ({@link
 * FlightRecorderLayout}), and the fields its hot path reads padded by 128 bytes on both sides within the recorder
 * object ({@link FlightRecorderFields}).
 */
class FlightRecorderPlacementTest {

    @Test
    void theDefaultStorageIsAPageAlignedSegmentWithTheCountersAndEntriesWhereTheLayoutSays() throws Exception {
        FlightRecorder r = FlightRecorder.create(0, 2, "host-m1", 16);
        MemorySegment storage = (MemorySegment) hot("storage").get(r);
        assertNotNull(storage, "the default storage is off-heap (symmem4j.flight.recorder.storage=off-heap)");
        assertEquals(0, storage.address() % FlightRecorderLayout.PAGE_BYTES, "page-aligned");
        assertEquals(FlightRecorderLayout.bytes(16, 8), storage.byteSize());
        assertEquals(2 * FlightRecorderLayout.PAGE_BYTES, storage.byteSize()); // 4096 + 16 * 64 + 128, whole pages
        assertEquals(-1, storage.get(ValueLayout.JAVA_LONG, FlightRecorderLayout.LAST_SEQ_OFFSET));
        assertEquals(-1, storage.get(ValueLayout.JAVA_LONG, FlightRecorderLayout.STARTED_SEQ_OFFSET));
        Descriptor d = new Descriptor().set(21, Kind.ALL_REDUCE, DType.FLOAT32.ordinal(), ReduceOp.SUM.ordinal(),
                Algorithm.ONE_SHOT.ordinal(), -1, 256, 1024, 7, 64, 0, Problem.NONE);
        r.arrived(d, "all-reduce");
        assertEquals(21, storage.get(ValueLayout.JAVA_LONG, FlightRecorderLayout.LAST_SEQ_OFFSET));
        r.started(21);
        assertEquals(21, storage.get(ValueLayout.JAVA_LONG, FlightRecorderLayout.STARTED_SEQ_OFFSET));
        long entry = FlightRecorderLayout.ENTRIES_OFFSET + (21 & 15) * 64L;
        assertEquals(21, storage.get(ValueLayout.JAVA_LONG, entry)); // SEQ
        assertEquals(256, storage.get(ValueLayout.JAVA_LONG, entry + 8)); // COUNT
        assertEquals(1024, storage.get(ValueLayout.JAVA_LONG, entry + 16)); // BYTES
        // nothing else was written: the head padding, every other entry and the tail stay zero
        for (long at = 0; at < storage.byteSize(); at += Long.BYTES) {
            boolean written = at == FlightRecorderLayout.LAST_SEQ_OFFSET || at == FlightRecorderLayout.STARTED_SEQ_OFFSET
                    || at >= entry && at < entry + 64;
            if (!written) {
                assertEquals(0, storage.get(ValueLayout.JAVA_LONG, at), "byte offset " + at);
            }
        }
        assertTrue(r.lastOps(1).equals("all-reduce#21 STARTED"), r.lastOps(1));
        assertTrue(r.placement().startsWith("recorder off-heap at 0x") && r.placement().contains("(page offset 0,"),
                r.placement());
    }

    @Test
    void verifyRefusesASegmentTheLayoutDidNotPlace() {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment unaligned = arena.allocate(FlightRecorderLayout.bytes(4, 8) + 64, 4096).asSlice(64,
                    FlightRecorderLayout.bytes(4, 8));
            IllegalStateException e = assertThrows(IllegalStateException.class,
                    () -> FlightRecorderLayout.verify(unaligned, 4, 8));
            assertTrue(e.getMessage().contains("expected a 4096-byte aligned segment") && e.getMessage().contains("fix:"),
                    e.getMessage());
        }
    }

    /**
     * The hot fields lie at least 128 bytes from the object's start and from the recorder's own (cold) fields after
     * them: read with {@code sun.misc.Unsafe.objectFieldOffset} through reflection (a test's look at the layout only).
     * Fails if HotSpot fills a gap of the head padding with a hot field (a 4-byte field after a 12-byte header).
     */
    @Test
    void theHotFieldsArePaddedOnBothSides() throws Exception {
        Class<?> unsafeClass = Class.forName("sun.misc.Unsafe");
        Field theUnsafe = unsafeClass.getDeclaredField("theUnsafe");
        theUnsafe.setAccessible(true);
        Object unsafe = theUnsafe.get(null);
        Method offsetOf = unsafeClass.getMethod("objectFieldOffset", Field.class);
        long hotMin = Long.MAX_VALUE;
        long hotMax = Long.MIN_VALUE;
        for (Field f : FlightRecorderFields.Hot.class.getDeclaredFields()) {
            if (!Modifier.isStatic(f.getModifiers())) {
                long at = (long) offsetOf.invoke(unsafe, f);
                hotMin = Math.min(hotMin, at);
                hotMax = Math.max(hotMax, at);
            }
        }
        assertTrue(hotMin >= 128, "first hot field at byte " + hotMin + ", expected >= 128 (the head padding)");
        for (Field f : FlightRecorder.class.getDeclaredFields()) {
            if (!Modifier.isStatic(f.getModifiers())) {
                long at = (long) offsetOf.invoke(unsafe, f);
                assertTrue(at - hotMax >= 128, "the recorder's field " + f.getName() + " at byte " + at
                        + ", the last hot field at " + hotMax + ": expected 128 bytes of tail padding between them");
            }
        }
    }

    private static Field hot(String name) throws NoSuchFieldException {
        Field f = FlightRecorderFields.Hot.class.getDeclaredField(name);
        f.setAccessible(true);
        return f;
    }
}
