package org.symmem4j.parallel;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
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

/**
 * Arguments that disagree across ranks, or are bad on one rank, are rejected on every rank with the
 * same message, before any rank writes shared data; the group stays usable afterwards.
 */
class CollectiveArgumentsTest {

    private static final GroupOptions OPTIONS = GroupOptions.defaults().withTimeout(Duration.ofSeconds(20));

    /** Runs a rejected call on 3 ranks, checks every rank's message and that a correct call works after. */
    private static List<String> rejectedEverywhere(RankCall bad) {
        return InJvmWorld.runOnEveryRank(3, OPTIONS, group -> {
            try (Communicator comm = Communicator.create(group); Arena arena = Arena.ofConfined()) {
                MemorySegment buf = arena.allocate(4096 * 4, 64);
                for (int i = 0; i < 4096; i++) {
                    buf.setAtIndex(ValueLayout.JAVA_FLOAT, i, group.rank() + 1);
                }
                byte[] before = buf.toArray(ValueLayout.JAVA_BYTE);
                CollectiveMismatchException e = assertThrows(CollectiveMismatchException.class,
                        () -> bad.call(comm, group.rank(), buf, arena));
                assertArrayEquals(before, buf.toArray(ValueLayout.JAVA_BYTE), "rejected call must not touch the buffer");
                // still usable: a correct all-reduce gives 1+2+3
                comm.allReduce(buf, 4096, DType.FLOAT32, ReduceOp.SUM, Algorithm.TWO_SHOT);
                for (int i = 0; i < 4096; i++) {
                    assertEquals(6f, buf.getAtIndex(ValueLayout.JAVA_FLOAT, i));
                }
                return e.getMessage();
            }
        });
    }

    @FunctionalInterface
    interface RankCall {
        void call(Communicator comm, int rank, MemorySegment buf, Arena arena);
    }

    private static void assertSameOnEveryRank(List<String> messages) {
        assertEquals(1, messages.stream().distinct().count(), "every rank must report the same error: " + messages);
    }

    @Test
    void countMismatchNamesEveryRanksCount() {
        List<String> msgs = rejectedEverywhere((comm, rank, buf, arena) ->
                comm.allReduce(buf, rank == 1 ? 2048 : 1024, DType.FLOAT32, ReduceOp.SUM, Algorithm.ONE_SHOT));
        assertSameOnEveryRank(msgs);
        String m = msgs.getFirst();
        assertTrue(m.contains("rank=0 count=1024") && m.contains("rank=1 count=2048") && m.contains("rank=2 count=1024"), m);
        assertTrue(m.contains("must pass the same"), m);
    }

    @Test
    void dtypeOpAndAlgorithmMismatchesAreNamed() {
        String dtype = rejectedEverywhere((comm, rank, buf, arena) -> comm.allReduce(buf, 100,
                rank == 2 ? DType.FLOAT64 : DType.FLOAT32, ReduceOp.SUM, Algorithm.RING)).getFirst();
        assertTrue(dtype.contains("rank=2 count=100 dtype=FLOAT64"), dtype);
        String op = rejectedEverywhere((comm, rank, buf, arena) -> comm.allReduce(buf, 100, DType.FLOAT32,
                rank == 0 ? ReduceOp.MAX : ReduceOp.SUM, Algorithm.RING)).getFirst();
        assertTrue(op.contains("rank=0 count=100 dtype=FLOAT32 op=MAX"), op);
        String alg = rejectedEverywhere((comm, rank, buf, arena) -> comm.allReduce(buf, 100, DType.FLOAT32,
                ReduceOp.SUM, rank == 1 ? Algorithm.TWO_SHOT : Algorithm.ONE_SHOT)).getFirst();
        assertTrue(alg.contains("rank=1 count=100 dtype=FLOAT32 op=SUM algorithm=TWO_SHOT"), alg);
    }

    @Test
    void bufferShorterThanCountOnOneRankIsRejectedEverywhere() {
        List<String> msgs = rejectedEverywhere((comm, rank, buf, arena) ->
                comm.allReduce(rank == 2 ? buf.asSlice(0, 100) : buf, 1024, DType.FLOAT32, ReduceOp.SUM, Algorithm.ONE_SHOT));
        assertSameOnEveryRank(msgs);
        assertTrue(msgs.getFirst().contains("rank=2 bufferBytes=100 needed=4096"), msgs.getFirst());
    }

