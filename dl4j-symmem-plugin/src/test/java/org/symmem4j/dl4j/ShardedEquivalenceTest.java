package org.symmem4j.dl4j;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.stream.Stream;
import org.deeplearning4j.nn.api.Model;
import org.deeplearning4j.nn.graph.ComputationGraph;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.dataset.DataSet;

/**
 * Sharded training (ZeRO stages 1 and 2) against plain data parallelism on the same model, data
 * and worker count: parameters after every step and the final updater state (gathered from the
 * shards into the model) are bitwise equal, for SGD, Nesterov momentum, Adam, Adam with decoupled
 * weight decay, L2, and three updater blocks with different state sizes; replicas stay bitwise
 * identical after every step's all-gather.
 */
class ShardedEquivalenceTest {

    /**
     * The stages whose replicas hold whole parameters, which {@link #train} compares after every step;
     * stage 3 ({@link ZeroStage#PARAMETERS}) is compared in {@link FullyShardedEquivalenceTest}.
     */
    static final ZeroStage[] REPLICATING_STAGES = {ZeroStage.OPTIMIZER_STATE, ZeroStage.GRADIENTS};

    /** Replica 0's parameters after each step, and the model's parameters and updater state after the fit. */
    record Run(List<INDArray> perStep, INDArray params, INDArray updaterState, int iterations) {
    }

    /** Trains a copy of {@code original}; checks after each step that all replicas' parameters are bitwise equal. */
    static Run train(Model original, int workers, ZeroStage stage, List<DataSet> data) {
        ModelReplica model = ModelReplica.of(original instanceof MultiLayerNetwork m ? m.clone() : ((ComputationGraph) original).clone());
        SymmemParallelWrapper.Builder builder = model instanceof ModelReplica.Mln mln
                ? SymmemParallelWrapper.builder(mln.net()) : SymmemParallelWrapper.builder(((ModelReplica.Graph) model).net());
        builder.workers(workers);
        if (stage != null) {
            builder.sharding(stage);
        }
        SymmemParallelWrapper[] holder = new SymmemParallelWrapper[1];
        List<INDArray> perStep = new ArrayList<>();
        builder.stepListener(report -> {
            List<ModelReplica> replicas = holder[0].replicas();
            for (int r = 1; r < replicas.size(); r++) {
                assertTrue(ModelReplica.bitwiseEqual(replicas.getFirst().params(), replicas.get(r).params()),
                        "replica " + r + " differs bitwise from replica 0 after step " + report.step() + " (stage " + stage + ")");
            }
            perStep.add(replicas.getFirst().params().dup());
        });
        try (SymmemParallelWrapper wrapper = builder.build()) {
            holder[0] = wrapper;
            wrapper.fit(new BatchListIterator(data));
            if (stage != null) {
                for (ModelReplica r : wrapper.replicas()) {
                    // the replica's DL4J optimizer runs the sharded updater, never a full-size DL4J one
                    Object u = r instanceof ModelReplica.Mln m ? m.net().getUpdater(false) : ((ModelReplica.Graph) r).net().getUpdater(false);
                    assertTrue(u instanceof ShardedUpdater.ForMultiLayer || u instanceof ShardedUpdater.ForGraph, String.valueOf(u));
                }
            }
        }
        INDArray state = model.updaterState();
        return new Run(perStep, model.params().dup(), state == null ? null : state.dup(), model.iterationCount());
    }

    static Stream<Arguments> cases() {
        List<Arguments> out = new ArrayList<>();
        for (int workers : new int[] {2, 4}) {
            for (String recipe : new String[] {"sgd", "nesterov", "adam", "adamw", "nesterov+l2", "mixed"}) {
                for (DataType dtype : new DataType[] {DataType.DOUBLE, DataType.FLOAT}) {
                    out.add(Arguments.of(workers, recipe, dtype));
                }
            }
        }
        return out.stream();
    }

