package org.symmem4j.dl4j.pipeline;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.function.IntUnaryOperator;
import java.util.function.LongUnaryOperator;
import org.deeplearning4j.nn.conf.NeuralNetConfiguration;
import org.deeplearning4j.nn.conf.dropout.IDropout;
import org.deeplearning4j.nn.conf.layers.Layer;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.deeplearning4j.nn.workspace.LayerWorkspaceMgr;
import org.junit.jupiter.api.Test;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.dataset.DataSet;
import org.nd4j.linalg.factory.Nd4j;
import org.nd4j.linalg.learning.config.Sgd;
import org.symmem4j.dl4j.Nets;

/**
 * Dropout in the pipeline, defined per microbatch ({@link MicrobatchDropout}): layer l's mask for
 * microbatch k at iteration t is what the layer's own dropout draws for that microbatch's activations
 * with ND4J's generator seeded {@code seed(layer seed, l, t, k)}. Checked against plain DL4J passes per
 * microbatch that draw those masks ({@link MicrobatchReference} with a test dropout that seeds the
 * generator and lets DL4J's dropout draw), for dropout on dense layers, a {@code DropoutLayer} and
 * Gaussian noise on the output layer, under three schedules; and the check tells apart masks shared
 * between microbatches or between iterations.
 */
class PipelineDropoutTest {

    static final double LEARNING_RATE = 0.1;
    static final int MICROBATCHES = 4;
    static final double TOLERANCE = 1e-11;

    @Test
    void eachMicrobatchDrawsItsOwnMaskAsDefined() {
        MultiLayerNetwork base = PipelineModels.denseDropout(new Sgd(LEARNING_RATE));
        List<DataSet> batches = PipelineModels.batches(PipelineModels.Data.DENSE, 4, 3, 16);
        List<INDArray> results = new ArrayList<>();
        for (PipelineParallelTrainerBuilder builder : List.of(
                PipelineParallelTrainer.builder(base.clone()).ranks(3).microbatches(MICROBATCHES).stageBoundaries(1, 3),
                PipelineParallelTrainer.builder(base.clone()).ranks(2).microbatches(MICROBATCHES).schedule(PipelineSchedule.GPIPE),
                PipelineParallelTrainer.builder(base.clone()).ranks(2).microbatches(MICROBATCHES)
                        .schedule(PipelineSchedule.INTERLEAVED, 2))) {
            MultiLayerNetwork trained = base.clone();
            try (PipelineParallelTrainer trainer = builder.build()) {
                for (DataSet batch : batches) {
                    trainer.fit(batch);
                }
                trainer.copyParametersTo(trained);
            }
            results.add(trained.params().dup());
        }
        // masks depend on the layer, iteration and microbatch only: schedule and split change no bit
        assertTrue(PipelineNets.bitwiseEqual(results.get(0), results.get(1)), "1F1B vs GPipe");
        assertTrue(PipelineNets.bitwiseEqual(results.get(0), results.get(2)), "1F1B vs interleaved");

        MultiLayerNetwork reference = referenceAfter(base, batches, k -> k, t -> t);
        double diff = Nets.maxRelativeDifference(results.getFirst(), reference.params());
        assertTrue(diff <= TOLERANCE, "pipeline vs plain DL4J passes per microbatch with the defined masks: " + diff);

        // the check can fail: one mask shared by all microbatches, or the same masks every iteration, land elsewhere
        double shared = Nets.maxRelativeDifference(results.getFirst(), referenceAfter(base, batches, k -> 0, t -> t).params());
        double repeated = Nets.maxRelativeDifference(results.getFirst(), referenceAfter(base, batches, k -> k, t -> 0).params());
        System.out.printf("dropout: vs definition %.3g, vs one mask for all microbatches %.3g, vs masks repeated every"
                + " iteration %.3g%n", diff, shared, repeated);
        assertTrue(shared > 1e4 * TOLERANCE && repeated > 1e4 * TOLERANCE, "shared " + shared + " repeated " + repeated);
    }

    /** The trainer replaces dropout only in its stage copies: the user's network keeps its own. */
    @Test
    void theUsersNetworkKeepsItsDropout() {
        MultiLayerNetwork base = PipelineModels.denseDropout(new Sgd(LEARNING_RATE));
        try (PipelineParallelTrainer trainer = PipelineParallelTrainer.builder(base.clone()).ranks(2).microbatches(2).build()) {
            trainer.fit(PipelineModels.batches(PipelineModels.Data.DENSE, 4, 1, 8).getFirst());
            for (int i = 0; i < base.getnLayers(); i++) {
                IDropout d = base.getLayerWiseConfigurations().getConf(i).getLayer().getIDropout();
                assertTrue(!(d instanceof MicrobatchDropout), "layer " + i + ": " + d);
            }
            MultiLayerNetwork stage0 = trainer.split().buildStageNetworks().getFirst();
            assertEquals(MicrobatchDropout.class, stage0.getLayerWiseConfigurations().getConf(0).getLayer().getIDropout()
                    .getClass());
        }
    }

    /**
     * Plain DL4J per microbatch with every dropout seeded as defined, with the microbatch and
     * iteration that seed the masks remapped (identity: the definition).
     */
    private static MultiLayerNetwork referenceAfter(MultiLayerNetwork base, List<DataSet> batches,
                                                    IntUnaryOperator seedMicrobatch, LongUnaryOperator seedIteration) {
        MultiLayerNetwork reference = base.clone();
        int[] current = {0};
        for (int i = 0; i < reference.getnLayers(); i++) {
            NeuralNetConfiguration conf = reference.getLayerWiseConfigurations().getConf(i);
            Layer layer = conf.getLayer();
            if (layer.getIDropout() != null) {
                layer.setIDropout(new SeededDropout(layer.getIDropout(), conf.getSeed(), i, current,
                        seedMicrobatch, seedIteration));
            }
        }
        for (DataSet batch : batches) {
            MicrobatchReference.sgdStep(reference, batch, MICROBATCHES, LEARNING_RATE, k -> current[0] = k);
        }
        return reference;
    }

    /** DL4J's dropout, drawing from the calling thread's generator seeded as the definition says. */
    private static final class SeededDropout implements IDropout {
        private final IDropout inner;
        private final long seed;
        private final int layer;
        private final int[] microbatch;
        private final IntUnaryOperator seedMicrobatch;
        private final LongUnaryOperator seedIteration;

        SeededDropout(IDropout inner, long seed, int layer, int[] microbatch, IntUnaryOperator seedMicrobatch,
                      LongUnaryOperator seedIteration) {
            this.inner = inner;
            this.seed = seed;
            this.layer = layer;
            this.microbatch = microbatch;
            this.seedMicrobatch = seedMicrobatch;
            this.seedIteration = seedIteration;
        }

        @Override
        public INDArray applyDropout(INDArray in, INDArray out, int iteration, int epoch, LayerWorkspaceMgr mgr) {
            Nd4j.getRandom().setSeed(MicrobatchDropout.seed(seed, layer, seedIteration.applyAsLong(iteration),
                    seedMicrobatch.applyAsInt(microbatch[0])));
            return inner.applyDropout(in, out, iteration, epoch, mgr);
        }

        @Override
        public INDArray backprop(INDArray gradAtOutput, INDArray gradAtInput, int iteration, int epoch) {
            return inner.backprop(gradAtOutput, gradAtInput, iteration, epoch);
        }

        @Override
        public void clear() {
            inner.clear();
        }

        @Override
        public IDropout clone() {
            return new SeededDropout(inner.clone(), seed, layer, microbatch, seedMicrobatch, seedIteration);
        }
    }
}
