package org.symmem4j.state;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;

import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.PeerTimeoutException;
import org.symmem4j.parallel.cuda.CudaTransport;
import org.symmem4j.parallel.cuda.WorkerProcesses;
import org.symmem4j.parallel.group.ProcessGroup;

/**
 * One rank of {@link CudaStateProcessTest}, a process of its own started by {@link WorkerProcesses} with torchrun's
 * variables, on a CUDA process group. {@code args[0]} is the scenario, {@code args[1]} a directory the ranks leave
 * marker files in: the survivors' rendezvous after the kill, which no group collective can be (the group waits for
 * the dead rank too).
 */
public final class CudaStateProcessWorker {

    private CudaStateProcessWorker() {
    }

    /** Compute-increments of each of the 16 shared keys per rank, before the kill, and per survivor after it. */
    static final int ROUNDS = 50;
    private static final long MARKER_WAIT_NANOS = Duration.ofSeconds(90).toNanos();

    public static void main(String[] args) {
        WorkerProcesses.exitWith(() -> switch (args[0]) {
            case "device-map-killed-holder" -> deviceMapKilledHolder(Path.of(args[1]));
            default -> throw new IllegalArgumentException("unknown scenario " + args[0]);
        });
    }

    /**
     * Every rank compute-increments 16 keys {@link #ROUNDS} times, concurrently, and checks the counts (world x
     * ROUNDS each); rank 0 puts key {@code k} (the first key from 1000 on that a survivor owns, so its partition
     * outlives the killed process). The last rank then locks {@code k}'s slot in a compute, leaves a marker and,
     * while the survivors already wait for the slot (their get's bounded wait, naming it as the holder), kills itself
     * with SIGKILL. The survivors must find {@code k} absent (its slot retired, never the half-computed value),
     * a group exchange must fail naming the dead rank, and the map must stay usable: rank 0 puts {@code k} again
     * and every survivor reads it bitwise, and further compute-increments on keys the survivors own add up exactly.
     */
    private static String deviceMapKilledHolder(Path markers) throws Exception {
        CudaTransport cuda = CudaTransport.create();
        ProcessGroup group = ProcessGroup.fromEnvironment(GroupOptions.defaults().withTimeout(Duration.ofSeconds(60)),
                cuda);
        int rank = group.rank();
        int world = group.worldSize();
        int killed = world - 1;
        System.out.println("rank=" + rank + " pid=" + ProcessHandle.current().pid() + " of " + world + " on "
                + cuda.describe(group));
        DeviceHashMap map = DeviceHashMap.create(group, 8, 64, 64);
        MemorySegment dst = MemorySegment.ofArray(new long[8]);
        for (int i = 0; i < ROUNDS * 16; i++) {
            map.compute(i % 16, CudaStateProcessWorker::increment);
        }
        long k = 1000;
        while (map.owner(MemorySegment.ofArray(new long[] {k})) == killed) {
            k++;
        }
        long key = k;
        if (rank == 0) {
            map.put(key, filled(11));
        }
        group.allGatherBytes("increments-done", new byte[0]);
        for (long c = 0; c < 16; c++) {
            expectCount(map, c, (long) world * ROUNDS, dst, "before the kill");
        }
        group.allGatherBytes("counts-checked", new byte[0]);
        if (rank == killed) {
            map.compute(key, (cur, next) -> {
                next.set(ValueLayout.JAVA_LONG, 0, 22); // half of a new value: the survivors must never read it
                try {
                    mark(markers, "holding", rank);
                    Thread.sleep(1_000); // the survivors are in their get by now, waiting for this slot
                    System.out.println("holding key " + key + "'s slot, killing myself");
                    System.out.flush();
                } catch (Exception e) {
                    throw new IllegalStateException(e);
                }
                throw WorkerProcesses.killSelf();
            });
            throw new IllegalStateException("rank " + rank + " returned from the compute it was killed in");
        }
        awaitMarker(markers.resolve("holding-" + killed), "rank " + killed + " to lock key " + key + "'s slot");
        if (map.get(key, dst)) {
            throw new AssertionError("key " + key + " read as valid while its writer died holding it: value "
                    + dst.get(ValueLayout.JAVA_LONG, 0));
        }
        if (group.isAlive(killed)) {
            throw new AssertionError("rank " + killed + " still counts as alive after its slot was retired");
        }
        System.out.println("key " + key + " absent after rank " + killed + " died holding its slot");
        mark(markers, "absent", rank);
        awaitAll(markers, "absent", killed);
        if (rank == 0) {
            map.put(key, filled(33));
            mark(markers, "reput", 0);
        } else {
            awaitMarker(markers.resolve("reput-0"), "rank 0 to put key " + key + " again");
        }
        if (!map.get(key, dst) || MemorySegment.mismatch(dst, 0, 64, filled(33), 0, 64) != -1) {
            throw new AssertionError("key " + key + " after the new put: " + dst.get(ValueLayout.JAVA_LONG, 0));
        }
        // the keys in the survivors' partitions (the dead rank's partition is left alone: reading it would test the
        // driver's lifetime of an exported allocation whose exporter died, not the map)
        List<Long> survivorKeys = new java.util.ArrayList<>();
        for (long c = 0; c < 16; c++) {
            if (map.owner(MemorySegment.ofArray(new long[] {c})) != killed) {
                survivorKeys.add(c);
            }
        }
        if (survivorKeys.isEmpty()) {
            throw new IllegalStateException("no key of 0..15 in a survivor's partition (world=" + world + ")");
        }
        for (long c : survivorKeys) {
            expectCount(map, c, (long) world * ROUNDS, dst, "after the kill, untouched by it");
        }
        for (int i = 0; i < ROUNDS; i++) {
            for (long c : survivorKeys) {
                map.compute(c, CudaStateProcessWorker::increment);
            }
        }
        mark(markers, "increments", rank);
        awaitAll(markers, "increments", killed);
        for (long c : survivorKeys) {
            expectCount(map, c, (long) world * ROUNDS + (long) killed * ROUNDS, dst, "survivors' increments");
        }
        try {
            group.allGatherBytes("after-the-kill", new byte[0]);
            throw new AssertionError("a group exchange completed without rank " + killed);
        } catch (PeerTimeoutException e) {
            if (!e.missingRanks().equals(List.of(killed)) || !e.getMessage().contains("rank " + killed)) {
                throw new AssertionError("the exchange's wait should name the dead rank " + killed + ": missing="
                        + e.missingRanks() + " message=" + e.getMessage(), e);
            }
            System.out.println("the group's wait names the dead rank: " + e.getMessage());
        }
        // no close: the group is aborted and the dead rank's share can never be given back; the process exit frees
        // this rank's GPU memory, once no survivor reads it any more
        mark(markers, "done", rank);
        awaitAll(markers, "done", killed);
        return "GPU STATE OK rank=" + rank;
    }

