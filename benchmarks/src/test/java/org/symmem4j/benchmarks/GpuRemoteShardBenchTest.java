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
}
