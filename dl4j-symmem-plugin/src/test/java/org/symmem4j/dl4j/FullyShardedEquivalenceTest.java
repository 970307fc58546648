package org.symmem4j.dl4j;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.stream.Stream;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.dataset.DataSet;

/**
 * ZeRO stage 3 ({@link ZeroStage#PARAMETERS}) against plain data parallelism and stages 1 and 2 on
 * the same model, data and worker count, threads of one JVM: the step losses (regularization term
 * included), the parameters after every fit and the final updater state, gathered from the shards
 * into the model, are bitwise equal.
 */
class FullyShardedEquivalenceTest {

    /** The losses of every step, the model's parameters after each fit, and its final updater state. */
    record Run(List<Double> losses, List<INDArray> afterFit, INDArray updaterState, int iterations) {
    }

    /** Trains a copy of {@code original} with {@code fits} fits of {@code stepsPerFit} steps each. */
    static Run train(MultiLayerNetwork original, int workers, ZeroStage stage, List<DataSet> data, int fits) {
        MultiLayerNetwork net = original.clone();
        SymmemParallelWrapper.Builder builder = SymmemParallelWrapper.builder(net).workers(workers);
        if (stage != null) {
            builder.sharding(stage);
        }
        List<Double> losses = new ArrayList<>();
        builder.stepListener(report -> losses.add(report.loss()));
        List<INDArray> afterFit = new ArrayList<>();
        int per = data.size() / fits;
        try (SymmemParallelWrapper wrapper = builder.build()) {
            for (int f = 0; f < fits; f++) {
                wrapper.fit(new BatchListIterator(data.subList(f * per, (f + 1) * per)));
                afterFit.add(net.params().dup());
            }
        }
        INDArray state = net.getUpdater().getStateViewArray();
        return new Run(losses, afterFit, state == null ? null : state.dup(), net.getIterationCount());
    }

    static Stream<Arguments> cases() {
        List<Arguments> out = new ArrayList<>();
        for (int workers : new int[] {2, 3}) {
            for (String recipe : new String[] {"adam", "adamw", "nesterov+l2", "mixed", "adam+ClipElementWiseAbsoluteValue"}) {
                out.add(Arguments.of(workers, recipe, DataType.FLOAT));
            }
        }
        out.add(Arguments.of(3, "adam", DataType.DOUBLE));
        return out.stream();
    }

    @ParameterizedTest(name = "workers={0} {1} {2}")
    @MethodSource("cases")
    void stage3EqualsPlainDataParallelismAndStagesOneAndTwoBitwise(int workers, String recipe, DataType dtype) {
        int fits = 2;
        int stepsPerFit = 3;
        List<DataSet> data = Nets.batches(31, fits * stepsPerFit * workers, 8, dtype);
        // hidden 40: layers of 600-1,600 elements, cut into blocks that do not fall on page boundaries
        MultiLayerNetwork net = Nets.mlp(recipe, dtype, 40, 0.002);
        Run plain = train(net, workers, null, data, fits);
        Run stage3 = train(net, workers, ZeroStage.PARAMETERS, data, fits);
        assertEquals(fits * stepsPerFit, stage3.losses().size());
        for (int s = 0; s < plain.losses().size(); s++) {
            assertEquals(Double.doubleToRawLongBits(plain.losses().get(s)), Double.doubleToRawLongBits(stage3.losses().get(s)),
                    "step " + s + " loss: plain " + plain.losses().get(s) + ", stage 3 " + stage3.losses().get(s));
        }
        for (int f = 0; f < fits; f++) {
            assertTrue(ModelReplica.bitwiseEqual(plain.afterFit().get(f), stage3.afterFit().get(f)),
                    "parameters after fit " + f + " differ from plain data parallelism; max relative difference "
                            + Nets.maxRelativeDifference(stage3.afterFit().get(f), plain.afterFit().get(f)));
        }
        assertTrue(ModelReplica.bitwiseEqual(plain.updaterState(), stage3.updaterState()),
                "updater state gathered from stage 3's shards differs from plain data parallelism's");
        assertEquals(plain.iterations(), stage3.iterations());
        for (ZeroStage stage : new ZeroStage[] {ZeroStage.OPTIMIZER_STATE, ZeroStage.GRADIENTS}) {
            Run other = train(net, workers, stage, data, fits);
            assertTrue(ModelReplica.bitwiseEqual(other.afterFit().getLast(), stage3.afterFit().getLast()), stage + " vs stage 3");
            assertTrue(ModelReplica.bitwiseEqual(other.updaterState(), stage3.updaterState()), stage + " vs stage 3 state");
        }
        // the comparison can fail: one step less lands elsewhere
        Run shorter = train(net, workers, ZeroStage.PARAMETERS, data.subList(0, data.size() - workers), 1);
        assertTrue(!ModelReplica.bitwiseEqual(plain.afterFit().getLast(), shorter.afterFit().getLast()));
    }

    /**
     * Norm-based gradient normalization: the norms are agreed from the ranks' partial sums of squares
     * as in stages 1 and 2 (see ShardedBehaviourTest), summed in another order than ND4J's norm2, so
     * the last bit may differ; within the same bounds as those stages, and every step clipped.
     */
    @ParameterizedTest(name = "{0}")
    @org.junit.jupiter.params.provider.EnumSource(value = org.deeplearning4j.nn.conf.GradientNormalization.class,
            names = {"RenormalizeL2PerLayer", "RenormalizeL2PerParamType", "ClipL2PerLayer", "ClipL2PerParamType"})
    void normBasedNormalizationUsesGlobalNorms(org.deeplearning4j.nn.conf.GradientNormalization kind) {
        int workers = 3;
        for (DataType dtype : new DataType[] {DataType.DOUBLE, DataType.FLOAT}) {
            List<DataSet> data = Nets.batches(21, 4 * workers, 8, dtype);
            MultiLayerNetwork net = Nets.mlp("adam+" + kind.name(), dtype, 40, 0.05);
            Run plain = train(net, workers, null, data, 1);
            Run unclipped = train(Nets.mlp("adam", dtype, 40, 0), workers, null, data, 1);
            assertTrue(Nets.maxRelativeDifference(plain.afterFit().getLast(), unclipped.afterFit().getLast()) > 1e-3,
                    kind + " must change training for this test to mean something");
            Run stage3 = train(net, workers, ZeroStage.PARAMETERS, data, 1);
            double tol = dtype == DataType.DOUBLE ? 1e-14 : 1e-6;
            double diff = Nets.maxRelativeDifference(stage3.afterFit().getLast(), plain.afterFit().getLast());
            assertTrue(diff <= tol, kind + " " + dtype + ": max relative difference " + diff + " > " + tol);
        }
    }
}