    private static boolean increment(MemorySegment cur, MemorySegment next) {
        long n = (cur == null ? 0 : cur.get(ValueLayout.JAVA_LONG, 0)) + 1;
        for (int b = 0; b < 64; b += 8) {
            next.set(ValueLayout.JAVA_LONG, b, n);
        }
        return true;
    }

    private static MemorySegment filled(long v) {
        return MemorySegment.ofArray(new long[] {v, v, v, v, v, v, v, v});
    }

    private static void expectCount(DeviceHashMap map, long key, long expected, MemorySegment dst, String when) {
        if (!map.get(key, dst)) {
            throw new AssertionError(when + ": key " + key + " absent, expected count " + expected);
        }
        for (int b = 0; b < 64; b += 8) {
            if (dst.get(ValueLayout.JAVA_LONG, b) != expected) {
                throw new AssertionError(when + ": key " + key + " word " + b / 8 + " = "
                        + dst.get(ValueLayout.JAVA_LONG, b) + ", expected " + expected + " (all 8 words alike)");
            }
        }
    }

    private static void mark(Path markers, String what, int rank) throws java.io.IOException {
        Path tmp = markers.resolve(what + "-" + rank + ".tmp");
        Files.writeString(tmp, "");
        Files.move(tmp, markers.resolve(what + "-" + rank)); // atomic: a reader never sees half a marker
    }

    /** Waits for {@code what-r} of every survivor r below {@code killed}. */
    private static void awaitAll(Path markers, String what, int killed) throws InterruptedException {
        for (int r = 0; r < killed; r++) {
            awaitMarker(markers.resolve(what + "-" + r), "rank " + r + " to reach '" + what + "'");
        }
    }

    private static void awaitMarker(Path marker, String what) throws InterruptedException {
        long deadline = System.nanoTime() + MARKER_WAIT_NANOS;
        while (!Files.exists(marker)) {
            if (System.nanoTime() - deadline > 0) {
                throw new IllegalStateException("waited " + MARKER_WAIT_NANOS / 1_000_000_000L + " s for " + what
                        + " (no " + marker + ")");
            }
            Thread.sleep(5);
        }
    }
}
