package org.symmem4j.dl4j;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.dataset.DataSet;

/**
 * Synchronized BatchNorm with one JVM per worker: {@code symmem4j-run -n N} starts N JVMs of
 * {@link SyncBatchNormProcessWorker}, each one worker of the launcher's group with {@code syncBatchNorm(true)}; for the
 * Dense+BN MLP (batches of different sizes) and the Conv+BN network, both with a short last step that leaves workers
 * idle, every rank's model — parameters with the running statistics, updater state, every step's loss — equals N worker
 * threads of this JVM bitwise, and one model fitted on each step's merged batch to {@link SyncBatchNormTest#TOLERANCE}.
 * The worker threads' run without {@code syncBatchNorm} lands far from that model ({@link SyncBatchNormTest}'s control),
 * so bitwise equality with the synchronized threads is what the processes must earn.
 */
class SyncBatchNormProcessModeTest {

    @ParameterizedTest(name = "{0} worker JVMs")
    @ValueSource(ints = {2, 4})
    @Timeout(value = 10, unit = TimeUnit.MINUTES)
    void workerProcessesTrainBitwiseLikeWorkerThreads(int ranks, @TempDir Path out) throws IOException {
        LaunchedRanks.run(ranks, "SYNC BN OK", SyncBatchNormProcessWorker.class, out.toString());
        for (SyncBatchNormProcessWorker.Case c : SyncBatchNormProcessWorker.CASES) {
            List<DataSet> data = SyncBatchNormProcessWorker.data(c, ranks);
            MultiLayerNetwork threadsModel = SyncBatchNormTest.net(c.kind());
            INDArray initial = threadsModel.params().dup();
            List<Double> losses = SyncBatchNormProcessWorker.train(SymmemParallelWrapper.builder(threadsModel)
                    .workers(ranks), data);
            MultiLayerNetwork fresh = SyncBatchNormTest.net(c.kind());
            assertTrue(ModelReplica.bitwiseEqual(initial, fresh.params()), "the network is built the same each time");
            INDArray merged = SyncBatchNormTest.reference(fresh, data, ranks).getLast();
            for (int r = 0; r < ranks; r++) {
                String what = c.name() + ", rank " + r + " of " + ranks;
                MultiLayerNetwork rank = LaunchedRanks.read(out, c.name(), r);
                assertTrue(ModelReplica.bitwiseEqual(threadsModel.params(), rank.params()), what + ": parameters (running"
                        + " statistics included) differ bitwise from " + ranks + " worker threads'");
                assertTrue(ModelReplica.bitwiseEqual(threadsModel.getUpdater().getStateViewArray(),
                        rank.getUpdater().getStateViewArray()), what + ": updater state");
                assertEquals(losses, LaunchedRanks.losses(out, c.name(), r), what + ": every step's loss");
                assertEquals(threadsModel.getIterationCount(), rank.getIterationCount(), what + ": iterations");
                double diff = Nets.maxRelativeDifference(rank.params(), merged);
                assertTrue(diff <= SyncBatchNormTest.TOLERANCE, what + ": differs from one model on the merged batch by "
                        + diff);
            }
        }
    }
}
