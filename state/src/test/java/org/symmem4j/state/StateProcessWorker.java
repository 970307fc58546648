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
                long claim = ring.tryClaim(64);
                ring.buffer().asSlice(claim, 32).fill((byte) 0xAB);
                control.signal(2, 0, 1, SignalOp.SET); // rank 2 may go: the torn record sits ahead of its messages
                System.out.println("claimed at " + claim + ", killing myself");
                System.out.flush();
                new ProcessBuilder("kill", "-9", Long.toString(ProcessHandle.current().pid())).inheritIO().start().waitFor();
                Thread.sleep(60_000);
                throw new IllegalStateException("still alive after kill -9");
            }
            case 2 -> {
                control.waitSignal(0, 1, 1);
                for (int i = 0; i < SURVIVOR_MESSAGES; i++) {
                    ring.put(SURVIVOR_TYPE, payload(2, i, max));
                }
                // rank 0 has checked everything; read without the group's abort check, as rank 0 aborts right after
                long deadline = System.nanoTime() + 60_000_000_000L;
                while (control.readSignal(1) < 1) {
                    if (System.nanoTime() > deadline) {
                        throw new IllegalStateException("rank 0 did not finish its checks within 60 s");
                    }
                    Thread.onSpinWait();
                }
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
}
