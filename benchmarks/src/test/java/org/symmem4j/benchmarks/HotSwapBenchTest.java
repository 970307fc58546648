package org.symmem4j.benchmarks;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;

import org.junit.jupiter.api.Test;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.factory.Nd4j;

/** {@link HotSwapBench} at a small size (its 10,000-request run is bench/serving/hot-swap.sh), and its checks. */
class HotSwapBenchTest {

    private static final HotSwapBench.Settings SMALL = new HotSwapBench.Settings(160, 4, 2, 16, 20, 4, 50_000_000L);

    @Test
    void aSmallRunThroughTheRouterAndTheHttpFrontHasNoMixNoFailureAndFreesEveryRetiredVersion() throws Exception {
        HotSwapBench.Versions versions = HotSwapBench.Versions.make(SMALL.deploys());
        for (String mode : List.of("router", "http")) {
            HotSwapBench.Result r = HotSwapBench.run(SMALL, mode, versions);
            assertEquals(List.of(), r.firstProblems(), mode);
            assertEquals(160, r.ok(), mode + ": every request answered by the version it names");
            assertEquals(7, r.swaps().size(), mode);
            assertEquals(1, r.swaps().stream().filter(s -> s.kind().equals("rollback")).count(), mode);
            assertEquals(7, r.versionsPublished(), mode);
            assertEquals(5, r.freedVersions(), mode + ": all but the current version and the one kept");
            assertEquals(2, r.residentAtEnd(), mode);
            assertTrue(r.leaseHeldRetired() && r.leaseReleaseFreed(), mode + ": kept while leased, freed after");
            assertEquals(160, r.latencyDuring().length + r.latencyWithout().length, mode);
            assertTrue(r.passed(), mode);
        }
    }

    @Test
    void anAnswerWithAnotherVersionsRowIsAMixAndSaysWhoseRowItIs() {
        HotSwapBench.Versions versions = HotSwapBench.Versions.make(3);
        int[] picks = {4, 9};
        INDArray ofVersion2 = Nd4j.vstack(versions.outputs().get(1).getRow(4, true),
                versions.outputs().get(1).getRow(9, true));
        assertNull(versions.check(2, picks, ofVersion2));
        INDArray mixed = Nd4j.vstack(versions.outputs().get(1).getRow(4, true),
                versions.outputs().get(2).getRow(9, true));
        String wrong = versions.check(2, picks, mixed);
        assertTrue(wrong != null && wrong.contains("row 1") && wrong.contains("version(s) [3]"), wrong);
        assertTrue(versions.check(1, picks, ofVersion2).contains("version(s) [2]"));
        assertTrue(versions.check(4, picks, ofVersion2).contains("never deployed"));
    }

    @Test
    void settingsWithoutARollbackAreRefused() {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> new HotSwapBench.Settings(100, 2, 1, 8, 50, 4, 0));
        assertTrue(e.getMessage().contains("so that one is a rollback"), e.getMessage());
    }
}
