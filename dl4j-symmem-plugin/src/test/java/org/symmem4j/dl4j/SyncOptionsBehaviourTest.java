package org.symmem4j.dl4j;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicInteger;
import org.deeplearning4j.nn.conf.MultiLayerConfiguration;
import org.deeplearning4j.nn.conf.NeuralNetConfiguration;
import org.deeplearning4j.nn.conf.layers.BatchNormalization;
import org.deeplearning4j.nn.conf.layers.DenseLayer;
import org.deeplearning4j.nn.conf.layers.OutputLayer;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.junit.jupiter.api.Test;
import org.nd4j.linalg.activations.Activation;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.dataset.DataSet;
import org.nd4j.linalg.factory.Nd4j;
import org.nd4j.linalg.learning.config.Sgd;
import org.nd4j.linalg.lossfunctions.LossFunctions;

/** ND4J's thread limit during fit, reading the next step's batches while workers compute, and refused combinations. */
class SyncOptionsBehaviourTest {

    @Test
    void nd4jRunsWithEachWorkersShareOfThreadsDuringFitAndAsBeforeAfterwards() {
        int masterBefore = Nd4j.getEnvironment().maxMasterThreads();
        int blasBefore = Nd4j.factory().blas().getMaxThreads();
        assumeTrue(masterBefore > 1, "needs ND4J with more than one thread to see a limit (maxMasterThreads=" + masterBefore + ")");
        List<int[]> during = new ArrayList<>();
        MultiLayerNetwork net = Nets.mlp(Nets.updater("sgd"), DataType.FLOAT);
        try (SymmemParallelWrapper w = SymmemParallelWrapper.builder(net).workers(2).ompThreadsPerWorker(1)
                .stepListener(r -> during.add(new int[] {Nd4j.getEnvironment().maxMasterThreads(),
                        Nd4j.factory().blas().getMaxThreads()})).build()) {
            w.fit(new BatchListIterator(Nets.batches(1, 4, 4, DataType.FLOAT)));
        }
        assertEquals(2, during.size());
        for (int[] t : during) {
            assertEquals(1, t[0], "libnd4j's op threads (maxMasterThreads) during fit");
            assertEquals(1, t[1], "BLAS threads during fit");
        }
        assertEquals(masterBefore, Nd4j.getEnvironment().maxMasterThreads(), "restored after fit");
        assertEquals(blasBefore, Nd4j.factory().blas().getMaxThreads(), "restored after fit");
    }

    @Test
    void theNextStepsBatchesAreReadWhileTheWorkersComputeThisOne() {
        int workers = 2;
        int steps = 4;
        AtomicInteger finishedSteps = new AtomicInteger();
        List<Integer> finishedWhenRead = new ArrayList<>();
        List<DataSet> data = Nets.batches(2, steps * workers, 4, DataType.FLOAT);
        BatchListIterator counting = new BatchListIterator(data, () -> finishedWhenRead.add(finishedSteps.get()));
        try (SymmemParallelWrapper w = SymmemParallelWrapper.builder(Nets.mlp(Nets.updater("sgd"), DataType.FLOAT))
                .workers(workers).stepListener(r -> finishedSteps.incrementAndGet()).build()) {
            w.fit(counting);
        }
        // step 0's batches before anything ran; step s's (s >= 1) while step s-1 ran, before it finished
        List<Integer> expected = new ArrayList<>();
        for (int j = 0; j < steps * workers; j++) {
            expected.add(Math.max(0, j / workers - 1));
        }
        assertEquals(expected, finishedWhenRead, "steps finished when each batch was read");
    }

    @Test
    void combinationsThatCannotWorkAreRefusedWithTheFix() {
        MultiLayerNetwork net = Nets.mlp(Nets.updater("sgd"), DataType.FLOAT);
        String sharded = assertThrows(IllegalArgumentException.class, () -> SymmemParallelWrapper.builder(net).workers(2)
                .sharding(ZeroStage.GRADIENTS).overlapSyncWithBackprop(true).build()).getMessage();
        assertTrue(sharded.contains("overlapSyncWithBackprop=true") && sharded.contains("fix:"), sharded);
        String bf16 = assertThrows(IllegalArgumentException.class, () -> SymmemParallelWrapper.builder(
                Nets.mlp(Nets.updater("sgd"), DataType.DOUBLE)).gradientTransfer(GradientTransfer.BFLOAT16).build()).getMessage();
        assertTrue(bf16.contains("expected a FLOAT network, found dataType=DOUBLE"), bf16);
        assertTrue(assertThrows(IllegalArgumentException.class, () -> SymmemParallelWrapper.builder(net)
                .gradientAccumulation(0)).getMessage().contains("gradientAccumulation=0 must be >= 1"));
        MultiLayerConfiguration conf = new NeuralNetConfiguration.Builder().seed(1).updater(new Sgd(0.1)).list()
                .layer(new DenseLayer.Builder().nIn(Nets.IN).nOut(8).build())
                .layer(new BatchNormalization.Builder().nOut(8).build())
                .layer(new OutputLayer.Builder(LossFunctions.LossFunction.MCXENT).nIn(8).nOut(Nets.OUT)
                        .activation(Activation.SOFTMAX).build())
                .build();
        MultiLayerNetwork withBatchNorm = new MultiLayerNetwork(conf);
        withBatchNorm.init();
        String bn = assertThrows(IllegalArgumentException.class, () -> SymmemParallelWrapper.builder(withBatchNorm)
                .gradientAccumulation(2).build()).getMessage();
        assertTrue(bn.contains("gradientAccumulation=2") && bn.contains("1.mean") && bn.contains("fix:"), bn);
        // center-loss centers too: DL4J's updater divides them by the batch size like gradients, but they are state
        // updates the wrapper merges on its own (StateUpdateReduction), which summing over micro-batches would break
        String centers = assertThrows(IllegalArgumentException.class, () -> SymmemParallelWrapper.builder(
                StateNets.centerLossMlp(DataType.FLOAT, false)).gradientAccumulation(2).build()).getMessage();
        assertTrue(centers.contains("gradientAccumulation=2") && centers.contains(".cL") && centers.contains("fix:"), centers);
        // without accumulation the same network builds
        SymmemParallelWrapper.builder(withBatchNorm).workers(2).build().close();
    }
}
