package org.symmem4j.benchmarks;

import java.io.File;
import java.io.IOException;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.SplittableRandom;
import java.util.concurrent.ConcurrentHashMap;

import net.openhft.chronicle.map.ChronicleMap;
import org.symmem4j.parallel.Group;
import org.symmem4j.state.SymmetricHashMap;

/**
 * One shared map of {@link #KEYS} long keys to {@link #VALUE_BYTES}-byte values, as {@link MapBenchmark} measures it:
 * symmem4j's {@link SymmetricHashMap} (2 processes, partitions in each other's symmetric memory), Chronicle Map
 * persisted to a file in {@code /dev/shm} that both processes map, or {@link ConcurrentHashMap} in one JVM (the
 * floor: no copy, no process boundary). Every kind copies the value out on a get and in on a put, except the floor,
 * which hands references.
 */
public abstract class SharedMapPair implements AutoCloseable {

    /** Keys in the map. */
    static final int KEYS = 50_000;
    /** Bytes of every value. */
    static final int VALUE_BYTES = 64;

    /** The maps measured. */
    public enum Kind {
        SYMMEM, CHRONICLE, CONCURRENT_HASH_MAP
    }

    /** Reads {@code key}'s value; returns a byte of it. */
    abstract int get(long key);

    /** Writes {@code key}'s value. */
    abstract void put(long key);

    @Override
    public abstract void close();

    /**
     * Collective for SYMMEM: opens the map ({@code file} for Chronicle; rank 0 creates it).
     *
     * @param kind  which map
     * @param group the 2-rank group (unused by the floor)
     * @param file  Chronicle's file
     */
    static SharedMapPair open(Kind kind, Group group, File file) throws IOException {
        return switch (kind) {
            case SYMMEM -> new Symmem(group);
            case CHRONICLE -> new Chronicle(file);
            case CONCURRENT_HASH_MAP -> FLOOR;
        };
    }

    /** Puts every key once (rank 0, before the load starts). */
    void fill() {
        for (long k = 0; k < KEYS; k++) {
            put(k);
        }
    }

    /**
     * The other rank's load: 50% gets, 50% puts of random keys until {@code stop} says so.
     *
     * @param stop polled every 1024 operations
     * @return operations done
     */
    long load(java.util.function.BooleanSupplier stop) {
        SplittableRandom rnd = new SplittableRandom(1);
        long ops = 0;
        while ((ops & 1023) != 0 || !stop.getAsBoolean()) {
            long key = rnd.nextInt(KEYS);
            if ((ops & 1) == 0) {
                get(key);
            } else {
                put(key);
            }
            ops++;
        }
        return ops;
    }

    private static final ConcurrentHashMap<Long, byte[]> FLOOR_MAP = new ConcurrentHashMap<>();
    private static final SharedMapPair FLOOR = new SharedMapPair() {
        private final byte[] value = new byte[VALUE_BYTES];

        @Override
        int get(long key) {
            byte[] v = FLOOR_MAP.get(key);
            return v == null ? -1 : v[0];
        }

        @Override
        void put(long key) {
            FLOOR_MAP.put(key, value);
        }

        @Override
        public void close() {
        }
    };

    private static final class Symmem extends SharedMapPair {
        private final SymmetricHashMap map;
        private final MemorySegment value = MemorySegment.ofArray(new long[VALUE_BYTES / 8]);
        private final MemorySegment dst = MemorySegment.ofArray(new long[VALUE_BYTES / 8]);

        Symmem(Group group) {
            // slots for 1.3x the keys in all: ~38% full with 2 ranks
            map = SymmetricHashMap.create(group, 8, VALUE_BYTES, Integer.highestOneBit(KEYS) * 2);
        }

        @Override
        int get(long key) {
            return map.get(key, dst) ? dst.get(ValueLayout.JAVA_BYTE, 0) : -1;
        }

        @Override
        void put(long key) {
            value.set(ValueLayout.JAVA_LONG, 0, key);
            map.put(key, value);
        }

        @Override
        public void close() {
            map.close();
        }
    }

    private static final class Chronicle extends SharedMapPair {
        private final ChronicleMap<Long, byte[]> map;
        private final byte[] value = new byte[VALUE_BYTES];

        Chronicle(File file) throws IOException {
            map = ChronicleMap.of(Long.class, byte[].class).name("symmem4j-bench").entries(KEYS * 2L)
                    .constantValueSizeBySample(new byte[VALUE_BYTES]).createPersistedTo(file);
        }

        @Override
        int get(long key) {
            byte[] v = map.get(key);
            return v == null ? -1 : v[0];
        }

        @Override
        void put(long key) {
            map.put(key, value);
        }

        @Override
        public void close() {
            map.close();
        }
    }

    /**
     * Rank 1's side: opens the map, waits for rank 0's fill, runs the load until rank 0 says stop.
     *
     * @param kind  SYMMEM or CHRONICLE
     * @param group the 2-rank group
     * @param file  Chronicle's file
     */
    static void serve(Kind kind, Group group, File file) throws IOException {
        try (SharedMapPair map = open(kind, group, file);
             org.symmem4j.parallel.SymmetricMemory control = org.symmem4j.parallel.SymmetricMemory.allocate(group, 0)) {
            group.allGatherBytes("map-bench-filled", new byte[0]);
            long ops = map.load(() -> control.readSignal(0) > 0);
            System.out.println("map bench peer: " + ops + " operations of load");
            group.allGatherBytes("map-bench-done", new byte[0]);
        }
    }
}
