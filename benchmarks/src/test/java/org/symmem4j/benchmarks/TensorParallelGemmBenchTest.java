package org.symmem4j.benchmarks;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import org.junit.jupiter.api.Test;
import org.symmem4j.benchmarks.TensorParallelGemmBench.Cell;

/** The parts of {@link TensorParallelGemmBench}'s process mode that run without GPUs: the rank processes' arguments and cells. */
class TensorParallelGemmBenchTest {

    @Test
    void rankProcessesGetTheParentsArgumentsWithoutProcessesAndMarkedAsRanks() {
        List<String> args = ChildJvms.rankProcessArgs(new String[] {"--processes", "--m", "8192", "--out", "r.md"});
        assertEquals(List.of("--m", "8192", "--out", "r.md", "--rank-process"), args);
    }

    @Test
    void cellsTravelBetweenRanksUnchanged() {
        List<Cell> cells = List.of(new Cell("all-gather + matmul", 8192, 1792, 4096, "fused", 217.01234567, 0.05, 415.5),
                new Cell("MLP block fwd+bwd", 8192, 4096, 14336, "cuBLAS + NCCL", 5024.6, 0.02, 33.25));
        assertEquals(cells, TensorParallelGemmBench.decode(TensorParallelGemmBench.encode(cells)));
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> TensorParallelGemmBench.decode("a\tb\n"));
        assertTrue(e.getMessage().contains("expected 8 tab-separated fields, found 2"), e.getMessage());
    }
}
