package org.symmem4j.dl4j;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;
import org.deeplearning4j.nn.conf.GradientNormalization;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.dataset.DataSet;

/**
 * Sharding beyond the plain step: gradient normalization and clipping with global norms, uneven
 * rounds, non-finite gradients, and state that survives between fits or is changed by the user.
 */
class ShardedBehaviourTest {

    @ParameterizedTest(name = "{0}")
    @EnumSource(value = GradientNormalization.class, names = "None", mode = EnumSource.Mode.EXCLUDE)
    void normalizationAndClippingUseGlobalNorms(GradientNormalization kind) {
        // thresholds well below the gradients' norms and magnitudes, so every step is clipped
        double threshold = kind == GradientNormalization.ClipElementWiseAbsoluteValue ? 0.002 : 0.05;
        int workers = 3;  // 987 parameters in 3 shards: every shard cuts through a layer
        for (DataType dtype : new DataType[] {DataType.DOUBLE, DataType.FLOAT}) {
            List<DataSet> data = Nets.batches(21, 5 * workers, 8, dtype);
            MultiLayerNetwork net = Nets.mlp("adam+" + kind.name(), dtype, Nets.HIDDEN, threshold);
            ShardedEquivalenceTest.Run plain = ShardedEquivalenceTest.train(net, workers, null, data);
            ShardedEquivalenceTest.Run unclipped = ShardedEquivalenceTest.train(Nets.mlp("adam", dtype, Nets.HIDDEN, 0),
                    workers, null, data);
            assertTrue(Nets.maxRelativeDifference(plain.params(), unclipped.params()) > 1e-3,
                    kind + " must change training for this test to mean something");
            for (ZeroStage stage : ShardedEquivalenceTest.REPLICATING_STAGES) {
                ShardedEquivalenceTest.Run sharded = ShardedEquivalenceTest.train(net, workers, stage, data);
                if (kind == GradientNormalization.ClipElementWiseAbsoluteValue) {
                    // element-wise: no norm involved, so the same bits
                    assertTrue(ModelReplica.bitwiseEqual(plain.params(), sharded.params()), kind + " " + stage + " " + dtype);
                    continue;
                }
                // The norm is summed in a different order than ND4J's norm2 (shard partial sums in
                // double, then ranks in order), so it may differ in its last bit, and so may the
                // parameters (measured: 7e-17 in fp64, 4e-8 in fp32, after 5 steps).
                double tol = dtype == DataType.DOUBLE ? 1e-14 : 1e-6;
                double diff = Nets.maxRelativeDifference(sharded.params(), plain.params());
                assertTrue(diff <= tol, kind + " " + stage + " " + dtype + ": max relative difference " + diff + " > " + tol);
            }
        }
    }

    @Test
    void shortLastRoundAndUnequalBatchesMatchPlainDataParallelism() {
        int workers = 4;
        SplittableRandom rnd = new SplittableRandom(5);
        List<DataSet> data = new ArrayList<>();
        for (int size : new int[] {8, 8, 8, 8, 5, 11, 8, 3, 7}) {   // the last step has one batch for four workers
            data.add(Nets.batch(rnd, size, DataType.DOUBLE));
        }
        MultiLayerNetwork net = Nets.mlp("adamw", DataType.DOUBLE, Nets.HIDDEN, 0);
        ShardedEquivalenceTest.Run plain = ShardedEquivalenceTest.train(net, workers, null, data);
        assertEquals(3, plain.perStep().size());
        for (ZeroStage stage : ShardedEquivalenceTest.REPLICATING_STAGES) {
            ShardedEquivalenceTest.Run sharded = ShardedEquivalenceTest.train(net, workers, stage, data);
            for (int s = 0; s < 3; s++) {
                assertTrue(ModelReplica.bitwiseEqual(plain.perStep().get(s), sharded.perStep().get(s)), stage + " step " + s);
            }
            assertTrue(ModelReplica.bitwiseEqual(plain.updaterState(), sharded.updaterState()), stage + " state");
        }
    }

