package org.symmem4j.parallel;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.time.Duration;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;
import org.symmem4j.parallel.group.InJvmWorld;

/**
 * The in-place reduce-scatter and all-gather over {@link ShardPartition} blocks: results against
 * rank-order references, bitwise equality with TWO_SHOT's all-reduce, untouched bytes outside the
 * rank's block, and argument checks on every rank.
 */
class InPlaceShardCollectivesTest {

    private static final GroupOptions OPTIONS = GroupOptions.defaults().withTimeout(Duration.ofSeconds(60));
    private static final int[] COUNTS = {0, 1, 10, 1001, 65_541};
    /** Regions start past the front of the memory, to prove offsets are honoured. */
    private static final long OFFSET = 192;

    @Test
    void partitionCoversTheVectorWithAlignedBlocks() {
        for (DType dtype : DType.values()) {
            for (int n = 1; n <= 8; n++) {
                for (long count : new long[] {0, 1, 10, 15, 16, 17, 1001, 65_541, 1L << 33}) {
                    ShardPartition p = ShardPartition.of(count, n, dtype);
                    long next = 0;
                    for (int r = 0; r < n; r++) {
                        assertEquals(next, p.start(r), "blocks are contiguous in rank order");
                        assertTrue(p.start(r) == count || p.start(r) * dtype.byteSize() % ShardPartition.ALIGN_BYTES == 0,
                                "block " + r + " of " + p + " starts on a 64-byte boundary");
                        next = p.end(r);
                    }
                    assertEquals(count, next, "blocks cover every element: " + p);
                    // no block is larger than ceil(count/n) plus one aligned line
                    assertTrue(p.blockElements() < (count + n - 1) / n + p.alignElements(), p.toString());
                }
            }
        }
        ShardPartition p = ShardPartition.of(10, 4, DType.FLOAT32);
        assertEquals(List.of(10L, 0L, 0L, 0L), List.of(p.size(0), p.size(1), p.size(2), p.size(3)));
        ShardPartition q = ShardPartition.of(1000, 3, DType.FLOAT64);
        assertEquals(336, q.blockElements()); // ceil(1000/3) = 334 -> multiple of 8 doubles
        assertEquals(328, q.size(2));
    }

    @ParameterizedTest(name = "worldSize={0}")
    @ValueSource(ints = {1, 2, 3, 4})
    void reduceScatterGivesEachRankItsReducedBlockAndLeavesTheRest(int worldSize) {
        InJvmWorld.runOnEveryRank(worldSize, OPTIONS, group -> {
            int rank = group.rank();
            long bytes = OFFSET + DType.FLOAT64.bytes(COUNTS[COUNTS.length - 1]);
            try (Communicator comm = Communicator.create(group);
                 SymmetricMemory mem = SymmetricMemory.allocate(group, bytes);
                 SymmetricMemory twoShot = SymmetricMemory.allocate(group, bytes)) {
                int caseId = 0;
                for (DType dtype : DType.values()) {
                    for (int count : COUNTS) {
                        for (ReduceOp op : ReduceOp.values()) {
                            caseId++;
                            double[][] in = new double[worldSize][];
                            for (int r = 0; r < worldSize; r++) {
                                in[r] = TestData.random(caseId * 31L + r, count, dtype);
                            }
                            TestData.write(mem.local(), OFFSET, dtype, in[rank]);
                            TestData.write(twoShot.local(), OFFSET, dtype, in[rank]);
                            comm.reduceScatter(mem, OFFSET, count, dtype, op);
                            comm.allReduce(twoShot, OFFSET, count, dtype, op, Algorithm.TWO_SHOT);
                            ShardPartition p = ShardPartition.of(count, worldSize, dtype);
                            long dsize = dtype.byteSize();
                            for (int i = 0; i < count; i++) {
                                double got = TestData.get(mem.local(), OFFSET, dtype, i);
                                boolean mine = i >= p.start(rank) && i < p.end(rank);
                                double expected = mine ? TestData.rankOrderResult(in, i, dtype, op) : in[rank][i];
                                if (Double.compare(expected, got) != 0) {
                                    fail(dtype + " " + op + " count=" + count + " rank=" + rank + " element " + i
                                            + (mine ? " (own block)" : " (outside own block: must be untouched)")
                                            + " got=" + got + " expected=" + expected);
                                }
                            }
                            long lo = OFFSET + p.start(rank) * dsize;
                            long len = p.size(rank) * dsize;
                            assertEquals(-1, mem.local().asSlice(lo, len).mismatch(twoShot.local().asSlice(lo, len)),
                                    "own block must equal TWO_SHOT's all-reduce bitwise: " + dtype + " " + op + " count=" + count);
                        }
                    }
                }
            }
            return null;
        });
    }