    @Test
    void nullBufferNegativeCountAndNcclAreRejectedEverywhere() {
        String nul = rejectedEverywhere((comm, rank, buf, arena) ->
                comm.allReduce(rank == 1 ? null : buf, 10, DType.FLOAT32, ReduceOp.SUM, Algorithm.ONE_SHOT)).getFirst();
        assertTrue(nul.contains("rank=1 buffer is null"), nul);
        String neg = rejectedEverywhere((comm, rank, buf, arena) ->
                comm.allReduce(buf, rank == 0 ? -5 : 10, DType.FLOAT32, ReduceOp.SUM, Algorithm.ONE_SHOT)).getFirst();
        assertTrue(neg.contains("rank=0 count is negative"), neg);
        String nccl = rejectedEverywhere((comm, rank, buf, arena) ->
                comm.allReduce(buf, 10, DType.FLOAT32, ReduceOp.SUM, Algorithm.NCCL)).getFirst();
        assertTrue(nccl.contains("algorithm cannot run on this transport"), nccl);
    }

    @Test
    void differentCollectivesAreNamed() {
        List<String> msgs = rejectedEverywhere((comm, rank, buf, arena) -> {
            if (rank == 1) {
                comm.broadcast(buf, 10, DType.FLOAT32, 0);
            } else {
                comm.allReduce(buf, 10, DType.FLOAT32, ReduceOp.SUM, Algorithm.ONE_SHOT);
            }
        });
        assertSameOnEveryRank(msgs);
        assertTrue(msgs.getFirst().contains("rank=1 broadcast#0") && msgs.getFirst().contains("rank=0 all-reduce#0"),
                msgs.getFirst());
    }

    @Test
    void reduceScatterAllGatherAndBroadcastCheckTheirBuffers() {
        String rs = rejectedEverywhere((comm, rank, buf, arena) ->
                comm.reduceScatter(buf, rank == 0 ? buf.asSlice(0, 8) : buf, 100, DType.FLOAT32, ReduceOp.SUM)).getFirst();
        assertTrue(rs.contains("rank=0 recvBytes=8 needed=400"), rs);
        String ag = rejectedEverywhere((comm, rank, buf, arena) ->
                comm.allGather(buf, rank == 2 ? buf.asSlice(0, 1000) : buf, 100, DType.FLOAT32)).getFirst();
        assertTrue(ag.contains("rank=2 recvBytes=1000 needed=1200"), ag);
        String root = rejectedEverywhere((comm, rank, buf, arena) ->
                comm.broadcast(buf, 10, DType.FLOAT32, rank == 0 ? 7 : 0)).getFirst();
        assertTrue(root.contains("rank=0 root is outside"), root);
    }

    @Test
    void inPlaceRegionsMustAgree() {
        List<String> msgs = InJvmWorld.runOnEveryRank(2, OPTIONS, group -> {
            try (Communicator comm = Communicator.create(group); SymmetricMemory mem = SymmetricMemory.allocate(group, 4096)) {
                CollectiveMismatchException e = assertThrows(CollectiveMismatchException.class, () ->
                        comm.allReduce(mem, group.rank() == 0 ? 0 : 64, 16, DType.FLOAT32, ReduceOp.SUM, Algorithm.ONE_SHOT));
                CollectiveMismatchException tooLong = assertThrows(CollectiveMismatchException.class, () ->
                        comm.allReduce(mem, 4000, 100, DType.FLOAT32, ReduceOp.SUM, Algorithm.ONE_SHOT));
                assertTrue(tooLong.getMessage().contains("bufferBytes=96 needed=400"), tooLong.getMessage());
                return e.getMessage();
            }
        });
        assertTrue(msgs.getFirst().contains("rank=0 count=16 dtype=FLOAT32 op=SUM algorithm=ONE_SHOT memory=")
                && msgs.getFirst().contains("offsetBytes=64"), msgs.getFirst());
    }

    @Test
    void countZeroIsANoOpThatStillChecksArguments() {
        InJvmWorld.runOnEveryRank(2, OPTIONS, group -> {
            try (Communicator comm = Communicator.create(group); Arena arena = Arena.ofConfined()) {
                MemorySegment buf = arena.allocate(16);
                buf.fill((byte) 7);
                comm.allReduce(buf, 0, DType.FLOAT32, ReduceOp.SUM, Algorithm.TWO_SHOT);
                comm.allGather(buf, buf, 0, DType.FLOAT32);
                comm.broadcast(buf, 0, DType.BFLOAT16, 1);
                for (byte b : buf.toArray(ValueLayout.JAVA_BYTE)) {
                    assertEquals(7, b);
                }
                assertThrows(CollectiveMismatchException.class, () ->
                        comm.allReduce(buf, 0, group.rank() == 0 ? DType.FLOAT32 : DType.FLOAT64, ReduceOp.SUM, Algorithm.TWO_SHOT));
                return null;
            }
        });
    }
}
