package org.symmem4j.parallel;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.time.Duration;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.symmem4j.parallel.group.InJvmWorld;

class SymmetricMemoryTest {

    private static final GroupOptions OPTIONS = GroupOptions.defaults().withTimeout(Duration.ofSeconds(20));

    @Test
    void everyRankSeesEveryPeersWritesAfterABarrier() {
        InJvmWorld.runOnEveryRank(4, OPTIONS, group -> {
            try (SymmetricMemory mem = SymmetricMemory.allocate(group, 1 << 16)) {
                assertEquals(1 << 16, mem.byteSize());
                assertEquals(mem.local(), mem.peer(group.rank()));
                for (int round = 0; round < 50; round++) {
                    mem.local().fill((byte) (group.rank() * 10 + round));
                    mem.barrier();
                    for (int p = 0; p < 4; p++) {
                        assertEquals((byte) (p * 10 + round), mem.peer(p).get(ValueLayout.JAVA_BYTE, (1 << 16) - 1));
                    }
                    mem.barrier(); // nobody refills before everybody checked
                }
            }
            return null;
        });
    }

    @Test
    void allocationIdsAgreeAcrossRanks() {
        List<long[]> ids = InJvmWorld.runOnEveryRank(3, OPTIONS, group -> {
            try (SymmetricMemory a = SymmetricMemory.allocate(group, 64); SymmetricMemory b = SymmetricMemory.allocate(group, 0)) {
                return new long[] {a.id(), b.id()};
            }
        });
        for (long[] id : ids) {
            assertEquals(ids.getFirst()[0], id[0]);
            assertEquals(ids.getFirst()[1], id[1]);
        }
        assertTrue(ids.getFirst()[0] != ids.getFirst()[1]);
    }

    @Test
    void putWithSignalDeliversDataBeforeTheSignal() {
        int rounds = 2000;
        InJvmWorld.runOnEveryRank(2, OPTIONS, group -> {
            int rank = group.rank();
            int peer = 1 - rank;
            try (SymmetricMemory mem = SymmetricMemory.allocate(group, 4096); Arena arena = Arena.ofConfined()) {
                MemorySegment msg = arena.allocate(4096);
                for (int i = 1; i <= rounds; i++) {
                    if ((i + rank) % 2 == 0) {
                        msg.fill((byte) i);
                        mem.putWithSignal(peer, msg, 0, 3, i, SignalOp.SET);
                    } else {
                        long seen = mem.waitSignal(3, i, peer);
                        assertEquals(i, seen);
                        for (long off = 0; off < 4096; off += 512) {
                            assertEquals((byte) i, mem.local().get(ValueLayout.JAVA_BYTE, off), "round " + i);
                        }
                    }
                    // ping-pong: the receiver of round i sends round i+1
                }
            }
            return null;
        });
    }

    @Test
    void signalAddAccumulatesFromEveryRank() {
        InJvmWorld.runOnEveryRank(4, OPTIONS, group -> {
            try (SymmetricMemory mem = SymmetricMemory.allocate(group, 0)) {
                for (int i = 0; i < 100; i++) {
                    mem.signal(0, 7, 1, SignalOp.ADD);
                }
                if (group.rank() == 0) {
                    assertEquals(400, mem.waitSignal(7, 400, -1));
                }
                mem.barrier();
                assertThrows(IndexOutOfBoundsException.class, () -> mem.signal(0, mem.signalSlots(), 1, SignalOp.SET));
                assertThrows(IndexOutOfBoundsException.class, () -> mem.signal(4, 0, 1, SignalOp.SET));
            }
            return null;
        });
    }

    @Test
    void registeredBuffersAreReducedInPlace() {
        InJvmWorld.runOnEveryRank(2, OPTIONS, group -> {
            try (Arena arena = Arena.ofShared()) {
                MemorySegment mine = arena.allocate(1000 * 4, 64);
                for (int i = 0; i < 1000; i++) {
                    mine.setAtIndex(ValueLayout.JAVA_FLOAT, i, i * (group.rank() + 1));
                }
                try (SymmetricMemory mem = SymmetricMemory.register(group, mine); Communicator comm = Communicator.create(group)) {
                    assertEquals(mine.address(), mem.local().address(), "registration must not copy");
                    comm.allReduce(mem, 0, 1000, DType.FLOAT32, ReduceOp.SUM, Algorithm.TWO_SHOT);
                    for (int i = 0; i < 1000; i++) {
                        assertEquals(3f * i, mine.getAtIndex(ValueLayout.JAVA_FLOAT, i));
                    }
                }
            }
            return null;
        });
    }

    @Test
    void sizesThatDifferAreRejectedOnEveryRank() {
        List<String> msgs = InJvmWorld.runOnEveryRank(2, OPTIONS, group -> {
            SymmemException e = assertThrows(SymmemException.class,
                    () -> SymmetricMemory.allocate(group, group.rank() == 0 ? 100 : 200));
            return e.getMessage();
        });
        for (String m : msgs) {
            assertTrue(m.contains("rank=0 bytes=100") && m.contains("rank=1 bytes=200"), m);
        }
    }

    @Test
    void heapSegmentsCannotBeRegistered() {
        InJvmWorld.runOnEveryRank(1, OPTIONS, group -> {
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                    () -> SymmetricMemory.register(group, MemorySegment.ofArray(new float[4])));
            assertTrue(e.getMessage().contains("off-heap"), e.getMessage());
            return null;
        });
    }
}
