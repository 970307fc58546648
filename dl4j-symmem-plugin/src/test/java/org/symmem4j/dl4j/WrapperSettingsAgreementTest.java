package org.symmem4j.dl4j;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.function.BiConsumer;
import org.deeplearning4j.nn.conf.WorkspaceMode;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.dataset.DataSet;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.group.InJvmWorld;

/**
 * Group mode's agreement on the ranks' settings at {@code build()} ({@link WrapperSettingsAgreement}), in thread mode
 * with a 5 s group timeout. Before it each of these builds succeeded on every rank: ranks with different ZeRO stages
 * ran different collectives and waited for each other until the timeout in the first {@code fit()}; ranks with
 * different bucket sizes or checkpoint schedules likewise; ranks with different networks trained over vectors of
 * different lengths. Now every rank refuses at {@code build()} with the same message, naming each setting that differs
 * and each rank's value, before anything is read into a model or written.
 */
class WrapperSettingsAgreementTest {

    private static final GroupOptions SHORT = GroupOptions.defaults().withTimeout(Duration.ofSeconds(5));

    @Test
    void ranksWithDifferentZeroStagesAreRefusedOnEveryRankNamingTheStages() {
        List<String> messages = refusedOnEveryRank(2, null, (rank, b) ->
                b.sharding(rank == 0 ? ZeroStage.OPTIMIZER_STATE : ZeroStage.GRADIENTS));
        assertTrue(messages.getFirst().startsWith("build() refused on every rank (2): the ranks were built with"
                + " different settings, expected every rank's the same (its sharding, averaging, checkpoints, failure"
                + " handling and model); nothing was read into or written from any rank's model. sharding differs:"
                + " OPTIMIZER_STATE on rank(s) [0], GRADIENTS on rank(s) [1] (fix: give every rank's"
                + " SymmemParallelWrapper.builder the same settings"), messages.getFirst());
    }

    /** Three ranks, two settings differing: each lists the ranks by value (the majority is not assumed right). */
    @Test
    void everyDifferingSettingIsNamedWithTheRanksGroupedByValue(@TempDir Path tmp) {
        Path root = tmp.resolve("checkpoints");
        List<String> messages = refusedOnEveryRank(3, null, (rank, b) -> {
            b.bucketBytes(rank == 1 ? 1 << 10 : 4 << 20).checkpointEvery(rank == 2 ? 3 : 2, root)
                    .nonFiniteGradients(NonFiniteGradients.SKIP_STEP);
        });
        String m = messages.getFirst();
        assertTrue(m.contains(" bucketBytes differs: 4194304 on rank(s) [0, 2], 1024 on rank(s) [1];"
                + " checkpointEvery differs: every 2 steps, keep 2 on rank(s) [0, 1], every 3 steps, keep 2 on rank(s)"
                + " [2] (fix: "), m);
        assertTrue(!m.contains("nonFiniteGradients"), "a setting every rank has alike is not named: " + m);
        assertTrue(!Files.exists(root), "nothing written: " + root);
    }

    @Test
    void ranksWithDifferentNetworksAreRefusedNamingTheConfigurationAndTheParameterCount() {
        List<String> messages = refusedOnEveryRank(2, rank -> Nets.mlp("sgd", DataType.DOUBLE, rank == 0 ? 24 : 16, 0),
                (rank, b) -> { });
        String m = messages.getFirst();
        assertTrue(m.contains(" configuration differs: CRC-32C "), m);
        long wide = HollowNetworks.parameterCount(Nets.mlp("sgd", DataType.DOUBLE, 24, 0).getLayerWiseConfigurations());
        long narrow = HollowNetworks.parameterCount(Nets.mlp("sgd", DataType.DOUBLE, 16, 0).getLayerWiseConfigurations());
        assertTrue(m.contains("; parameters differs: " + wide + " on rank(s) [0], " + narrow + " on rank(s) [1]"), m);
        assertTrue(m.endsWith("(fix: build every rank's network from the same configuration (the same code and seed,"
                + " or the same file))"), m);
    }

    /** A network trained before on one rank only: its counters differ, its configuration does not. */
    @Test
    void ranksStartingFromDifferentIterationCountsAreRefused() {
        List<String> messages = refusedOnEveryRank(2, rank -> {
            MultiLayerNetwork net = Nets.mlp(Nets.updater("sgd"), DataType.DOUBLE);
            net.setIterationCount(rank == 1 ? 7 : 0);
            return net;
        }, (rank, b) -> { });
        String m = messages.getFirst();
        assertTrue(m.contains(" iterationCount differs: 0 on rank(s) [0], 7 on rank(s) [1] (fix: start every rank"
                + " from the same state"), m);
        assertTrue(!m.contains("configuration differs"), "the counters are compared apart: " + m);
    }

    /**
     * What may differ per rank is not compared: ND4J threads, the prefetch buffer, the workspace mode, score logging
     * and the checkpoint root's path. The ranks build and train together, and end bitwise equal.
     */
    @Test
    void settingsThatMayDifferPerRankAreNotCompared(@TempDir Path tmp) {
        MultiLayerNetwork initial = Nets.mlp(Nets.updater("sgd"), DataType.DOUBLE);
        List<DataSet> data = Nets.batches(3, 4, 8, DataType.DOUBLE);
        List<double[]> params = InJvmWorld.runOnEveryRank(2, SHORT, group -> {
            MultiLayerNetwork mine = initial.clone();
            int rank = group.rank();
            SymmemParallelWrapper.Builder b = SymmemParallelWrapper.builder(mine).group(group)
                    .ompThreadsPerWorker(rank + 1).prefetchBuffer(rank * 2).reportScoreAfterAveraging(rank == 0)
                    .workspaceMode(rank == 0 ? WorkspaceMode.ENABLED : WorkspaceMode.NONE)
                    .checkpointEvery(100, tmp.resolve("rank-" + rank));
            try (SymmemParallelWrapper w = b.build()) {
                w.fit(new BatchListIterator(data, () -> { }, true));
            }
            return mine.params().toDoubleVector();
        });
        assertArrayEquals(params.get(0), params.get(1), "the ranks trained together");
    }

    /** A network for each rank (by rank); each rank's builder then gets its settings. */
    private interface Networks {
        MultiLayerNetwork forRank(int rank);
    }

    /**
     * Builds on {@code ranks} ranks (each with its network, or a clone of one MLP), asserts that every rank refuses
     * with the same message and that nothing was read into its model, and returns the messages in rank order.
     */
    private static List<String> refusedOnEveryRank(int ranks, Networks networks,
                                                   BiConsumer<Integer, SymmemParallelWrapper.Builder> settings) {
        MultiLayerNetwork initial = Nets.mlp(Nets.updater("sgd"), DataType.DOUBLE);
        List<String> messages = InJvmWorld.runOnEveryRank(ranks, SHORT, group -> {
            MultiLayerNetwork mine = networks == null ? initial.clone() : networks.forRank(group.rank());
            double[] before = mine.params().dup().toDoubleVector();
            SymmemParallelWrapper.Builder b = SymmemParallelWrapper.builder(mine).group(group).ompThreadsPerWorker(1);
            settings.accept(group.rank(), b);
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class, b::build, "rank " + group.rank());
            assertArrayEquals(before, mine.params().toDoubleVector(), "rank " + group.rank() + ": nothing read");
            return e.getMessage();
        });
        for (String m : messages) {
            assertEquals(messages.getFirst(), m, "every rank the same refusal");
        }
        return messages;
    }
}
