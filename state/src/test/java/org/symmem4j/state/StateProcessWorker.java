package org.symmem4j.state;

import static org.symmem4j.state.SymmetricRingBufferTest.payload;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.Arrays;

import org.symmem4j.parallel.SignalOp;
import org.symmem4j.parallel.SymmetricMemory;
import org.symmem4j.parallel.cuda.WorkerProcesses;
import org.symmem4j.parallel.group.ProcessGroup;

/**
 * One rank of the cross-process tests of the shared-state structures, a JVM of its own started by
 * {@link WorkerProcesses} with torchrun's variables. {@code args[0]} is the scenario.
 */
public final class StateProcessWorker {

    private StateProcessWorker() {
    }

    /** Type of the killed producer's messages, and of the survivor's. */
    static final int KILLED_TYPE = 7;
    static final int SURVIVOR_TYPE = 9;
    static final int SURVIVOR_MESSAGES = 2_000;

    public static void main(String[] args) {
        WorkerProcesses.exitWith(() -> switch (args[0]) {
            case "ring-killed-producer" -> ringKilledProducer();
            case "map-killed-writer" -> mapKilledWriter();
            case "ring-producer-fails" -> ringProducerFails();
            default -> throw new IllegalArgumentException("unknown scenario " + args[0]);
        });
    }

    /**
     * Rank 0 consumes a many-to-one ring; rank 1 puts one message, claims a second, writes half of it and kills
     * itself with SIGKILL; rank 2 then puts {@link #SURVIVOR_MESSAGES}. Rank 0 must get rank 1's first message and
     * all of rank 2's, in order and intact, never the torn one, and count one abandoned record.
     */
    private static String ringKilledProducer() throws Exception {
        ProcessGroup group = ProcessGroup.fromEnvironment();
        SymmetricMemory control = SymmetricMemory.allocate(group, 0);
        SymmetricRingBuffer ring = SymmetricRingBuffer.manyToOne(group, 0, 4096);
        int max = ring.maxPayload();
        switch (group.rank()) {
            case 1 -> {
                ring.put(KILLED_TYPE, payload(1, 0, max));
                SymmetricRingBuffer.Claim claim = ring.tryClaim(KILLED_TYPE, 64);
                claim.segment().asSlice(0, 32).fill((byte) 0xAB);
                control.signal(2, 0, 1, SignalOp.SET); // rank 2 may go: the torn record sits ahead of its messages
                System.out.println("claimed " + claim + ", killing myself");
                System.out.flush();
                throw WorkerProcesses.killSelf();
            }
            case 2 -> {
                control.waitSignal(0, 1, 1);
                for (int i = 0; i < SURVIVOR_MESSAGES; i++) {
                    ring.put(SURVIVOR_TYPE, payload(2, i, max));
                }
                spinUntil(control, 1); // rank 0 has checked everything (and aborts right after)
            }
            default -> {
                int[] next = new int[3];
                while (next[2] < SURVIVOR_MESSAGES) {
                    ring.take((type, buf, off, len) -> {
                        byte[] got = buf.asSlice(off, len).toArray(ValueLayout.JAVA_BYTE);
                        int from = MemorySegment.ofArray(got).get(ValueLayout.JAVA_INT_UNALIGNED, 0);
                        int expectedType = from == 1 ? KILLED_TYPE : SURVIVOR_TYPE;
                        if (type != expectedType || (from != 1 && from != 2) || (from == 1 && next[1] > 0)
                                || !Arrays.equals(payload(from, next[from], max), got)) {
                            throw new AssertionError("torn or unexpected message: type=" + type + " from=" + from
                                    + " seq=" + next[from] + " length=" + len);
                        }
                        next[from]++;
                    }, 64);
                }
                if (next[1] != 1 || ring.abandonedRecords() != 1) {
                    throw new AssertionError("rank 1 messages=" + next[1] + " (expected 1), abandoned="
                            + ring.abandonedRecords() + " (expected 1)");
                }
                if (ring.poll((t, b, o, l) -> { }, 10) != 0) {
                    throw new AssertionError("a message after the last");
                }
                control.signal(2, 1, 1, SignalOp.SET);
            }
        }
        // rank 1 is gone: abort, so that the closes do not wait for it
        group.abort("test over: rank 1 was killed on purpose");
        ring.close();
        control.close();
        group.close();
        return "STATE OK rank=" + group.rank();
    }

