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
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.symmem4j.parallel.Algorithm;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.ReduceOp;
import org.symmem4j.parallel.control.OpDescriptorLayout.Descriptor;
import org.symmem4j.parallel.control.OpDescriptorLayout.Kind;
import org.symmem4j.parallel.control.OpDescriptorLayout.Problem;
import org.symmem4j.parallel.trace.Json;

/**
 * Where the flight recorder keeps what it writes per collective (issue #36): a page-aligned segment whose entries
 * start on its second page, each the rank's own 128-byte descriptor line and the recorder's words after it, no counter
 * written per collective ({@link FlightRecorderLayout}), and the fields its hot path reads padded by 128 bytes on both
 * sides within the recorder object ({@link FlightRecorderFields}).
 */
class FlightRecorderPlacementTest {

    @Test
    void theDefaultStorageIsAPageAlignedSegmentWhoseEntriesAreTheRanksOwnDescriptorLines() throws Exception {
        FlightRecorder r = FlightRecorder.create(0, 2, "host-m1", 16);
        MemorySegment storage = (MemorySegment) hot("storage").get(r);
        assertNotNull(storage, "the storage is off-heap");
        assertEquals(0, storage.address() % FlightRecorderLayout.PAGE_BYTES, "page-aligned");
        assertEquals(FlightRecorderLayout.bytes(16), storage.byteSize());
        assertEquals(2 * FlightRecorderLayout.PAGE_BYTES, storage.byteSize()); // 4096 + 16 * 128 + 128, whole pages
        Descriptor d = new Descriptor().set(21, Kind.ALL_REDUCE, DType.FLOAT32.ordinal(), ReduceOp.SUM.ordinal(),
                Algorithm.ONE_SHOT.ordinal(), -1, 256, 1024, 7, 64, 0, Problem.NONE);
        r.arrived(d, "all-reduce");
        assertEquals("all-reduce#21 SCHEDULED", r.lastOps(1));
        r.started(21);
        long entry = FlightRecorderLayout.ENTRIES_OFFSET + (21 & 15) * 128L;
        // the entry is this rank's own line, byte for byte as arrive() writes it into a pad, but for the epoch word
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment line = arena.allocate(OpDescriptorLayout.BYTES);
            d.write(line, 0);
            for (long at = OpDescriptorLayout.SEQ; at < OpDescriptorLayout.BYTES; at++) {
                assertEquals(line.get(ValueLayout.JAVA_BYTE, at), storage.get(ValueLayout.JAVA_BYTE, entry + at),
                        "descriptor byte " + at);
            }
        }
        assertEquals(21, storage.get(ValueLayout.JAVA_LONG, entry + 8)); // SEQ
        assertEquals(256, storage.get(ValueLayout.JAVA_LONG, entry + 40)); // COUNT
        assertEquals(1024, storage.get(ValueLayout.JAVA_LONG, entry + 48)); // BYTES
        assertEquals(0, storage.get(ValueLayout.JAVA_LONG, entry + 80), "BEGUN: not stamped per collective");
        assertEquals(0, storage.get(ValueLayout.JAVA_LONG, entry + 88), "ENDED: not stamped per collective");
        assertEquals(22, storage.get(ValueLayout.JAVA_LONG, entry + 96)); // STARTED: the barrier passed (seq + 1)
        // no counter is written per collective: nothing but the entry was written (the head page stays zero)
        for (long at = 0; at < storage.byteSize(); at += Long.BYTES) {
            boolean written = at >= entry && at < entry + 128;
            if (!written) {
                assertEquals(0, storage.get(ValueLayout.JAVA_LONG, at), "byte offset " + at);
            }
        }
        assertEquals("all-reduce#21 STARTED", r.lastOps(1));
        assertEquals(22, r.recorded()); // numbers 0-21 since the recorder began, as before: the ring holds #21
        r.completed(21);
        assertEquals(0, storage.get(ValueLayout.JAVA_LONG, entry + 88), "ENDED: the ticks date it, not a stamp");
        assertEquals("all-reduce#21 COMPLETED", r.lastOps(1));
        @SuppressWarnings("unchecked")
        Map<String, Object> op = ((List<Map<String, Object>>) ((Map<String, Object>) Json.parse(r.toJson("x")))
                .get("ops")).getLast();
        long now = System.currentTimeMillis();
        double begun = (Double) op.get("begunMillis");
        double ended = (Double) op.get("endedMillis");
        assertTrue(begun > now - 60_000 && begun <= ended && ended <= now, op.toString()); // dated by the ticks
        assertTrue(r.placement().startsWith("recorder own-line at 0x") && r.placement().contains("(page offset 0,"),
                r.placement());
    }

    @Test
    void verifyRefusesASegmentTheLayoutDidNotPlace() {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment unaligned = arena.allocate(FlightRecorderLayout.bytes(4) + 64, 4096).asSlice(64,
                    FlightRecorderLayout.bytes(4));
            IllegalStateException e = assertThrows(IllegalStateException.class,
                    () -> FlightRecorderLayout.verify(unaligned, 4));
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
