package org.symmem4j.state;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.time.Duration;
import java.util.Random;

import org.junit.jupiter.api.Test;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.group.InJvmWorld;

/**
 * Block sharding, redistribution, gather and put-with-signal of the tensor between threads, against a reference:
 * every element of the global tensor is {@code value(row, column, k)}, so any copy that lands in the wrong place, or
 * a block bound off by one, shows as a wrong number.
 */
class DistributedTensorBlocksTest {

    private static final GroupOptions OPTIONS = GroupOptions.defaults().withTimeout(Duration.ofSeconds(30));
    private static final long ROWS = 9;
    private static final long COLS = 7;
    private static final long INNER = 2;

    private static double value(long row, long column, long k) {
        return row * 1000.0 + column * 10.0 + k;
    }

    /** Writes the reference values of this rank's block into its shard. */
    private static void fillLocal(DistributedTensor t, int rank) {
        MemorySegment shard = t.localShard();
        long i = 0;
        for (long r = t.firstRow(rank); r < t.firstRow(rank) + t.rows(rank); r++) {
            for (long c = t.firstColumn(rank); c < t.firstColumn(rank) + t.columns(rank); c++) {
                for (long k = 0; k < INNER; k++) {
                    shard.setAtIndex(ValueLayout.JAVA_DOUBLE, i++, value(r, c, k));
                }
            }
        }
        assertEquals(shard.byteSize(), i * Double.BYTES);
    }

    /** Checks that this rank's shard holds the reference values of its block. */
    private static void checkLocal(DistributedTensor t, int rank) {
        MemorySegment shard = t.localShard();
        long i = 0;
        for (long r = t.firstRow(rank); r < t.firstRow(rank) + t.rows(rank); r++) {
            for (long c = t.firstColumn(rank); c < t.firstColumn(rank) + t.columns(rank); c++) {
                for (long k = 0; k < INNER; k++) {
                    assertEquals(value(r, c, k), shard.getAtIndex(ValueLayout.JAVA_DOUBLE, i++),
                            t + " element (" + r + ", " + c + ", " + k + ")");
                }
            }
        }
    }

    private static double[] reference(long row, long rows, long column, long columns) {
        double[] out = new double[(int) (rows * columns * INNER)];
        int i = 0;
        for (long r = row; r < row + rows; r++) {
            for (long c = column; c < column + columns; c++) {
                for (long k = 0; k < INNER; k++) {
                    out[i++] = value(r, c, k);
                }
            }
        }
        return out;
    }

