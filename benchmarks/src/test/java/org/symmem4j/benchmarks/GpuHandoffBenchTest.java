package org.symmem4j.benchmarks;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.symmem4j.benchmarks.GpuHandoffBench.Cell;

/** The hand-off benchmark's parts that run without GPUs: cells between rank processes, and the report's columns. */
class GpuHandoffBenchTest {

    @Test
    void cellsTravelBetweenRankProcessesUnchanged() {
        List<Cell> cells = List.of(new Cell(0, 1024, GpuHandoffBench.NVSHMEM, true, 13.0412345678, 0.031),
                new Cell(2, 16L << 20, GpuHandoffBench.NCCL, false, 83.36, 0.0));
        assertEquals(cells, GpuHandoffBench.decode(GpuHandoffBench.encode(cells)));
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> GpuHandoffBench.decode("1\t2\n"));
        assertTrue(e.getMessage().contains("expected 6 tab-separated fields, found 2"), e.getMessage());
    }

    @Test
    void theProcessModeOptionsParseIntoBothBenchmarks() {
        GpuHandoffBench.Flags handoff = org.symmem4j.examples.Cli.parse(new GpuHandoffBench.Flags(),
                new String[] {"--processes", "--timeout", "45", "--rank-process"});
        assertTrue(handoff.processes && handoff.ranks.rankProcess);
        assertEquals(45, handoff.ranks.timeoutSeconds);
        TensorParallelGemmBench.Flags tp = org.symmem4j.examples.Cli.parse(new TensorParallelGemmBench.Flags(), new String[0]);
        assertFalse(tp.processes || tp.ranks.rankProcess);
        assertEquals(600, tp.ranks.timeoutSeconds);
    }

    @Test
    void theReportGetsNvshmemColumnsOnlyWhereNvshmemRan() {
        long[] sizes = {1L << 10, 4L << 10, 16L << 10, 64L << 10, 256L << 10, 1L << 20, 4L << 20, 16L << 20};
        List<Cell> twoWays = new ArrayList<>();
        for (long bytes : sizes) {
            for (boolean graph : new boolean[] {true, false}) {
                twoWays.add(new Cell(0, bytes, GpuHandoffBench.SYMMEM, graph, 4.0, 0.01));
                twoWays.add(new Cell(0, bytes, GpuHandoffBench.NCCL, graph, 8.0, 0.01));
            }
        }
        String plain = GpuHandoffBench.report("versions", twoWays, 2, 2, "GPU", 7, "threads of one JVM");
        assertFalse(plain.contains("NVSHMEM"), plain);
        assertTrue(plain.contains("| 1 KiB | 4.00 | 8.00 | 2.00× |"), plain);
        List<Cell> threeWays = new ArrayList<>(twoWays);
        for (long bytes : sizes) {
            for (boolean graph : new boolean[] {true, false}) {
                threeWays.add(new Cell(0, bytes, GpuHandoffBench.NVSHMEM, graph, 16.0, 0.01));
            }
        }
        String withNvshmem = GpuHandoffBench.report("versions", threeWays, 2, 2, "GPU", 7, "one process per GPU");
        assertTrue(withNvshmem.contains("| 1 KiB | 4.00 | 16.00 | 8.00 | 2.00× | 0.50× |"), withNvshmem);
        assertTrue(withNvshmem.contains("nvshmemx_putmem_signal_on_stream"), withNvshmem);
    }
}
