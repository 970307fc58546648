package org.symmem4j.dl4j.pipeline;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import org.deeplearning4j.nn.graph.ComputationGraph;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.dataset.DataSet;
import org.nd4j.linalg.dataset.MultiDataSet;
import org.nd4j.linalg.dataset.adapter.MultiDataSetIteratorAdapter;
import org.nd4j.linalg.dataset.api.iterator.MultiDataSetIterator;
import org.symmem4j.dl4j.BatchListIterator;
import org.symmem4j.dl4j.train.CheckpointDirectory;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.group.InJvmWorld;

/**
 * The pipeline trainer's {@code fit()} refusals that depend on what one rank was given, in group mode (ranks as threads
 * of this JVM, a 5 s group timeout): a listener that group mode refuses added to one rank's model after {@code build()}, and one rank's
 * iterator that does not reach the resume position. The first used to be thrown on that rank alone while the other
 * went on into the step's batch agreement (there it paired with the refusing rank's next fit and trained on); the
 * second was not refused at all (that rank trained nothing and went on to gather the stages while the other was in
 * the batch agreement: a collective mismatch, or a wait until the group's timeout). Every rank now
 * throws the same error naming the refusing rank and what it found, before any step, and a thread-mode trainer refuses
 * an iterator that ends before the resume position as the data-parallel wrapper does. A batch one rank alone refuses
 * (a MultiDataSet of two inputs) is refused by every rank in the step's batch agreement, which every step runs anyway.
 */
class PipelineFitAgreementTest {

    private static final GroupOptions SHORT = GroupOptions.defaults().withTimeout(Duration.ofSeconds(5));

    private static MultiLayerNetwork mlp() {
        return PipelineNets.mlp(PipelineNets.updater("adam"), 1e-3, DataType.DOUBLE);
    }

    private static double[] params(MultiLayerNetwork net) {
        return net.params().dup().toDoubleVector();
    }

    private static void assertAgreed(List<String> messages, String refused, String found) {
        for (String m : messages) {
            assertEquals(messages.getFirst(), m, "every rank the same error");
            assertTrue(m.startsWith("fit() refused on every rank (2): rank(s) [0] " + ("refused".equals(refused) ? "refused it" : refused) + ", expected every rank"
                    + " to accept it; nothing was read into or written from any rank's model. rank 0 " + refused + ": "
                    + found), m);
            assertTrue(m.endsWith("(fix: what rank 0's message says, then retry on every rank)"), m);
        }
    }

    @Test
    void aListenerAddedToOneRanksModelAfterBuildIsRefusedOnEveryRank() {
        MultiLayerNetwork initial = mlp();
        List<DataSet> data = PipelineNets.batches(11, 2, 8, DataType.DOUBLE);
        List<String> messages = InJvmWorld.runOnEveryRank(2, SHORT, group -> {
            MultiLayerNetwork mine = initial.clone();
            double[] before = params(mine);
            try (PipelineParallelTrainer trainer = PipelineParallelTrainer.builder(mine).group(group).microbatches(4)
                    .ompThreadsPerRank(1).build()) {
                if (group.rank() == 0) {
                    // after build(): one that reads the whole network's activations, refused in group mode
                    mine.setListeners(new PipelineGroupListenersTest.Activations());
                }
                IllegalStateException e = assertThrows(IllegalStateException.class,
                        () -> trainer.fit(new BatchListIterator(data)), "rank " + group.rank());
                assertNull(trainer.lastStep(), "rank " + group.rank() + ": nothing trained");
                assertArrayEquals(before, params(mine), "rank " + group.rank() + ": the model as it was");
                mine.setListeners(); // fixed on every rank: both train
                trainer.fit(new BatchListIterator(data));
                assertEquals(1, trainer.lastStep().step());
                return e.getMessage();
            }
        });
        assertAgreed(messages, "failed", "a listener that overrides onForwardPass in group mode");
    }