    @Test
    void blocksCoverTheTensorOnceAndRectanglesReadTheReference() {
        InJvmWorld.runOnEveryRank(4, OPTIONS, group -> {
            try (DistributedTensor t = DistributedTensor.create(group, TensorSharding.blocks(2, 2), ElementType.FLOAT64,
                    ROWS, COLS, INNER)) {
                int[][] owners = new int[(int) ROWS][(int) COLS];
                for (int rank = 0; rank < 4; rank++) {
                    assertEquals(t.rows(rank) * t.columns(rank) * INNER * Double.BYTES, t.shardBytes(rank));
                    for (long r = t.firstRow(rank); r < t.firstRow(rank) + t.rows(rank); r++) {
                        for (long c = t.firstColumn(rank); c < t.firstColumn(rank) + t.columns(rank); c++) {
                            owners[(int) r][(int) c]++;
                            assertEquals(rank, t.ownerOf(r, c));
                        }
                    }
                }
                for (int[] row : owners) {
                    for (int n : row) {
                        assertEquals(1, n, "every element of the grid has exactly one owner");
                    }
                }
                assertEquals(4, t.rows(0)); // rows 0-3 and 4-8; columns 0-2 and 3-6
                assertEquals(3, t.columns(0));
                assertEquals(4, t.firstColumn(3) + 1);
                assertThrows(IllegalStateException.class, () -> t.ownerOf(0));
                fillLocal(t, group.rank());
                t.barrier();
                Random random = new Random(17 + group.rank());
                for (int trial = 0; trial < 50; trial++) {
                    long r0 = random.nextInt((int) ROWS);
                    long nr = 1 + random.nextInt((int) (ROWS - r0));
                    long c0 = random.nextInt((int) COLS);
                    long nc = 1 + random.nextInt((int) (COLS - c0));
                    double[] got = new double[(int) (nr * nc * INNER)];
                    t.get(r0, nr, c0, nc, MemorySegment.ofArray(got), DistributedTensor.Transfer.COPY_ENGINE);
                    assertArrayEquals(reference(r0, nr, c0, nc), got, "rectangle " + r0 + "+" + nr + " x " + c0 + "+" + nc);
                }
                double[] rows = new double[(int) (3 * COLS * INNER)];
                t.getRows(3, 3, MemorySegment.ofArray(rows)); // across both block rows and both block columns
                assertArrayEquals(reference(3, 3, 0, COLS), rows);
                assertThrows(IndexOutOfBoundsException.class,
                        () -> t.get(8, 2, 0, 1, MemorySegment.ofArray(new double[100]), DistributedTensor.Transfer.KERNEL));
                assertThrows(IllegalArgumentException.class,
                        () -> t.get(0, 2, 0, 2, MemorySegment.ofArray(new double[7]), DistributedTensor.Transfer.KERNEL));
                t.barrier();
                // rank 1 overwrites a rectangle over all four blocks; the gather on rank 2 sees it and nothing else changed
                if (group.rank() == 1) {
                    double[] neg = new double[(int) (4 * 4 * INNER)];
                    java.util.Arrays.fill(neg, -1);
                    t.put(2, 4, 1, 4, MemorySegment.ofArray(neg), DistributedTensor.Transfer.COPY_ENGINE);
                }
                double[] all = new double[(int) (ROWS * COLS * INNER)];
                t.gather(2, group.rank() == 2 ? MemorySegment.ofArray(all) : null);
                if (group.rank() == 2) {
                    double[] expected = reference(0, ROWS, 0, COLS);
                    for (long r = 2; r < 6; r++) {
                        for (long c = 1; c < 5; c++) {
                            for (long k = 0; k < INNER; k++) {
                                expected[(int) ((r * COLS + c) * INNER + k)] = -1;
                            }
                        }
                    }
                    assertArrayEquals(expected, all);
                }
            }
            return null;
        });
    }

    @Test
    void redistributeBetweenRowsAndBlocksKeepsEveryValue() {
        InJvmWorld.runOnEveryRank(4, OPTIONS, group -> {
            DistributedTensor t = DistributedTensor.create(group, ElementType.FLOAT64, ROWS, COLS, INNER);
            fillLocal(t, group.rank());
            for (TensorSharding next : new TensorSharding[] {TensorSharding.blocks(2, 2), TensorSharding.blocks(1, 4),
                TensorSharding.blocks(4, 1), TensorSharding.rows(), TensorSharding.blocks(2, 2)}) {
                DistributedTensor moved = t.redistribute(next);
                t.close();
                t = moved;
                assertEquals(next, t.sharding());
                checkLocal(t, group.rank());
            }
            double[] all = new double[(int) (ROWS * COLS * INNER)];
            t.gather(3, group.rank() == 3 ? MemorySegment.ofArray(all) : null, DistributedTensor.Transfer.KERNEL);
            if (group.rank() == 3) {
                assertArrayEquals(reference(0, ROWS, 0, COLS), all);
            }
            t.close();
            return null;
        });
    }

