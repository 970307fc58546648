package org.symmem4j.it;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;
import org.junit.jupiter.params.provider.ValueSource;
import org.symmem4j.parallel.host.SharedMemoryFiles;
import org.symmem4j.pipeline.exec.AffineStage;

/** 2 and 4 JVM processes through the rendezvous store and /dev/shm: every collective checked, ranks bitwise equal. */
class CrossProcessTest {

    @ParameterizedTest(name = "{0} processes")
    @ValueSource(ints = {2, 4})
    void collectivesAcrossProcesses(int worldSize) throws Exception {
        try (Workers w = Workers.start(worldSize, "collectives", 60_000)) {
            int[] codes = w.awaitExit(240_000);
            for (int r = 0; r < worldSize; r++) {
                assertEquals(0, codes[r], "rank " + r + " exit code; log:\n" + w.log(r));
                assertTrue(w.log(r).contains("OK"), w.log(r));
            }
            String[] rank0 = checksums(w.log(0));
            assertTrue(rank0.length > 100, "expected a checksum per case, found " + rank0.length);
            for (int r = 1; r < worldSize; r++) {
                assertArrayEquals(rank0, checksums(w.log(r)), "rank " + r + " results differ bitwise from rank 0");
            }
            assertNoFilesOf(w.pids());
        }
    }

    /** The pipeline executor over /dev/shm links: every process's stages end bit-equal to the sequential reference. */
    @ParameterizedTest(name = "{0}")
    @CsvSource({"2, 1f1b", "4, 1f1b", "2, gpipe", "2, interleaved"})
    void pipelineAcrossProcesses(int worldSize, String schedule) throws Exception {
        try (Workers w = Workers.start(worldSize, "pipeline " + schedule, 60_000)) {
            int[] codes = w.awaitExit(120_000);
            int stagesPerRank = schedule.equals("interleaved") ? 2 : 1;
            int stageCount = worldSize * stagesPerRank;
            float[] reference = AffineStage.reference(stageCount, ProcessWorker.PIPELINE_MICROBATCHES,
                    ProcessWorker.PIPELINE_WIDTH, ProcessWorker.PIPELINE_STEPS);
            int seen = 0;
            for (int r = 0; r < worldSize; r++) {
                assertEquals(0, codes[r], "rank " + r + " exit code; log:\n" + w.log(r));
                for (String line : w.log(r).lines().filter(l -> l.startsWith("PARAM ")).toList()) {
                    String[] f = line.split(" ");
                    int stage = Integer.parseInt(f[1]);
                    assertEquals(r, stage % worldSize, "stage " + stage + " reported by rank " + r);
                    assertEquals(reference[2 * stage], Float.intBitsToFloat(Integer.parseInt(f[2])), "a of stage " + stage);
                    assertEquals(reference[2 * stage + 1], Float.intBitsToFloat(Integer.parseInt(f[3])), "b of stage " + stage);
                    seen++;
                }
            }
            assertEquals(stageCount, seen, "one PARAM line per stage");
            assertNoFilesOf(w.pids());
        }
    }

    /** A process group joined on a transport of its own (as a device transport would be) allocates and reduces through it. */
    @Test
    void aProcessGroupOnItsOwnTransportUsesItAndKeepsHostMemoryForControl() throws Exception {
        try (Workers w = Workers.start(3, "on-transport", 60_000)) {
            int[] codes = w.awaitExit(120_000);
            for (int r = 0; r < 3; r++) {
                assertEquals(0, codes[r], "rank " + r + " exit code; log:\n" + w.log(r));
                assertTrue(w.log(r).contains("ON-TRANSPORT 6.0"), w.log(r));
            }
        }
    }

    private static String[] checksums(String log) {
        return log.lines().filter(l -> l.startsWith("CHECKSUM ")).toArray(String[]::new);
    }

    static void assertNoFilesOf(List<Long> pids) {
        for (String name : SharedMemoryFiles.list()) {
            for (long pid : pids) {
                assertTrue(!name.startsWith(SharedMemoryFiles.PREFIX + pid + "-"),
                        "shared-memory file left behind by pid " + pid + ": " + name);
            }
        }
    }
}
