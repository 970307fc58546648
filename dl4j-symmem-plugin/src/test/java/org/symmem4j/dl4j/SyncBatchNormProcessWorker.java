package org.symmem4j.dl4j;

import java.nio.file.Path;
import java.util.List;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.nd4j.linalg.dataset.DataSet;
import org.symmem4j.parallel.cuda.WorkerProcesses;
import org.symmem4j.parallel.group.ProcessGroup;

/**
 * One rank of {@link SyncBatchNormProcessModeTest}'s job, a JVM of its own under {@code symmem4j-run}: joins the
 * launcher's group and, for each of {@link #CASES} in turn, trains {@link SyncBatchNormTest}'s network with one
 * worker on its rank of the group ({@code .group(group).syncBatchNorm(true)}), on {@link SyncBatchNormTest#data}
 * for the group's size; writes the trained model and every step's loss ({@link LaunchedRanks#write}).
 *
 * <pre>SyncBatchNormProcessWorker outputDir</pre>
 */
public final class SyncBatchNormProcessWorker {

    /** The network, batches of different sizes, a short last step (workers idle in it). */
    record Case(String kind, boolean unequal, boolean shortLast) {
        String name() {
            return kind + (unequal ? "-unequal" : "") + (shortLast ? "-short" : "");
        }
    }

    /** What every rank trains, in this order: the Dense+BN MLP and the Conv+BN network. */
    static final List<Case> CASES = List.of(new Case("mlp", true, true), new Case("cnn", false, true));

    /** Full steps before the short one. */
    static final int STEPS = 3;

    private SyncBatchNormProcessWorker() {
    }

    static List<DataSet> data(Case c, int ranks) {
        return SyncBatchNormTest.data(c.kind(), ranks, STEPS, c.unequal(), c.shortLast());
    }

    /** One fit with synchronized BatchNorm, one OpenMP thread per worker; every step's loss. */
    static List<Double> train(SymmemParallelWrapper.Builder builder, List<DataSet> data) {
        List<Double> losses = new java.util.ArrayList<>();
        try (SymmemParallelWrapper wrapper = builder.ompThreadsPerWorker(1).syncBatchNorm(true)
                .stepListener(r -> losses.add(r.loss())).build()) {
            wrapper.fit(new BatchListIterator(data));
        }
        return losses;
    }

    public static void main(String[] args) {
        Path out = Path.of(args[0]);
        WorkerProcesses.exitWith(() -> {
            try (ProcessGroup group = ProcessGroup.fromEnvironment()) {
                for (Case c : CASES) {
                    MultiLayerNetwork mine = SyncBatchNormTest.net(c.kind());
                    List<Double> losses = train(SymmemParallelWrapper.builder(mine).group(group), data(c, group.worldSize()));
                    LaunchedRanks.write(out, c.name(), group.rank(), mine, losses);
                }
                return "SYNC BN OK rank=" + group.rank();
            }
        });
    }
}
