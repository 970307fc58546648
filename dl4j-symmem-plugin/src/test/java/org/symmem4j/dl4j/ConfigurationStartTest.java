package org.symmem4j.dl4j;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import org.deeplearning4j.nn.conf.MultiLayerConfiguration;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.dataset.DataSet;

/**
 * ZeRO stage 3 started from a configuration ({@link SymmemParallelWrapper#builder(MultiLayerConfiguration)}): each
 * worker initialises its shard layer by layer, bitwise equal to {@code new MultiLayerNetwork(conf).init()}, trains
 * bitwise as plain data parallelism from that network does, and nothing holds the model whole; the memory plan
 * refuses, before anything is allocated, a stage that does not fit the process's caps.
 */
class ConfigurationStartTest {

    private static MultiLayerConfiguration conf(MultiLayerNetwork net) {
        return net.getLayerWiseConfigurations().clone();
    }

    /** The reference: DL4J's own initialisation of a fresh network of {@code conf}. */
    private static INDArray dl4jInit(MultiLayerConfiguration conf) {
        MultiLayerNetwork net = new MultiLayerNetwork(conf.clone());
        net.init();
        return net.params().dup();
    }

    @ParameterizedTest(name = "{0} {1} workers={2}")
    @CsvSource({"adam, FLOAT, 2", "mixed, FLOAT, 3", "nesterov+l2, DOUBLE, 3", "cnn, FLOAT, 2"})
    void theShardsAreDl4jsInitialisationBitwise(String recipe, DataType dtype, int workers) {
        MultiLayerConfiguration conf = conf(recipe.equals("cnn") ? FullyShardedBehaviourTest.cnn(dtype)
                : Nets.mlp(recipe, dtype, 40, 0));
        INDArray expected = dl4jInit(conf);
        try (SymmemParallelWrapper wrapper = SymmemParallelWrapper.builder(conf).workers(workers)
                .sharding(ZeroStage.PARAMETERS).build()) {
            INDArray gathered = wrapper.gatherParameters();
            assertTrue(ModelReplica.bitwiseEqual(expected, gathered), "initial parameters differ from DL4J's init();"
                    + " max relative difference " + Nets.maxRelativeDifference(gathered, expected));
            // nothing holds the model whole: each worker its blocks (and the pages they share with neighbours)
            for (FullySharded fs : wrapper.fullySharded()) {
                long slack = 2L * 2 * 4096 * fs.units().size();
                assertTrue(fs.residentParameterBytes() <= fs.ownBytes() + slack, "parameters resident "
                        + fs.residentParameterBytes() + " > own blocks " + fs.ownBytes() + " + " + slack);
                assertTrue(fs.residentGradientBytes() <= slack, "gradient resident before any step: "
                        + fs.residentGradientBytes());
            }
        }
        // the comparison can fail: another seed draws other values
        MultiLayerConfiguration other = conf(recipe.equals("cnn") ? FullyShardedBehaviourTest.cnn(dtype)
                : Nets.mlp(recipe, dtype, 40, 0));
        other.getConf(0).setSeed(7);
        for (int i = 0; i < other.getConfs().size(); i++) {
            other.getConf(i).setSeed(7);
        }
        assertFalse(ModelReplica.bitwiseEqual(expected, dl4jInit(other)));
    }

    @ParameterizedTest(name = "{0} workers={1}")
    @CsvSource({"adam, 2", "nesterov+l2, 3"})
    void trainsBitwiseAsPlainDataParallelismFromDl4jsInit(String recipe, int workers) {
        MultiLayerConfiguration conf = conf(Nets.mlp(recipe, DataType.FLOAT, 40, 0));
        int fits = 2;
        List<DataSet> data = Nets.batches(31, fits * 3 * workers, 8, DataType.FLOAT);
        MultiLayerNetwork initialised = new MultiLayerNetwork(conf.clone());
        initialised.init();
        FullyShardedEquivalenceTest.Run plain = FullyShardedEquivalenceTest.train(initialised, workers, null, data, fits);

        List<Double> losses = new ArrayList<>();
        List<INDArray> afterFit = new ArrayList<>();
        int per = data.size() / fits;
        try (SymmemParallelWrapper wrapper = SymmemParallelWrapper.builder(conf).workers(workers)
                .sharding(ZeroStage.PARAMETERS).stepListener(r -> losses.add(r.loss())).build()) {
            for (int f = 0; f < fits; f++) {
                wrapper.fit(new BatchListIterator(data.subList(f * per, (f + 1) * per)));
                afterFit.add(wrapper.gatherParameters());
                for (WorkerMemory m : wrapper.workerMemory()) {
                    long slack = 2L * 2 * 4096 * 3;
                    long own = wrapper.fullySharded().get(m.worker()).ownBytes();
                    assertTrue(m.paramBytes() <= own + slack && m.gradientBytes() <= own + slack, "worker " + m.worker()
                            + " holds " + m + " after a fit; its blocks are " + own + " bytes");
                }
            }
        }
        assertEquals(plain.losses().size(), losses.size());
        for (int s = 0; s < losses.size(); s++) {
            assertEquals(Double.doubleToRawLongBits(plain.losses().get(s)), Double.doubleToRawLongBits(losses.get(s)),
                    "step " + s + " loss: plain " + plain.losses().get(s) + ", stage 3 from the configuration " + losses.get(s));
        }
        for (int f = 0; f < fits; f++) {
            assertTrue(ModelReplica.bitwiseEqual(plain.afterFit().get(f), afterFit.get(f)), "parameters after fit " + f
                    + "; max relative difference " + Nets.maxRelativeDifference(afterFit.get(f), plain.afterFit().get(f)));
        }
    }

