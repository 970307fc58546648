package org.symmem4j.dl4j;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.deeplearning4j.nn.api.Model;
import org.deeplearning4j.nn.graph.ComputationGraph;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.junit.jupiter.api.Test;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.dataset.DataSet;

/**
 * What overlap relies on: a replica built with backprop signals reports its layers from the output
 * down, and when a layer reports, its part of the gradient view already holds its final value
 * (nothing later in backprop writes it again).
 */
class BackpropSignalTest {

    @Test
    void layersReportFromTheTopDownWithTheirGradientAlreadyFinal() {
        DataSet batch = Nets.batches(3, 1, 9, DataType.FLOAT).getFirst();
        // MLP: layer 0 reads the caller's input and gets no signal (the hook covers it)
        check(Nets.mlp(Nets.updater("adam"), DataType.FLOAT), batch, List.of("2", "1"));
        // CNN: DL4J's own preprocessors on layers 0 and 1 are wrapped, so layer 0 reports too
        check(SyncOptionsEquivalenceTest.cnn(), batch, List.of("2", "1", "0"));
        // graph: the vertex fed by the network input gets no signal
        check(Nets.graph(Nets.updater("adam"), DataType.FLOAT), batch, List.of("out"));
    }

    private static float[] slice(ModelReplica replica, ModelReplica.LayerSlice s) {
        return ModelReplica.segmentOf(replica.gradientView()).asSlice(4 * s.start(), 4 * (s.end() - s.start()))
                .toArray(java.lang.foreign.ValueLayout.JAVA_FLOAT);
    }

    private static void check(Model model, DataSet batch, List<String> expectedOrder) {
        ModelReplica user = ModelReplica.of(model);
        BackpropProgress progress = new BackpropProgress();
        ModelReplica replica = user.newReplicaWithBackpropSignals(progress);
        Map<String, ModelReplica.LayerSlice> slices = new HashMap<>();
        replica.layerSlices().forEach(s -> slices.put(s.key(), s));
        List<String> order = new ArrayList<>();
        Map<String, float[]> atSignal = new HashMap<>();
        progress.listen(key -> {
            order.add(key);
            ModelReplica.LayerSlice s = slices.get(key);
            atSignal.put(key, slice(replica, s));
        });
        // twice: the second pass overwrites the first's gradient, so a stale view would show
        for (int pass = 0; pass < 2; pass++) {
            order.clear();
            DataSet b = pass == 0 ? batch : Nets.batches(4, 1, 5, DataType.FLOAT).getFirst();
            replica.computeGradient(b);
            assertEquals(expectedOrder, order, model.getClass().getSimpleName() + " signal order");
            for (String key : order) {
                float[] end = slice(replica, slices.get(key));
                assertTrue(java.util.Arrays.equals(end, atSignal.get(key)),
                        model.getClass().getSimpleName() + " layer " + key + ": gradient changed after its signal");
                boolean nonZero = false;
                for (float f : end) {
                    nonZero |= f != 0;
                }
                assertTrue(nonZero, "layer " + key + " has an all-zero gradient: the check would prove nothing");
            }
        }
        // the replica trains like the model it came from: same parameters, and the slices tile the parameters
        assertTrue(ModelReplica.bitwiseEqual(user.params(), replica.params()));
        long covered = replica.layerSlices().stream().mapToLong(s -> s.end() - s.start()).sum();
        assertEquals(replica.params().length(), covered, "layer slices cover the gradient view");
        if (model instanceof ComputationGraph || model instanceof MultiLayerNetwork) {
            assertEquals(user.params().length(), replica.gradientView().length());
        }
    }
}