    @Test
    void anIteratorOneRankEndsBeforeTheResumePositionIsRefusedOnEveryRank(@TempDir Path root) throws Exception {
        MultiLayerNetwork initial = mlp();
        List<DataSet> data = PipelineNets.batches(13, 3, 8, DataType.DOUBLE);
        // a checkpoint every 2 steps (one per batch): step 2, after 2 of the 3 batches
        try (PipelineParallelTrainer trainer = PipelineParallelTrainer.builder(initial.clone()).ranks(2)
                .microbatches(4).ompThreadsPerRank(1).checkpointEvery(2, root).build()) {
            trainer.fit(new BatchListIterator(data));
        }
        CheckpointDirectory.Checkpoint checkpoint = CheckpointDirectory.latestComplete(root).orElseThrow();
        assertEquals(2, checkpoint.counters().batchesInEpoch());

        // thread mode: refused as the wrapper refuses it (it used to train nothing and count an epoch)
        try (PipelineParallelTrainer trainer = PipelineParallelTrainer.builder(initial.clone()).ranks(2)
                .microbatches(4).ompThreadsPerRank(1).resumeFrom(root).build()) {
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                    () -> trainer.fit(new BatchListIterator(data.subList(0, 1))));
            assertTrue(e.getMessage().startsWith("resume position: the checkpoint " + checkpoint.dir() + " was taken"
                    + " after batches=2 of its epoch; this iterator ended after 1 batches"), e.getMessage());
            trainer.fit(new BatchListIterator(data)); // the right iterator: skips its first 2 batches
            assertEquals(2, trainer.lastStep().step(), "one step after the checkpoint's 2");
        }

        List<String> messages = InJvmWorld.runOnEveryRank(2, SHORT, group -> {
            MultiLayerNetwork mine = initial.clone();
            try (PipelineParallelTrainer trainer = PipelineParallelTrainer.builder(mine).group(group).microbatches(4)
                    .ompThreadsPerRank(1).resumeFrom(root).build()) {
                double[] resumed = params(mine);
                BatchListIterator it = new BatchListIterator(group.rank() == 0 ? data.subList(0, 1) : data);
                IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> trainer.fit(it),
                        "rank " + group.rank());
                assertNull(trainer.lastStep(), "rank " + group.rank() + ": nothing trained");
                assertArrayEquals(resumed, params(mine), "rank " + group.rank() + ": the model as restored");
                assertEquals(1, it.resets(), "rank " + group.rank() + ": reset after the batches it skipped");
                return e.getMessage();
            }
        });
        assertAgreed(messages, "refused", "resume position: the checkpoint " + checkpoint.dir() + " was taken after"
                + " batches=2 of its epoch; this iterator ended after 1 batches");
    }

    @Test
    void aBatchOneRankRefusesIsRefusedOnEveryRankInTheStepsBatchAgreement() {
        ComputationGraph initial = PipelineUserContractTest.chainGraph();
        List<DataSet> data = PipelineNets.batches(17, 2, 8, DataType.DOUBLE);
        List<String> messages = InJvmWorld.runOnEveryRank(2, SHORT, group -> {
            ComputationGraph mine = initial.clone();
            try (PipelineParallelTrainer trainer = PipelineParallelTrainer.builder(mine).group(group).microbatches(4)
                    .ompThreadsPerRank(1).build()) {
                MultiDataSetIterator twoInputs = new MultiDataSetIteratorAdapter(new BatchListIterator(data)) {
                    @Override
                    public org.nd4j.linalg.dataset.api.MultiDataSet next() {
                        DataSet b = data.getFirst();
                        return new MultiDataSet(new INDArray[] {b.getFeatures(), b.getFeatures()},
                                new INDArray[] {b.getLabels()});
                    }
                };
                MultiDataSetIterator it = group.rank() == 0 ? twoInputs
                        : new MultiDataSetIteratorAdapter(new BatchListIterator(data));
                IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> trainer.fit(it),
                        "rank " + group.rank());
                assertNull(trainer.lastStep(), "rank " + group.rank() + ": nothing trained");
                trainer.fit(new MultiDataSetIteratorAdapter(new BatchListIterator(data))); // fixed: both train
                assertEquals(1, trainer.lastStep().step());
                return e.getMessage();
            }
        });
        for (String m : messages) {
            assertEquals(messages.getFirst(), m, "every rank the same error");
            assertTrue(m.startsWith("group mode, step 0: rank(s) [0] refused the batch they were given, so no rank trains"
                    + " it; rank 0 was given a MultiDataSet with features=2 labels=1 arrays: expected features=1"
                    + " labels=1"), m);
            assertTrue(m.contains("fix: "), m);
        }
    }
}