    @Test
    void thePlanRefusesAStageThatDoesNotFitBeforeAnythingIsAllocated() {
        MultiLayerConfiguration conf = conf(Nets.mlp("adam", DataType.FLOAT, 400, 0));
        long params = ConfigurationStart.parameterCount(conf);
        assertEquals(new MultiLayerNetwork(conf.clone()) {{ init(); }}.numParams(), params);
        int workers = 4;
        ModelStatePlan plain = ModelStatePlan.of(conf, null, workers, 1, true);
        ModelStatePlan stage3 = ModelStatePlan.of(conf, ZeroStage.PARAMETERS, workers, 1, true);
        // plain: the model (params, gradient, Adam's 2 states) and the replica (params, state; gradient symmetric)
        assertEquals(4 * (4 * params + 3 * params), plain.nd4jBytes());
        assertEquals(4 * params, plain.symmetricBytes());
        assertTrue(stage3.nd4jBytes() < plain.nd4jBytes() / 4, stage3 + " vs " + plain);
        // a cap between the two: plain refused with the fix, stage 3 fits
        ConfigurationStart.Caps caps = new ConfigurationStart.Caps(plain.nd4jBytes() / 2, "test cap",
                Long.MAX_VALUE, "unset");
        IllegalStateException e = assertThrows(IllegalStateException.class, () -> plain.check(caps, stage3));
        assertTrue(e.getMessage().contains("plain data parallelism does not fit") && e.getMessage().contains("expected")
                && e.getMessage().contains("found") && e.getMessage().contains("fix: sharding(ZeroStage.PARAMETERS)"),
                e.getMessage());
        stage3.check(caps, null);
        // hybrid sharding, 2 replicas of 2: each worker keeps 1/2 (more than stage 3's 1/4), and a refusal says so
        ModelStatePlan hybrid = ModelStatePlan.of(conf, ZeroStage.PARAMETERS, workers, 2, 1, true);
        ModelStatePlan half = ModelStatePlan.of(conf, ZeroStage.PARAMETERS, 2, 1, true);
        assertEquals(half.nd4jBytes(), hybrid.nd4jBytes(), hybrid + " vs stage 3 on 2: " + half);
        assertEquals(half.symmetricBytes(), hybrid.symmetricBytes());
        assertTrue(hybrid.nd4jBytes() > stage3.nd4jBytes(), hybrid + " vs " + stage3);
        ConfigurationStart.Caps between = new ConfigurationStart.Caps(stage3.nd4jBytes(), "test cap", Long.MAX_VALUE,
                "unset");
        stage3.check(between, null);
        String h = assertThrows(IllegalStateException.class, () -> hybrid.check(between, null)).getMessage();
        assertTrue(h.contains("shardGroupSize=2 of workers=4") && h.contains("keeps 1/2 of the model state")
                && h.contains("fix: a larger shardGroupSize (up to workers=4, where each worker keeps 1/4)"), h);
        // the symmetric cap: the builder reads it from the system property, before anything is allocated
        System.setProperty(ConfigurationStart.Caps.SYMMETRIC_PROPERTY, "64k");
        try {
            IllegalStateException s = assertThrows(IllegalStateException.class, () -> SymmemParallelWrapper.builder(conf)
                    .workers(2).sharding(ZeroStage.PARAMETERS).build());
            assertTrue(s.getMessage().contains("symmetric-memory cap") && s.getMessage().contains("65536"), s.getMessage());
            System.setProperty(ConfigurationStart.Caps.SYMMETRIC_PROPERTY, "lots");
            assertThrows(IllegalArgumentException.class, () -> SymmemParallelWrapper.builder(conf).workers(2)
                    .sharding(ZeroStage.PARAMETERS).build());
        } finally {
            System.clearProperty(ConfigurationStart.Caps.SYMMETRIC_PROPERTY);
        }
    }
}
