package org.symmem4j.state;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.time.Duration;

import org.junit.jupiter.api.Test;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.group.InJvmWorld;

/** The row-sharded tensor between threads: shard bounds, zero-copy views, remote slices, gather, refusals. */
class DistributedTensorTest {

    private static final GroupOptions OPTIONS = GroupOptions.defaults().withTimeout(Duration.ofSeconds(30));

    @Test
    void shardsSlicesAndGatherAgreeWithTheGlobalTensor() {
        int ranks = 3;
        long rows = 10;
        long cols = 5;
        InJvmWorld.runOnEveryRank(ranks, OPTIONS, group -> {
            try (DistributedTensor t = DistributedTensor.create(group, ElementType.FLOAT64, rows, cols)) {
                assertEquals(0, t.firstRow(0));
                assertEquals(rows, t.firstRow(ranks));
                long total = 0;
                for (int r = 0; r < ranks; r++) {
                    total += t.rows(r);
                    for (long row = t.firstRow(r); row < t.firstRow(r + 1); row++) {
                        assertEquals(r, t.ownerOf(row));
                    }
                }
                assertEquals(rows, total);
                // each rank writes its rows: value = row * 100 + col
                MemorySegment mine = t.localShard();
                for (long i = 0; i < t.rows(group.rank()); i++) {
                    for (long c = 0; c < cols; c++) {
                        mine.setAtIndex(ValueLayout.JAVA_DOUBLE, i * cols + c, (t.firstRow(group.rank()) + i) * 100.0 + c);
                    }
                }
                t.barrier();
                // a slice across every shard
                MemorySegment slice = MemorySegment.ofArray(new double[(int) (8 * cols)]);
                t.getRows(1, 8, slice);
                for (int i = 0; i < 8 * cols; i++) {
                    assertEquals((1 + i / cols) * 100.0 + i % cols, slice.getAtIndex(ValueLayout.JAVA_DOUBLE, i));
                }
                // a zero-copy view of the last rank's shard
                MemorySegment last = t.shard(ranks - 1);
                assertEquals(t.firstRow(ranks - 1) * 100.0, last.getAtIndex(ValueLayout.JAVA_DOUBLE, 0));
                t.barrier();
                // rank 1 overwrites rows 2..6 (several owners) with negatives
                if (group.rank() == 1) {
                    double[] neg = new double[(int) (5 * cols)];
                    java.util.Arrays.fill(neg, -1);
                    t.putRows(2, 5, MemorySegment.ofArray(neg));
                }
                double[] all = new double[(int) (rows * cols)];
                t.gather(0, group.rank() == 0 ? MemorySegment.ofArray(all) : null);
                if (group.rank() == 0) {
                    double[] expected = new double[(int) (rows * cols)];
                    for (int i = 0; i < expected.length; i++) {
                        long row = i / cols;
                        expected[i] = row >= 2 && row < 7 ? -1 : row * 100.0 + i % cols;
                    }
                    assertArrayEquals(expected, all);
                }
                assertThrows(IndexOutOfBoundsException.class, () -> t.getRows(8, 3, slice));
                assertThrows(IllegalArgumentException.class, () -> t.getRows(0, 9, slice));
            }
            return null;
        });
    }

    @Test
    void everyElementTypeSizesItsRows() {
        InJvmWorld.runOnEveryRank(2, OPTIONS, group -> {
            for (ElementType type : ElementType.values()) {
                try (DistributedTensor t = DistributedTensor.create(group, type, 7, 3, 2)) {
                    assertEquals(6L * type.byteSize(), t.rowBytes());
                    assertEquals(t.rows(group.rank()) * t.rowBytes(), t.localShard().byteSize());
                }
            }
            assertThrows(IllegalArgumentException.class, () -> DistributedTensor.create(group, ElementType.INT32, 4, 0));
            return null;
        });
    }
}
