package org.symmem4j.dl4j;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;
import org.deeplearning4j.nn.conf.MultiLayerConfiguration;
import org.deeplearning4j.nn.conf.NeuralNetConfiguration;
import org.deeplearning4j.nn.conf.constraint.MaxNormConstraint;
import org.deeplearning4j.nn.conf.inputs.InputType;
import org.deeplearning4j.nn.conf.layers.BatchNormalization;
import org.deeplearning4j.nn.conf.layers.ConvolutionLayer;
import org.deeplearning4j.nn.conf.layers.DenseLayer;
import org.deeplearning4j.nn.conf.layers.OutputLayer;
import org.deeplearning4j.nn.conf.layers.SubsamplingLayer;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.deeplearning4j.nn.weights.WeightInit;
import org.deeplearning4j.optimize.listeners.ScoreIterationListener;
import org.junit.jupiter.api.Test;
import org.nd4j.linalg.activations.Activation;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.dataset.DataSet;
import org.nd4j.linalg.factory.Nd4j;
import org.nd4j.linalg.learning.config.Adam;
import org.nd4j.linalg.lossfunctions.LossFunctions;

/**
 * ZeRO stage 3 beyond the MLP: a CNN bitwise equal to plain data parallelism, what each worker
 * holds (measured with mincore: own blocks and at most two layers at a time), and the clear
 * refusals before any step.
 */
class FullyShardedBehaviourTest {

    static MultiLayerNetwork cnn(DataType dtype) {
        MultiLayerConfiguration conf = new NeuralNetConfiguration.Builder()
                .seed(11).dataType(dtype).updater(new Adam(0.01)).weightInit(WeightInit.XAVIER).l2(1e-3)
                .list()
                .layer(new ConvolutionLayer.Builder(3, 3).nOut(6).activation(Activation.RELU).build())
                .layer(new SubsamplingLayer.Builder(SubsamplingLayer.PoolingType.MAX).kernelSize(2, 2).stride(2, 2).build())
                .layer(new ConvolutionLayer.Builder(2, 2).nOut(8).activation(Activation.TANH).build())
                .layer(new DenseLayer.Builder().nOut(32).activation(Activation.RELU).build())
                .layer(new OutputLayer.Builder(LossFunctions.LossFunction.MCXENT).nOut(3).activation(Activation.SOFTMAX).build())
                .setInputType(InputType.convolutionalFlat(10, 10, 1))
                .build();
        MultiLayerNetwork net = new MultiLayerNetwork(conf);
        net.init();
        return net;
    }

    static List<DataSet> images(long seed, int count, DataType dtype) {
        SplittableRandom rnd = new SplittableRandom(seed);
        List<DataSet> out = new ArrayList<>();
        for (int b = 0; b < count; b++) {
            double[][] x = new double[6][100];
            double[][] y = new double[6][3];
            for (int i = 0; i < 6; i++) {
                for (int j = 0; j < 100; j++) {
                    x[i][j] = rnd.nextDouble();
                }
                y[i][rnd.nextInt(3)] = 1;
            }
            out.add(new DataSet(Nd4j.create(x).castTo(dtype), Nd4j.create(y).castTo(dtype)));
        }
        return out;
    }

    @Test
    void aCnnWithPrepocessorsAndL2EqualsPlainDataParallelismBitwise() {
        for (int workers : new int[] {2, 3}) {
            List<DataSet> data = images(5, 4 * workers + 1, DataType.FLOAT); // the last step leaves workers idle
            MultiLayerNetwork net = cnn(DataType.FLOAT);
            FullyShardedEquivalenceTest.Run plain = FullyShardedEquivalenceTest.train(net, workers, null, data, 1);
            FullyShardedEquivalenceTest.Run stage3 = FullyShardedEquivalenceTest.train(net, workers, ZeroStage.PARAMETERS, data, 1);
            assertEquals(plain.losses(), stage3.losses(), workers + " workers: every step's loss, bitwise (as doubles)");
            assertTrue(ModelReplica.bitwiseEqual(plain.afterFit().getLast(), stage3.afterFit().getLast()), workers
                    + " workers: parameters; max relative difference "
                    + Nets.maxRelativeDifference(stage3.afterFit().getLast(), plain.afterFit().getLast()));
            assertTrue(ModelReplica.bitwiseEqual(plain.updaterState(), stage3.updaterState()), workers + " workers: state");
        }
    }