    /**
     * Rank 1 produces into a one-to-one ring to rank 0, puts one message, and then its own code throws inside the
     * ring's try-with-resources, which closes the ring on the way out (its close waits for rank 0 in the collective
     * free). Rank 0 gets the message; its next take must end with PEER_LEFT naming rank 1 (a wait ended by the group's
     * timeout instead says DEADLINE_PASSED and fails the check), and then closes the ring too, which lets rank 1 go.
     */
    private static String ringProducerFails() throws Exception {
        ProcessGroup group = ProcessGroup.fromEnvironment();
        if (group.rank() == 1) {
            try (SymmetricRingBuffer ring = SymmetricRingBuffer.oneToOne(group, 1, 0, 4096)) {
                ring.put(KILLED_TYPE, new byte[16]);
                throw new IllegalStateException("the producer's own check failed");
            } catch (IllegalStateException expected) {
                System.out.println("rank 1 failed as planned and closed the ring: " + expected.getMessage());
            }
        } else {
            try (SymmetricRingBuffer ring = SymmetricRingBuffer.oneToOne(group, 1, 0, 4096)) {
                int got = ring.take((type, buf, off, len) -> { }, 16);
                if (got != 1) {
                    throw new AssertionError("messages=" + got + ", expected the one rank 1 put before failing");
                }
                try {
                    ring.take((type, buf, off, len) -> { }, 16);
                    throw new AssertionError("a second take returned, but rank 1 put only one message");
                } catch (org.symmem4j.parallel.PeerTimeoutException e) {
                    if (e.reason() != org.symmem4j.parallel.PeerTimeoutException.Reason.PEER_LEFT
                            || !e.missingRanks().equals(java.util.List.of(1))) {
                        throw new AssertionError("expected PEER_LEFT naming rank 1, got " + e.reason() + " "
                                + e.missingRanks() + ": " + e.getMessage(), e);
                    }
                    System.out.println("rank 0's take ended: " + e.getMessage());
                }
            }
        }
        group.close();
        return "STATE OK rank=" + group.rank();
    }

    static final int MAP_ROUNDS = 400;

    /**
     * Three ranks compute-increment 16 shared keys {@link #MAP_ROUNDS} times each, concurrently, and check the
     * counts; then rank 2 dies by SIGKILL inside a compute on key 99 (holding its slot) and ranks 0 and 1 must find
     * key 99 absent (its slot retired), never the half-computed value, and can put it again.
     */
    private static String mapKilledWriter() throws Exception {
        ProcessGroup group = ProcessGroup.fromEnvironment();
        SymmetricMemory control = SymmetricMemory.allocate(group, 0);
        SymmetricHashMap map = SymmetricHashMap.create(group, 8, 64, 64);
        MemorySegment dst = MemorySegment.ofArray(new long[8]);
        for (int i = 0; i < MAP_ROUNDS * 16; i++) {
            map.compute(i % 16, (cur, next) -> {
                long n = (cur == null ? 0 : cur.get(ValueLayout.JAVA_LONG, 0)) + 1;
                for (int b = 0; b < 64; b += 8) {
                    next.set(ValueLayout.JAVA_LONG, b, n);
                }
                return true;
            });
        }
        if (group.rank() == 0) {
            map.put(99L, MemorySegment.ofArray(new long[] {11, 11, 11, 11, 11, 11, 11, 11}));
        }
        group.allGatherBytes("map-increments-done", new byte[0]);
        for (long key = 0; key < 16; key++) {
            if (!map.get(key, dst) || dst.get(ValueLayout.JAVA_LONG, 0) != 3L * MAP_ROUNDS) {
                throw new AssertionError("key " + key + " count=" + dst.get(ValueLayout.JAVA_LONG, 0) + " expected "
                        + 3L * MAP_ROUNDS);
            }
        }
        group.allGatherBytes("map-counts-checked", new byte[0]);
        if (group.rank() == 2) {
            map.compute(99L, (cur, next) -> {
                next.set(ValueLayout.JAVA_LONG, 0, 22);
                control.signal(0, 0, 1, SignalOp.SET);
                control.signal(1, 0, 1, SignalOp.SET);
                throw WorkerProcesses.killSelf();
            });
        }
        control.waitSignal(0, 1, 2); // rank 2 holds key 99's slot
        if (map.get(99L, dst)) {
            throw new AssertionError("key 99 read as valid while its writer died holding it: value "
                    + dst.get(ValueLayout.JAVA_LONG, 0));
        }
        if (group.rank() == 0) {
            spinUntil(control, 2); // rank 1 found key 99 absent too
            map.put(99L, MemorySegment.ofArray(new long[] {33, 33, 33, 33, 33, 33, 33, 33}));
            control.signal(1, 1, 1, SignalOp.SET);
            spinUntil(control, 3); // rank 1 has read the new value
        } else {
            control.signal(0, 2, 1, SignalOp.SET);
            spinUntil(control, 1);
            if (!map.get(99L, dst) || dst.get(ValueLayout.JAVA_LONG, 56) != 33) {
                throw new AssertionError("key 99 after the new put: " + dst.get(ValueLayout.JAVA_LONG, 56));
            }
            control.signal(0, 3, 1, SignalOp.SET);
        }
        group.abort("test over: rank 2 was killed on purpose");
        map.close();
        control.close();
        group.close();
        return "STATE OK rank=" + group.rank();
    }

    /** Waits for this rank's slot without the group's abort check (a peer may abort right after signalling). */
    private static void spinUntil(SymmetricMemory control, int slot) {
        long deadline = System.nanoTime() + 60_000_000_000L;
        while (control.readSignal(slot) < 1) {
            if (System.nanoTime() > deadline) {
                throw new IllegalStateException("no signal in slot " + slot + " within 60 s");
            }
            Thread.onSpinWait();
        }
    }
}