    @ParameterizedTest(name = "worldSize={0}")
    @ValueSource(ints = {1, 2, 3, 4})
    void allGatherCopiesEveryRanksBlockIntoEveryRegion(int worldSize) {
        InJvmWorld.runOnEveryRank(worldSize, OPTIONS, group -> {
            int rank = group.rank();
            long bytes = OFFSET + DType.FLOAT64.bytes(COUNTS[COUNTS.length - 1]) + 64;
            try (Communicator comm = Communicator.create(group); SymmetricMemory mem = SymmetricMemory.allocate(group, bytes)) {
                int caseId = 0;
                for (DType dtype : DType.values()) {
                    for (int count : COUNTS) {
                        caseId++;
                        ShardPartition p = ShardPartition.of(count, worldSize, dtype);
                        // the truth: element i comes from its owner's data; everyone else holds noise there
                        double[] truth = TestData.random(caseId * 17L, count, dtype);
                        double[] noise = TestData.random(caseId * 17L + 1000 + rank, count, dtype);
                        double[] region = noise.clone();
                        for (long i = p.start(rank); i < p.end(rank); i++) {
                            region[(int) i] = truth[(int) i];
                        }
                        MemorySegment local = mem.local();
                        TestData.write(local, OFFSET, dtype, region);
                        long tail = OFFSET + dtype.bytes(count);
                        local.asSlice(tail, 64).fill((byte) 0x5A); // past the vector: must stay
                        comm.allGather(mem, OFFSET, count, dtype);
                        for (int i = 0; i < count; i++) {
                            assertEquals(truth[i], TestData.get(local, OFFSET, dtype, i),
                                    dtype + " count=" + count + " rank=" + rank + " element " + i);
                        }
                        for (long b = 0; b < 64; b++) {
                            assertEquals((byte) 0x5A, local.get(ValueLayout.JAVA_BYTE, tail + b),
                                    "all-gather wrote past the vector");
                        }
                    }
                }
            }
            return null;
        });
    }

    @Test
    void disagreeingOrShortRegionsAreRejectedOnEveryRank() {
        List<String> msgs = InJvmWorld.runOnEveryRank(3, OPTIONS, group -> {
            int rank = group.rank();
            try (Communicator comm = Communicator.create(group); SymmetricMemory mem = SymmetricMemory.allocate(group, 4096)) {
                TestData.write(mem.local(), 0, DType.FLOAT32, TestData.random(rank, 1024, DType.FLOAT32));
                byte[] before = mem.local().toArray(ValueLayout.JAVA_BYTE);
                String count = assertThrows(CollectiveMismatchException.class, () ->
                        comm.reduceScatter(mem, 0, rank == 1 ? 512 : 1024, DType.FLOAT32, ReduceOp.SUM)).getMessage();
                String tooLong = assertThrows(CollectiveMismatchException.class, () ->
                        comm.allGather(mem, 64, 1024, DType.FLOAT32)).getMessage();
                String foreign = assertThrows(CollectiveMismatchException.class, () ->
                        comm.reduceScatter(rank == 2 ? null : mem, 0, 16, DType.FLOAT32, ReduceOp.SUM)).getMessage();
                assertEquals(-1, mem.local().mismatch(MemorySegment.ofArray(before)), "rejected calls must not write");
                // still usable
                comm.reduceScatter(mem, 0, 1024, DType.FLOAT32, ReduceOp.SUM);
                comm.allGather(mem, 0, 1024, DType.FLOAT32);
                return count + "\n" + tooLong + "\n" + foreign;
            }
        });
        assertEquals(1, msgs.stream().distinct().count(), "every rank must report the same errors: " + msgs);
        String[] m = msgs.getFirst().split("\n");
        assertTrue(m[0].contains("rank=1 count=512") && m[0].contains("rank=0 count=1024") && m[0].contains("op=SUM"), m[0]);
        assertTrue(m[1].contains("bufferBytes=4032 needed=4096"), m[1]);
        assertTrue(m[2].contains("rank=2 buffer is null"), m[2]);
    }
}
