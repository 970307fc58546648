package org.symmem4j.dl4j;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.stream.Stream;
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
 * N workers with batch B against one model trained on the same N·B examples per step: parameters
 * agree to floating-point rounding after every step, and the replicas are bitwise identical after
 * every step.
 */
class DataParallelEquivalenceTest {

    static Stream<Arguments> cases() {
        List<Arguments> out = new ArrayList<>();
        for (int workers : new int[] {2, 4}) {
            for (String updater : new String[] {"sgd", "adam"}) {
                for (DataType dtype : new DataType[] {DataType.FLOAT, DataType.DOUBLE}) {
                    out.add(Arguments.of(workers, updater, dtype));
                }
            }
        }
        return out.stream();
    }

    static double tolerance(DataType dtype, String updater) {
        if (dtype == DataType.DOUBLE) {
            return 1e-10;
        }
        return updater.equals("adam") ? 2e-4 : 2e-5;
    }

    /** Trains through the wrapper, checking replicas after each step; returns replica 0's params per step. */
    static List<INDArray> trainParallel(SymmemParallelWrapper.Builder builder, List<DataSet> data) {
        SymmemParallelWrapper[] holder = new SymmemParallelWrapper[1];
        List<INDArray> perStep = new ArrayList<>();
        builder.stepListener(report -> {
            List<ModelReplica> replicas = holder[0].replicas();
            for (int r = 1; r < replicas.size(); r++) {
                assertTrue(ModelReplica.bitwiseEqual(replicas.getFirst().params(), replicas.get(r).params()),
                        "replica " + r + " differs bitwise from replica 0 after step " + report.step());
                assertTrue(ModelReplica.bitwiseEqual(replicas.getFirst().updaterState(), replicas.get(r).updaterState()),
                        "replica " + r + " updater state differs after step " + report.step());
            }
            perStep.add(replicas.getFirst().params().dup());
        });
        try (SymmemParallelWrapper wrapper = builder.build()) {
            holder[0] = wrapper;
            wrapper.fit(new BatchListIterator(data));
        }
        return perStep;
    }

    @ParameterizedTest(name = "workers={0} updater={1} dtype={2}")
    @MethodSource("cases")
    void matchesOneModelTrainedOnTheCombinedBatch(int workers, String updater, DataType dtype) {
        int steps = 6;
        int batch = 8;
        List<DataSet> data = Nets.batches(123, steps * workers, batch, dtype);
        MultiLayerNetwork net = Nets.mlp(Nets.updater(updater), dtype);
        MultiLayerNetwork reference = net.clone();
        MultiLayerNetwork workerZeroOnly = net.clone();

        List<INDArray> parallel = trainParallel(SymmemParallelWrapper.builder(net).workers(workers), data);
        assertEquals(steps, parallel.size());

        double tol = tolerance(dtype, updater);
        for (int s = 0; s < steps; s++) {
            List<DataSet> step = data.subList(s * workers, (s + 1) * workers);
            reference.fit(Nets.merged(step));
            workerZeroOnly.fit(step.getFirst());
            double diff = Nets.maxRelativeDifference(parallel.get(s), reference.params());
            assertTrue(diff <= tol, "step " + s + ": max relative difference " + diff + " > " + tol);
        }
        // the comparison can fail: training on a quarter or half of the data lands far away
        double wrong = Nets.maxRelativeDifference(parallel.getLast(), workerZeroOnly.params());
        assertTrue(wrong > 100 * tol, "the check is too loose to tell data parallelism from one worker: " + wrong);
        // the user's model holds the result, bitwise
        assertTrue(ModelReplica.bitwiseEqual(parallel.getLast(), net.params()), "model does not hold replica 0's params");
        assertEquals(reference.getIterationCount(), net.getIterationCount());
        assertEquals(1, net.getEpochCount());
    }

    @Test
    void computationGraphMatchesToo() {
        int workers = 2;
        int steps = 5;
        int batch = 6;
        List<DataSet> data = Nets.batches(9, steps * workers, batch, DataType.DOUBLE);
        ComputationGraph graph = Nets.graph(Nets.updater("adam"), DataType.DOUBLE);
        ComputationGraph reference = graph.clone();
        List<INDArray> parallel = trainParallel(SymmemParallelWrapper.builder(graph).workers(workers), data);
        for (int s = 0; s < steps; s++) {
            reference.fit(Nets.merged(data.subList(s * workers, (s + 1) * workers)));
            double diff = Nets.maxRelativeDifference(parallel.get(s), reference.params());
            assertTrue(diff <= 1e-10, "step " + s + ": " + diff);
        }
        assertTrue(ModelReplica.bitwiseEqual(parallel.getLast(), graph.params()));
    }
}