    @Test
    void eachWorkerHoldsItsBlocksAndAtMostTwoLayersAtATime() {
        int workers = 4;
        // 12x300, five 300x300 layers, 300x3: ~2.2 MB of FLOAT parameters, no layer more than a sixth of them
        NeuralNetConfiguration.ListBuilder list = new NeuralNetConfiguration.Builder()
                .seed(3).dataType(DataType.FLOAT).updater(new Adam(0.01)).weightInit(WeightInit.XAVIER)
                .list()
                .layer(new DenseLayer.Builder().nIn(Nets.IN).nOut(300).activation(Activation.TANH).build());
        for (int i = 0; i < 5; i++) {
            list.layer(new DenseLayer.Builder().nIn(300).nOut(300).activation(Activation.RELU).build());
        }
        MultiLayerConfiguration conf = list.layer(new OutputLayer.Builder(LossFunctions.LossFunction.MCXENT).nIn(300)
                .nOut(Nets.OUT).activation(Activation.SOFTMAX).build()).build();
        MultiLayerNetwork net = new MultiLayerNetwork(conf);
        net.init();
        long full = net.numParams() * 4;
        List<DataSet> data = Nets.batches(9, 3 * workers, 8, DataType.FLOAT);
        try (SymmemParallelWrapper w = SymmemParallelWrapper.builder(net).workers(workers)
                .sharding(ZeroStage.PARAMETERS).build()) {
            w.fit(new BatchListIterator(data.subList(0, workers)));
            w.fullySharded().forEach(FullySharded::measurePeaks);
            w.fit(new BatchListIterator(data.subList(workers, data.size())));
            List<WorkerMemory> memory = w.workerMemory();
            assertEquals(workers, memory.size());
            for (int r = 0; r < workers; r++) {
                FullySharded fs = w.fullySharded().get(r);
                long own = fs.ownBytes();
                long pages = 4096L * 2 * (fs.units().size() + 1); // pages a block shares with the next one, both ends
                assertTrue(own <= full / workers + 4 * 64, "worker " + r + " owns " + own + " of " + full + " bytes");
                WorkerMemory m = memory.get(r);
                System.out.println("stage 3, worker " + r + " of " + workers + ": replica " + full + " B, own blocks " + own
                        + " B, resident after the step: parameters " + m.paramBytes() + " B, gradient " + m.gradientBytes()
                        + " B; peak during the step: parameters " + fs.peakParameterBytes() + " B, gradient "
                        + fs.peakGradientBytes() + " B; updater state " + m.updaterStateBytes() + " B");
                // after a step: the own blocks, nothing else
                assertTrue(m.paramBytes() <= own + pages, "worker " + r + ": " + m.paramBytes() + " parameter bytes"
                        + " resident after the step; own blocks " + own + " + boundary pages " + pages);
                assertTrue(m.gradientBytes() <= own + pages, "worker " + r + ": " + m.gradientBytes() + " gradient bytes");
                assertTrue(m.paramBytes() >= own - pages, "worker " + r + ": its blocks are resident");
                // during the step: at most two layers gathered (the current one and the prefetched one) besides the
                // small output layer, which DL4J needs until it scores the batch; two layers' gradients (the one
                // being reduce-scattered while the next is written)
                long twoUnits = 2 * fs.largestUnitBytes() + 4L * 300 * Nets.OUT + 4 * Nets.OUT;
                assertTrue(fs.peakParameterBytes() <= own + twoUnits + pages, "worker " + r + ": parameter peak "
                        + fs.peakParameterBytes() + " > own " + own + " + two largest layers " + twoUnits + " + " + pages);
                assertTrue(fs.peakParameterBytes() < full * 0.7, "a replica is " + full + " bytes; peak " + fs.peakParameterBytes());
                assertTrue(fs.peakParameterBytes() >= own + fs.largestUnitBytes() * 3 / 4 - pages,
                        "the peak must see a gathered layer for the bound to mean something: " + fs.peakParameterBytes());
                assertTrue(fs.peakGradientBytes() <= own + twoUnits + pages, "worker " + r + ": gradient peak "
                        + fs.peakGradientBytes());
            }
        }
        try (SymmemParallelWrapper w = SymmemParallelWrapper.builder(net).workers(workers).build()) {
            w.fit(new BatchListIterator(data.subList(0, workers)));
            assertEquals(full, w.workerMemory().getFirst().paramBytes(), "plain data parallelism holds the whole replica");
        }
    }