    @Test
    void redistributeOnThreeRanksWithUnevenBlocks() {
        InJvmWorld.runOnEveryRank(3, OPTIONS, group -> {
            try (DistributedTensor rows = DistributedTensor.create(group, TensorSharding.blocks(3, 1), ElementType.FLOAT64,
                    ROWS, COLS, INNER)) {
                fillLocal(rows, group.rank());
                try (DistributedTensor cols = rows.redistribute(TensorSharding.blocks(1, 3))) {
                    checkLocal(cols, group.rank());
                    assertEquals(ROWS, cols.rows(group.rank()));
                    assertEquals(COLS * group.rank() / 3, cols.firstColumn(group.rank()));
                }
            }
            return null;
        });
    }

    @Test
    void putWithSignalReachesEveryOwnerBeforeItsSignal() {
        InJvmWorld.runOnEveryRank(4, OPTIONS, group -> {
            try (DistributedTensor t = DistributedTensor.create(group, TensorSharding.blocks(2, 2), ElementType.FLOAT64,
                    ROWS, COLS, INNER)) {
                // rows 3-6 x columns 2-5 touch every block; each owner waits for one signalled put from rank 0
                for (int round = 1; round <= 3; round++) {
                    if (group.rank() == 0) {
                        double[] src = new double[(int) (4 * 4 * INNER)];
                        java.util.Arrays.fill(src, round);
                        int[] signalled = t.putWithSignal(3, 4, 2, 4, MemorySegment.ofArray(src), 1);
                        assertArrayEquals(new int[] {0, 1, 2, 3}, signalled);
                    }
                    t.awaitPuts(1, 1, 0);
                    int me = group.rank();
                    MemorySegment shard = t.localShard();
                    for (long r = t.firstRow(me); r < t.firstRow(me) + t.rows(me); r++) {
                        for (long c = t.firstColumn(me); c < t.firstColumn(me) + t.columns(me); c++) {
                            boolean inside = r >= 3 && r < 7 && c >= 2 && c < 6;
                            long at = ((r - t.firstRow(me)) * t.columns(me) + (c - t.firstColumn(me))) * INNER;
                            assertEquals(inside ? round : 0.0, shard.getAtIndex(ValueLayout.JAVA_DOUBLE, at),
                                    "round " + round + " element (" + r + ", " + c + ") on rank " + me);
                        }
                    }
                    t.barrier(); // every owner has checked before the next round overwrites
                }
            }
            return null;
        });
    }

    @Test
    void badShardingsAndDisagreementsFailOnEveryRank() {
        InJvmWorld.runOnEveryRank(3, OPTIONS, group -> {
            IllegalArgumentException grid = assertThrows(IllegalArgumentException.class, () -> DistributedTensor.create(
                    group, TensorSharding.blocks(2, 2), ElementType.FLOAT32, 4, 4));
            assertTrue(grid.getMessage().contains("worldSize=3"), grid.getMessage());
            assertThrows(IllegalArgumentException.class, () -> DistributedTensor.create(group,
                    TensorSharding.blocks(1, 3), ElementType.FLOAT32, 12));
            assertThrows(IllegalArgumentException.class, () -> TensorSharding.blocks(0, 3));
            IllegalArgumentException shape = assertThrows(IllegalArgumentException.class, () -> DistributedTensor.create(
                    group, ElementType.FLOAT32, 4 + group.rank(), 2));
            assertTrue(shape.getMessage().contains("rank=1"), shape.getMessage());
            try (DistributedTensor t = DistributedTensor.create(group, ElementType.INT32, 6, 2)) {
                IllegalArgumentException root = assertThrows(IllegalArgumentException.class,
                        () -> t.gather(group.rank() == 2 ? 1 : 0, MemorySegment.ofArray(new int[12])));
                assertTrue(root.getMessage().contains("same root"), root.getMessage());
                IllegalArgumentException small = assertThrows(IllegalArgumentException.class,
                        () -> t.gather(1, MemorySegment.ofArray(new int[group.rank() == 1 ? 11 : 12])));
                assertTrue(small.getMessage().contains("expected at least 48"), small.getMessage());
                // the tensor still works after the refusals
                int[] all = new int[12];
                t.gather(0, MemorySegment.ofArray(all));
            }
            return null;
        });
    }
}