    @ParameterizedTest(name = "workers={0} {1} {2}")
    @MethodSource("cases")
    void bothStagesEqualPlainDataParallelismBitwise(int workers, String recipe, DataType dtype) {
        int steps = 5;
        List<DataSet> data = Nets.batches(77, steps * workers, 8, dtype);
        MultiLayerNetwork net = Nets.mlp(recipe, dtype, Nets.HIDDEN, 0);
        Run plain = train(net, workers, null, data);
        assertEquals(steps, plain.perStep().size());
        for (ZeroStage stage : REPLICATING_STAGES) {
            Run sharded = train(net, workers, stage, data);
            for (int s = 0; s < steps; s++) {
                assertTrue(ModelReplica.bitwiseEqual(plain.perStep().get(s), sharded.perStep().get(s)),
                        stage + " step " + s + ": parameters differ from plain data parallelism; max relative difference "
                                + Nets.maxRelativeDifference(sharded.perStep().get(s), plain.perStep().get(s)));
            }
            assertTrue(ModelReplica.bitwiseEqual(plain.params(), sharded.params()), stage + ": model parameters");
            assertTrue(ModelReplica.bitwiseEqual(plain.updaterState(), sharded.updaterState()),
                    stage + ": updater state gathered from the shards differs from plain data parallelism's");
            assertEquals(plain.iterations(), sharded.iterations());
        }
        // the comparison can fail: a run that loses one step's update lands elsewhere
        Run shorter = train(net, workers, ZeroStage.GRADIENTS, data.subList(0, (steps - 1) * workers));
        assertTrue(!ModelReplica.bitwiseEqual(plain.params(), shorter.params()));
        if (!recipe.equals("sgd")) {
            assertTrue(plain.updaterState() != null && plain.updaterState().amaxNumber().doubleValue() > 0,
                    "the updater state must be non-trivial for the state comparison to mean something");
        }
    }

    @Test
    void computationGraphShardsToo() {
        int workers = 3;
        List<DataSet> data = Nets.batches(9, 4 * workers, 6, DataType.DOUBLE);
        ComputationGraph graph = Nets.graph(Nets.updater("adam"), DataType.DOUBLE);
        Run plain = train(graph, workers, null, data);
        for (ZeroStage stage : REPLICATING_STAGES) {
            Run sharded = train(graph, workers, stage, data);
            for (int s = 0; s < plain.perStep().size(); s++) {
                assertTrue(ModelReplica.bitwiseEqual(plain.perStep().get(s), sharded.perStep().get(s)), stage + " step " + s);
            }
            assertTrue(ModelReplica.bitwiseEqual(plain.updaterState(), sharded.updaterState()), stage + " updater state");
        }
    }

    @Test
    void eachWorkerKeepsOnlyItsShardOfTheUpdaterState() {
        int workers = 4;
        // 43,403 parameters: large enough that 64-byte shard alignment costs well under 1 %
        for (String recipe : new String[] {"adam", "mixed"}) {
            MultiLayerNetwork net = Nets.mlp(recipe, DataType.FLOAT, 200, 0);
            List<DataSet> data = Nets.batches(3, workers, 8, DataType.FLOAT);
            List<WorkerMemory> plain;
            try (SymmemParallelWrapper w = SymmemParallelWrapper.builder(net.clone()).workers(workers).build()) {
                w.fit(new BatchListIterator(data));
                plain = w.workerMemory();
            }
            List<WorkerMemory> sharded;
            try (SymmemParallelWrapper w = SymmemParallelWrapper.builder(net.clone()).workers(workers)
                    .sharding(ZeroStage.OPTIMIZER_STATE).build()) {
                w.fit(new BatchListIterator(data));
                sharded = w.workerMemory();
            }
            long full = plain.getFirst().updaterStateBytes();
            UpdaterLayout layout = UpdaterLayout.of(ModelReplica.of(net).dl4jUpdater(), net.numParams());
            assertEquals(layout.stateCount() * 4, full, "plain data parallelism keeps DL4J's whole state on every worker");
            long sum = 0;
            long next = 0;
            for (WorkerMemory m : sharded) {
                assertEquals(next, m.shardStart(), "shards tile the parameter vector");
                next = m.shardEnd();
                sum += m.updaterStateBytes();
                assertEquals(plain.getFirst().gradientBytes(), m.gradientBytes(), "DL4J's gradient view stays whole");
                if (recipe.equals("adam")) {
                    // one updater everywhere: state follows parameters, so 1/N of it plus alignment
                    assertTrue(m.updaterStateBytes() <= full / workers * 1.01, recipe + " worker " + m.worker() + " keeps "
                            + m.updaterStateBytes() + " bytes of state; 1/N of " + full + " + 1 % is " + full / workers * 1.01);
                }
            }
            assertEquals(net.numParams(), next);
            assertEquals(full, sum, recipe + ": the shards hold exactly the whole state between them");
        }
    }
}