    @Test
    void stateSurvivesBetweenFitsAndUserChangesToTheModelAreTakenUp() {
        int workers = 2;
        List<DataSet> first = Nets.batches(1, 6, 8, DataType.DOUBLE);
        List<DataSet> second = Nets.batches(2, 6, 8, DataType.DOUBLE);
        List<DataSet> third = Nets.batches(3, 6, 8, DataType.DOUBLE);
        MultiLayerNetwork plain = Nets.mlp("adam", DataType.DOUBLE, Nets.HIDDEN, 0);
        MultiLayerNetwork sharded = plain.clone();
        try (SymmemParallelWrapper p = SymmemParallelWrapper.builder(plain).workers(workers).build();
             SymmemParallelWrapper z = SymmemParallelWrapper.builder(sharded).workers(workers)
                     .sharding(ZeroStage.GRADIENTS).build()) {
            p.fit(new BatchListIterator(first));
            z.fit(new BatchListIterator(first));
            p.fit(new BatchListIterator(second));
            z.fit(new BatchListIterator(second));
            assertTrue(ModelReplica.bitwiseEqual(plain.params(), sharded.params()), "second fit: parameters");
            assertTrue(ModelReplica.bitwiseEqual(plain.getUpdater().getStateViewArray(),
                    sharded.getUpdater().getStateViewArray()), "second fit: Adam state kept in the shards and gathered");
            assertEquals(2, sharded.getEpochCount());
            // the user halves the Adam moments and nudges a weight between fits: both wrappers take it up
            for (MultiLayerNetwork m : List.of(plain, sharded)) {
                m.getUpdater().getStateViewArray().muli(0.5);
                m.params().putScalar(3, m.params().getDouble(3) + 0.25);
            }
            p.fit(new BatchListIterator(third));
            z.fit(new BatchListIterator(third));
            assertTrue(ModelReplica.bitwiseEqual(plain.params(), sharded.params()), "after the user's change: parameters");
            assertTrue(ModelReplica.bitwiseEqual(plain.getUpdater().getStateViewArray(),
                    sharded.getUpdater().getStateViewArray()), "after the user's change: state");
        }
        // the change mattered: the same three fits without it land elsewhere
        MultiLayerNetwork untouched = Nets.mlp("adam", DataType.DOUBLE, Nets.HIDDEN, 0);
        try (SymmemParallelWrapper u = SymmemParallelWrapper.builder(untouched).workers(workers)
                .sharding(ZeroStage.GRADIENTS).build()) {
            for (List<DataSet> d : List.of(first, second, third)) {
                u.fit(new BatchListIterator(d));
            }
        }
        assertTrue(Nets.maxRelativeDifference(untouched.params(), sharded.params()) > 1e-6);
    }

    @Test
    void nonFiniteGradientFailsNamingWorkerAndStepOrIsSkipped() {
        List<DataSet> data = new ArrayList<>(Nets.batches(8, 12, 8, DataType.DOUBLE));
        DataSet bad = data.get(3 * 2 + 1).copy();
        bad.getFeatures().putScalar(0, 0, Double.NaN);
        data.set(3 * 2 + 1, bad);
        MultiLayerNetwork net = Nets.mlp("adam", DataType.DOUBLE, Nets.HIDDEN, 0);
        for (ZeroStage stage : ShardedEquivalenceTest.REPLICATING_STAGES) {
            MultiLayerNetwork failing = net.clone();
            try (SymmemParallelWrapper w = SymmemParallelWrapper.builder(failing).workers(2).sharding(stage).build()) {
                NonFiniteGradientException e = assertThrows(NonFiniteGradientException.class,
                        () -> w.fit(new BatchListIterator(data)));
                assertEquals(List.of(1), e.workers(), stage + ": " + e.getMessage());
                assertEquals(3, e.step());
                assertTrue(e.getMessage().contains("step=3") && e.getMessage().contains("worker 1"), e.getMessage());
            }
            List<Boolean> skipped = new ArrayList<>();
            MultiLayerNetwork skipping = net.clone();
            try (SymmemParallelWrapper w = SymmemParallelWrapper.builder(skipping).workers(2).sharding(stage)
                    .nonFiniteGradients(NonFiniteGradients.SKIP_STEP).stepListener(r -> skipped.add(r.skipped())).build()) {
                w.fit(new BatchListIterator(data));
            }
            assertEquals(List.of(false, false, false, true, false, false), skipped);
            MultiLayerNetwork reference = net.clone();
            List<DataSet> withoutStep3 = new ArrayList<>(data);
            withoutStep3.subList(6, 8).clear();
            try (SymmemParallelWrapper w = SymmemParallelWrapper.builder(reference).workers(2).build()) {
                w.fit(new BatchListIterator(withoutStep3));
            }
            assertTrue(ModelReplica.bitwiseEqual(reference.params(), skipping.params()),
                    stage + ": a skipped step leaves parameters and every shard's Adam state untouched");
            assertTrue(ModelReplica.bitwiseEqual(reference.getUpdater().getStateViewArray(),
                    skipping.getUpdater().getStateViewArray()), stage + ": state");
            assertEquals(reference.getIterationCount(), skipping.getIterationCount());
        }
    }
}
