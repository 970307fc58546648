package org.symmem4j.benchmarks.dl4j;

import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.IntFunction;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.nd4j.linalg.dataset.DataSet;
import org.symmem4j.dl4j.nd4j.Nd4jThreadLimit;
import org.symmem4j.parallel.affinity.RankAffinity;

/**
 * The machine's own bound for N workers: N models trained at once on N platform threads with no
 * synchronisation at all, each on its own copy of the batches (rotated so they do not read the same
 * one at once), ND4J limited to {@code threads} threads each. What N cores deliver to N independent
 * replicas (shared memory bandwidth, caches, turbo clocks): the data-parallel scaling benchmark's
 * {@code independent} mode and the pipeline benchmark's bound both measure it here.
 */
final class IndependentReplicas {

    /** What the replicas trained together in the window. */
    record Result(long examples, double seconds) {
        double examplesPerSecond() {
            return examples / seconds;
        }
    }

    private IndependentReplicas() {
    }

    /**
     * Trains {@code n} models, each {@code warmupSeconds} untimed, then all together over a window of
     * {@code seconds} that opens when the last one finished its warm-up.
     *
     * @param n        replicas, one platform thread each
     * @param build    the replica's model ({@code i} = 0..n-1), built on the calling thread
     * @param batches  the batches every replica cycles through
     * @param threads  ND4J op and BLAS threads of each replica
     * @return the examples all replicas trained in the window, and the window; null when {@code seconds} is 0
     */
    static Result measure(int n, IntFunction<MultiLayerNetwork> build, List<DataSet> batches, int threads,
                          double warmupSeconds, double seconds) throws Exception {
        Nd4jThreadLimit.set(threads);
        // symmem4j.affinity pins these threads as it pins rank threads: the bound then runs where the ranks run
        RankAffinity affinity = RankAffinity.fromConfiguration(n);
        List<MultiLayerNetwork> nets = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            nets.add(build.apply(i));
        }
        long[] window = new long[1];
        // the window opens when the last thread finished its warm-up (the barrier's action runs before anyone goes on)
        CyclicBarrier start = new CyclicBarrier(n + 1, () -> window[0] = System.nanoTime());
        CyclicBarrier end = new CyclicBarrier(n + 1);
        AtomicLong examples = new AtomicLong();
        List<Thread> workers = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            int id = i;
            workers.add(Thread.ofPlatform().name("independent-" + i).start(() -> {
                try {
                    affinity.pinCurrentThread(id);
                    MultiLayerNetwork net = nets.get(id);
                    List<DataSet> mine = new ArrayList<>(batches);
                    Collections.rotate(mine, id);
                    net.fit(new ScalingBench.TimedIterator(mine, 1, System.nanoTime() + (long) (warmupSeconds * 1e9)));
                    start.await();
                    ScalingBench.TimedIterator it = new ScalingBench.TimedIterator(mine, 1,
                            window[0] + (long) (seconds * 1e9));
                    net.fit(it);
                    examples.addAndGet(it.examples);
                    end.await();
                } catch (Exception e) {
                    throw new IllegalStateException(e);
                }
            }));
        }
        start.await();
        end.await();
        long t = System.nanoTime() - window[0];
        for (Thread w : workers) {
            w.join();
        }
        return seconds == 0 ? null : new Result(examples.get(), t / 1e9);
    }
}