    @Test
    void theLastLayersForwardKeepsTheLayerBelowGatheredForItsBackprop() {
        // 3 units: layer 0 (fed by the input), layer 1, the output layer. Forward gathers all three; backprop needs
        // layer 1 right after the output layer's, so the output's forward keeps it (before: released and gathered again,
        // exposed, 5 gathers a step), and layer 0 once more: 4 gathers, 2 x units - 2; a reduce-scatter per unit
        MultiLayerNetwork net = Nets.mlp(Nets.updater("adam"), DataType.FLOAT);
        List<StepReport> reports = new ArrayList<>();
        List<DataSet> data = Nets.batches(4, 6, 8, DataType.FLOAT);
        try (SymmemParallelWrapper w = SymmemParallelWrapper.builder(net).workers(2).sharding(ZeroStage.PARAMETERS)
                .stepListener(reports::add).build()) {
            w.fit(new BatchListIterator(data));
        }
        assertEquals(3, reports.size());
        for (StepReport r : reports) {
            StepReport.Collectives c = r.collectives();
            assertEquals(4, c.gathers(), "gathers in step " + r.step() + ": " + c);
            assertEquals(3, c.reduceScatters(), "reduce-scatters in step " + r.step() + ": " + c);
            assertTrue(c.exposedGatherNanos() >= 0 && c.exposedReduceScatterNanos() >= 0 && c.gatherNanos() > 0
                    && c.reduceScatterNanos() > 0, c.toString());
            // the worker's own work in the layer hooks (releases, terms) and the communication thread's wake-ups
            assertTrue(c.hookWorkNanos() > 0 && c.hookWorkNanos() <= r.stepNanos() && c.commDelayNanos() >= 0, c.toString());
            // each the slowest worker's: each wait is part of that worker's sync time
            assertTrue(c.exposedGatherNanos() <= r.syncNanos() && c.exposedReduceScatterNanos() <= r.syncNanos(),
                    "the waits are part of the step's sync time: " + c + ", sync " + r.syncNanos());
        }
        try (SymmemParallelWrapper w = SymmemParallelWrapper.builder(net).workers(2).sharding(ZeroStage.GRADIENTS)
                .stepListener(reports::add).build()) {
            w.fit(new BatchListIterator(data));
        }
        assertEquals(StepReport.Collectives.NONE, reports.getLast().collectives(), "no per-layer collectives in stage 2");
    }

    @Test
    void whatStage3CannotDriveIsRefusedBeforeAnyStep() {
        List<DataSet> data = Nets.batches(1, 2, 8, DataType.FLOAT);
        // weight constraints: row-wise, not element-wise
        MultiLayerNetwork constrained = new MultiLayerNetwork(new NeuralNetConfiguration.Builder()
                .seed(1).dataType(DataType.FLOAT).updater(new Adam(0.01)).list()
                .layer(new DenseLayer.Builder().nIn(Nets.IN).nOut(8).constrainWeights(new MaxNormConstraint(1.0, 1)).build())
                .layer(new OutputLayer.Builder(LossFunctions.LossFunction.MCXENT).nIn(8).nOut(Nets.OUT)
                        .activation(Activation.SOFTMAX).build())
                .build());
        constrained.init();
        INDArrayHolder before = new INDArrayHolder(constrained.params().dup());
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> {
            try (SymmemParallelWrapper w = SymmemParallelWrapper.builder(constrained).workers(2)
                    .sharding(ZeroStage.PARAMETERS).build()) {
                w.fit(new BatchListIterator(data));
            }
        });
        assertTrue(e.getMessage().contains("weight constraints") && e.getMessage().contains("l2(...)"), e.getMessage());
        assertTrue(ModelReplica.bitwiseEqual(before.array(), constrained.params()), "nothing trained");

        // DL4J listeners read the whole model at every step
        MultiLayerNetwork listened = Nets.mlp(Nets.updater("adam"), DataType.FLOAT);
        listened.setListeners(new ScoreIterationListener(1));
        IllegalStateException l = assertThrows(IllegalStateException.class, () -> {
            try (SymmemParallelWrapper w = SymmemParallelWrapper.builder(listened).workers(2).sharding(ZeroStage.PARAMETERS).build()) {
                w.fit(new BatchListIterator(data));
            }
        });
        assertTrue(l.getMessage().contains("stepListener"), l.getMessage());
    }

    private record INDArrayHolder(org.nd4j.linalg.api.ndarray.INDArray array) {
    }
}
