package org.symmem4j.benchmarks;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.symmem4j.benchmarks.GpuRemoteShardBench.Cell;

/** The remote-shard benchmark's parts that run without GPUs: its options and its report. */
class GpuRemoteShardBenchTest {

    @Test
    void theDefaultsReadUpTo256MiBSevenTimes() {
        GpuRemoteShardBench.Flags f = org.symmem4j.examples.Cli.parse(new GpuRemoteShardBench.Flags(), new String[0]);
        assertEquals(256L << 20, f.maxBytes);
        assertEquals(7, f.reps);
    }

    @Test
    void theReportHasOneRowPerSizeAndNamesWhereTheTenfoldClaimHolds() {
        List<Long> sizes = List.of(1024L, 4096L);
        List<Cell> cells = new ArrayList<>();
        for (long bytes : sizes) {
            for (boolean graph : new boolean[] {true, false}) {
                cells.add(new Cell(1, bytes, GpuRemoteShardBench.KERNEL, graph, bytes == 1024 ? 1.0 : 4.0, 0.01));
                cells.add(new Cell(1, bytes, GpuRemoteShardBench.COPY_ENGINE, graph, 2.0, 0.01));
                cells.add(new Cell(1, bytes, GpuRemoteShardBench.NCCL, graph, 12.0, 0.01));
            }
        }
        String md = GpuRemoteShardBench.report("versions", cells, sizes, 2, 2, 7);
        assertTrue(md.contains("| 1 KiB | 1.00 | 2.00 | 12.00 | 12.00× | 6.00× |"), md);
        assertTrue(md.contains("| 4 KiB | 4.00 | 2.00 | 12.00 | 3.00× | 6.00× |"), md);
        assertTrue(md.contains("Met at: GPU 1, 1 KiB."), md);
        assertTrue(md.contains("## GPU 1 -> GPU 0, eager"), md);
    }

    @Test
    void theInKernelSectionComparesTheRunningKernelsReadWithNcclAndNamesTheTenfold() {
        List<Long> sizes = List.of(1024L, 4096L);
        List<Cell> cells = new ArrayList<>();
        for (long bytes : sizes) {
            cells.add(new Cell(1, bytes, GpuRemoteShardBench.NCCL, false, 10.0, 0.01));
            cells.add(new Cell(1, bytes, GpuRemoteShardBench.NCCL, true, 8.0, 0.01));
            cells.add(new Cell(1, bytes, GpuRemoteShardBench.IN_KERNEL_REMOTE, false, bytes == 1024 ? 0.5 : 2.0, 0.01));
            cells.add(new Cell(0, bytes, GpuRemoteShardBench.IN_KERNEL_LOCAL, false, 0.25, 0.01)); // rank 0's own
        }
        String md = GpuRemoteShardBench.inKernelReport(cells, sizes, 2, null);
        assertTrue(md.contains("| 1 KiB | 0.500 | 0.250 | 10.00 | 8.00 | 20.0× | 16.0× | 2.0 |"), md);
        assertTrue(md.contains("| 4 KiB | 2.000 | 0.250 | 10.00 | 8.00 | 5.0× | 4.0× | 2.0 |"), md);
        assertTrue(md.contains("by the in-kernel read: met at GPU 1, 1 KiB."), md);
        String absent = GpuRemoteShardBench.inKernelReport(List.of(), sizes, 2, "ABSENT: no image");
        assertTrue(absent.contains("Not measured: ABSENT: no image."), absent);
    }

    @Test
    void theInKernelChecksumIsTheRoundsXorOfTheWordsXorPlusTheRound() {
        // 1 KiB of rank 1's shard: 256 words of the pattern; two rounds: (w + 0) ^ (w + 1)
        int words = 0;
        for (int i = 0; i < 256; i++) {
            words ^= GpuRemoteShardBench.pattern(1, i);
        }
        assertEquals(Integer.toUnsignedLong(words ^ (words + 1)), GpuRemoteShardBench.inKernelCheck(1, 1024, 2));
        assertEquals(Integer.toUnsignedLong(words), GpuRemoteShardBench.inKernelCheck(1, 1024, 1));
    }
}
