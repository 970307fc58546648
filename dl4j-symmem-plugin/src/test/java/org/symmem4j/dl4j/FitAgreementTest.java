package org.symmem4j.dl4j;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.atomic.AtomicInteger;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.deeplearning4j.optimize.api.BaseTrainingListener;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.dataset.DataSet;
import org.symmem4j.dl4j.train.CheckpointDirectory;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.group.InJvmWorld;

/**
 * The refusals of {@link SymmemParallelWrapper#fit} that depend on what one rank was given, in group mode (ranks as
 * threads of this JVM, a 5 s group timeout): one rank's iterator that cannot be read ahead with {@code prefetchBuffer},
 * one rank's iterator that does not reach the resume position, a listener added to one rank's model after
 * {@code build()}. Each used to be thrown on that rank alone while the other went on into the first step's collective:
 * it failed there when the refusing rank left the group (a rank that stays waits until the group's timeout), or it
 * paired its fit with the refusing rank's next one and trained on (run against the code before the agreement, the
 * prefetch case did that); every rank now throws the same error naming the refusing rank and what it found, before any
 * batch is read (or, after a resume, before any is trained), each model left as it was.
 */
class FitAgreementTest {

    private static final GroupOptions SHORT = GroupOptions.defaults().withTimeout(Duration.ofSeconds(5));
    private static final String AGREED = "fit() refused on every rank (2): rank(s) [0] ";

    private static double[] params(MultiLayerNetwork net) {
        return net.params().dup().toDoubleVector();
    }

    /** Every rank's message is the same, names rank 0 and what it found, and ends with the fix. */
    private static void assertAgreed(List<String> messages, String refused, String found) {
        for (String m : messages) {
            assertEquals(messages.getFirst(), m, "every rank the same error");
            assertTrue(m.startsWith(AGREED + ("refused".equals(refused) ? "refused it" : refused) + ", expected every rank to accept it; nothing was read into or"
                    + " written from any rank's model. rank 0 " + refused + ": " + found), m);
            assertTrue(m.endsWith("(fix: what rank 0's message says, then retry on every rank)"), m);
        }
    }

    @Test
    void anIteratorOneRankCannotPrefetchIsRefusedOnEveryRankBeforeAnyBatchIsRead() {
        MultiLayerNetwork initial = Nets.mlp(Nets.updater("adam"), DataType.DOUBLE);
        List<DataSet> data = Nets.batches(3, 4, 4, DataType.DOUBLE);
        List<String> messages = InJvmWorld.runOnEveryRank(2, SHORT, group -> {
            MultiLayerNetwork mine = initial.clone();
            double[] before = params(mine);
            AtomicInteger reads = new AtomicInteger();
            try (SymmemParallelWrapper w = SymmemParallelWrapper.builder(mine).group(group).ompThreadsPerWorker(1)
                    .prefetchBuffer(2).build()) {
                // rank 0's iterator must be read from one thread; rank 1's may be read ahead
                BatchListIterator it = new BatchListIterator(data, reads::incrementAndGet, group.rank() != 0);
                IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> w.fit(it),
                        "rank " + group.rank());
                assertEquals(0, reads.get(), "rank " + group.rank() + ": no batch read");
                assertArrayEquals(before, params(mine), "rank " + group.rank() + ": the model as it was");
                // fixed on every rank: both train
                w.fit(new BatchListIterator(data, () -> { }, true));
                return e.getMessage();
            }
        });
        assertAgreed(messages, "refused", "prefetchBuffer=2 reads the iterator on a background thread, but"
                + " iterator=BatchListIterator has asyncSupported()=false");
    }

    @Test
    void anIteratorOneRankEndsBeforeTheResumePositionIsRefusedOnEveryRank(@TempDir Path root) throws Exception {
        MultiLayerNetwork initial = Nets.mlp(Nets.updater("adam"), DataType.DOUBLE);
        List<DataSet> data = Nets.batches(5, 6, 4, DataType.DOUBLE);
        // two workers, a checkpoint every 2 steps: step 2 after 4 of the 6 batches
        MultiLayerNetwork taken = initial.clone();
        try (SymmemParallelWrapper w = SymmemParallelWrapper.builder(taken).workers(2).ompThreadsPerWorker(1)
                .checkpointEvery(2, root).build()) {
            w.fit(new BatchListIterator(data));
        }
        CheckpointDirectory.Checkpoint checkpoint = CheckpointDirectory.latestComplete(root).orElseThrow();
        assertEquals(4, checkpoint.counters().batchesInEpoch());
        long examples = checkpoint.counters().examplesInEpoch();
        List<String> messages = InJvmWorld.runOnEveryRank(2, SHORT, group -> {
            MultiLayerNetwork mine = initial.clone();
            try (SymmemParallelWrapper w = SymmemParallelWrapper.builder(mine).group(group).ompThreadsPerWorker(1)
                    .resumeFrom(root).build()) {
                double[] resumed = params(mine);
                // rank 0 was given the first 3 batches only; rank 1 all of them, and reads its first 4 to skip them
                BatchListIterator it = new BatchListIterator(group.rank() == 0 ? data.subList(0, 3) : data);
                IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> w.fit(it),
                        "rank " + group.rank());
                assertArrayEquals(resumed, params(mine), "rank " + group.rank() + ": the model as restored");
                // each rank had read batches to skip them (rank 1 its first 4): reset, so the next fit starts there
                assertEquals(1, it.resets(), "rank " + group.rank() + ": resets");
                return e.getMessage();
            }
        });
        assertAgreed(messages, "refused", "resume position: the checkpoint " + checkpoint.dir() + " was taken after"
                + " batches=4 examples=" + examples + " of its epoch; this iterator ended after 3 batches");
    }

    @Test
    void aListenerAddedToOneRanksModelAfterBuildIsRefusedOnEveryRank() {
        MultiLayerNetwork initial = Nets.mlp(Nets.updater("adam"), DataType.DOUBLE);
        List<DataSet> data = Nets.batches(7, 4, 4, DataType.DOUBLE);
        List<String> messages = InJvmWorld.runOnEveryRank(2, SHORT, group -> {
            MultiLayerNetwork mine = initial.clone();
            double[] before = params(mine);
            try (SymmemParallelWrapper w = SymmemParallelWrapper.builder(mine).group(group).ompThreadsPerWorker(1)
                    .build()) {
                if (group.rank() == 0) {
                    // after build(): a listener reading the forward pass, which no rank holds in group mode
                    mine.setListeners(new BaseTrainingListener() {
                        @Override
                        public void onForwardPass(org.deeplearning4j.nn.api.Model model, List<INDArray> activations) {
                        }
                    });
                }
                IllegalStateException e = assertThrows(IllegalStateException.class,
                        () -> w.fit(new BatchListIterator(data)), "rank " + group.rank());
                assertArrayEquals(before, params(mine), "rank " + group.rank() + ": the model as it was");
                return e.getMessage();
            }
        });
        assertAgreed(messages, "failed", "a listener that overrides onForwardPass in group mode");
    }
}
