package org.symmem4j.parallel.control;

import java.lang.foreign.MemorySegment;

/**
 * The fields {@link FlightRecorder}'s hot path reads on every collective, with 128 bytes of padding on both sides, so
 * that no field another thread writes (a peer rank's control plane, synchronizer or recorder, which a garbage
 * collection may copy next to this one) shares a cache line, or an adjacent-line prefetch pair, with them (issue #36).
 * HotSpot lays out a superclass's fields before its subclass's, so the chain head padding, hot fields, tail padding
 * puts them between the two pads, as JCTools pads its queues' indices; the recorder's other fields (the dump's, the
 * failure path's) come after the tail. HotSpot also fills a superclass's gaps with a subclass's small fields (a 4-byte
 * field into the gap after a 12-byte header): each pad class therefore ends with an int of its own that takes that
 * gap first. {@code FlightRecorderPlacementTest} reads the offsets and fails if a hot field lies within 128 bytes of
 * the object's start or of the recorder's own fields.
 *
 * <p>On the hot path these fields are read, and one is written: {@link Hot#completedThrough}, once per collective
 * (a new operation name writes the name fields, once per name); the rest of what the recorder writes per collective
 * lies in its storage ({@link FlightRecorderLayout}).
 */
final class FlightRecorderFields {

    private FlightRecorderFields() {
    }

    /** 128 bytes before the hot fields. */
    @SuppressWarnings("unused")
    abstract static class HeadPad {
        long h00;
        long h01;
        long h02;
        long h03;
        long h04;
        long h05;
        long h06;
        long h07;
        long h08;
        long h09;
        long h10;
        long h11;
        long h12;
        long h13;
        long h14;
        long h15;
        /** Fills the 4-byte gap after a 12-byte header, which HotSpot would otherwise give a subclass's small field. */
        int h16;
    }

    /** The fields the hot path reads. */
    abstract static class Hot extends HeadPad {
        /** Capacity - 1 (a power of two minus one). */
        final int mask;
        /**
         * The entries: the {@link FlightRecorderLayout} segment, page-aligned, held so that its automatic arena keeps
         * the memory while this recorder lives.
         */
        final MemorySegment storage;
        /** By slot, the names of entries past the name index's range (a 2048th distinct name); null until one is. */
        String[] what;
        /** The distinct operation names seen, by index (the entries carry the index). */
        String[] names;
        int nameCount;
        /** The first four of {@link #names} (null until seen): the hot path compares these references only. */
        String name0;
        String name1;
        String name2;
        String name3;
        /**
         * How many collectives returned on this rank (the newest's number plus one): written once per collective by
         * {@code FlightRecorder.completed}, opaque, and read by {@link FlightRecorderTicks} on the clock's thread.
         */
        long completedThrough;

        Hot(int mask, MemorySegment storage, String[] names) {
            this.mask = mask;
            this.storage = storage;
            this.names = names;
        }
    }

    /** 128 bytes after the hot fields. */
    @SuppressWarnings("unused")
    abstract static class TailPad extends Hot {
        long t00;
        long t01;
        long t02;
        long t03;
        long t04;
        long t05;
        long t06;
        long t07;
        long t08;
        long t09;
        long t10;
        long t11;
        long t12;
        long t13;
        long t14;
        long t15;
        /** Fills a 4-byte gap after the hot fields, which HotSpot would otherwise give a subclass's small field. */
        int t16;

        TailPad(int mask, MemorySegment storage, String[] names) {
            super(mask, storage, names);
        }
    }
}
