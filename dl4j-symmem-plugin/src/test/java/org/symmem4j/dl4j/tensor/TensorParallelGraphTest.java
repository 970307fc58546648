package org.symmem4j.dl4j.tensor;

import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import org.deeplearning4j.nn.conf.ComputationGraphConfiguration;
import org.deeplearning4j.nn.conf.NeuralNetConfiguration;
import org.deeplearning4j.nn.conf.graph.MergeVertex;
import org.deeplearning4j.nn.conf.layers.DenseLayer;
import org.deeplearning4j.nn.conf.layers.OutputLayer;
import org.deeplearning4j.nn.graph.ComputationGraph;
import org.deeplearning4j.nn.weights.WeightInit;
import org.junit.jupiter.api.Test;
import org.nd4j.linalg.activations.Activation;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.dataset.DataSet;
import org.nd4j.linalg.learning.config.Adam;
import org.nd4j.linalg.lossfunctions.LossFunctions;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.group.InJvmWorld;

/**
 * A tensor-parallel block inside a {@link ComputationGraph} with a branch beside it (a skip path
 * merged before the output): sharded on 2 ranks it trains as the unsharded graph (fp64, to rounding),
 * and vertices that cannot form a block are refused, named.
 */
class TensorParallelGraphTest {

    static ComputationGraph graph() {
        ComputationGraphConfiguration conf = new NeuralNetConfiguration.Builder().seed(11).dataType(DataType.DOUBLE)
                .updater(new Adam(0.01)).weightInit(WeightInit.XAVIER).graphBuilder()
                .addInputs("in")
                .addLayer("up", new DenseLayer.Builder().nIn(12).nOut(16).activation(Activation.TANH).build(), "in")
                .addLayer("down", new DenseLayer.Builder().nIn(16).nOut(12).activation(Activation.TANH).build(), "up")
                .addLayer("skip", new DenseLayer.Builder().nIn(12).nOut(6).activation(Activation.RELU).build(), "in")
                .addVertex("merge", new MergeVertex(), "down", "skip")
                .addLayer("out", new OutputLayer.Builder(LossFunctions.LossFunction.MCXENT).nIn(18).nOut(4)
                        .activation(Activation.SOFTMAX).build(), "merge")
                .setOutputs("out").build();
        ComputationGraph g = new ComputationGraph(conf);
        g.init();
        return g;
    }

    @Test
    void aBlockInAGraphTrainsAsTheUnshardedGraph() {
        ComputationGraph initial = graph();
        List<DataSet> data = TensorParallelTest.batches(DataType.DOUBLE, 10, 16);
        ComputationGraph plain = initial.clone();
        List<INDArray> reference = new ArrayList<>();
        for (DataSet batch : data) {
            plain.fit(batch);
            reference.add(plain.params().dup());
        }
        List<Double> worst = InJvmWorld.runOnEveryRank(2, GroupOptions.defaults().withTimeout(Duration.ofSeconds(60)), group -> {
            ComputationGraph mine = TensorParallel.shard(initial, group.rank(), 2, "up");
            ComputationGraph gathered = initial.clone();
            double w = 0;
            try (Communicator c = Communicator.create(group)) {
                TensorParallel.attach(mine, c);
                for (int s = 0; s < data.size(); s++) {
                    mine.fit(data.get(s));
                    TensorParallel.gather(mine, c, gathered);
                    w = Math.max(w, TensorParallelTest.maxRelDiff(gathered.params(), reference.get(s)));
                }
            }
            return w;
        });
        worst.forEach(w -> assertTrue(w <= 1e-10, "gathered graph differs from plain fit by " + w));
    }

    /**
     * As TensorParallelTest's updater-state test, for a graph: sharded after 4 plain steps, trained 3 sharded, gathered
     * (Adam's moments cut and joined by vertex name) and trained 2 more unsharded, it follows plain training.
     */
    @Test
    void shardingMidTrainingAndGatheringCarryTheUpdaterState() {
        List<DataSet> data = TensorParallelTest.batches(DataType.DOUBLE, 9, 16);
        ComputationGraph plain = graph();
        for (int s = 0; s < 4; s++) {
            plain.fit(data.get(s));
        }
        ComputationGraph mid = plain.clone();
        // DL4J 1.0.0-M2.1's ComputationGraph.clone() starts the copy's iteration count at 0 (Adam's bias correction
        // reads it): give the copy the original's, as a checkpoint would
        mid.getConfiguration().setIterationCount(plain.getIterationCount());
        for (int s = 4; s < 7; s++) {
            plain.fit(data.get(s));
        }
        INDArray stateAt7 = plain.getUpdater().getStateViewArray().dup();
        for (int s = 7; s < 9; s++) {
            plain.fit(data.get(s));
        }
        INDArray expected = plain.params().dup();
        List<double[]> results = InJvmWorld.runOnEveryRank(2, GroupOptions.defaults().withTimeout(Duration.ofSeconds(60)), group -> {
            ComputationGraph mine = TensorParallel.shard(mid, group.rank(), 2, "up");
            ComputationGraph gathered = graph();
            try (Communicator c = Communicator.create(group)) {
                TensorParallel.attach(mine, c);
                for (int s = 4; s < 7; s++) {
                    mine.fit(data.get(s));
                }
                TensorParallel.gather(mine, c, gathered);
            }
            double state = TensorParallelTest.maxRelDiff(gathered.getUpdater().getStateViewArray(), stateAt7);
            for (int s = 7; s < 9; s++) {
                gathered.fit(data.get(s));
            }
            return new double[] {state, TensorParallelTest.maxRelDiff(gathered.params(), expected)};
        });
        for (int r = 0; r < 2; r++) {
            assertTrue(results.get(r)[0] <= 1e-10, "rank " + r + ": gathered Adam state differs by " + results.get(r)[0]);
            assertTrue(results.get(r)[1] <= 1e-10, "rank " + r + ": resumed unsharded graph differs by " + results.get(r)[1]);
        }
    }

    @Test
    void verticesThatCannotFormABlockAreRefused() {
        ComputationGraph g = graph();
        IllegalArgumentException branch = assertThrows(IllegalArgumentException.class, () -> TensorParallel.shard(g, 0, 2, "skip"));
        assertTrue(branch.getMessage().contains("vertex 'skip' feeds [merge]: a tensor-parallel block is a dense layer consumed"
                + " by exactly one dense layer that takes only it"), branch.getMessage());
        IllegalArgumentException merge = assertThrows(IllegalArgumentException.class, () -> TensorParallel.shard(g, 0, 2, "merge"));
        assertTrue(merge.getMessage().contains("vertex 'merge' is a MergeVertex"), merge.getMessage());
        IllegalArgumentException missing = assertThrows(IllegalArgumentException.class, () -> TensorParallel.shard(g, 0, 2, "nope"));
        assertTrue(missing.getMessage().contains("vertex 'nope' is not in the graph"), missing.getMessage());
    }
}
