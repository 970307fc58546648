package org.symmem4j.dl4j.pipeline;

import java.lang.foreign.MemorySegment;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Objects;
import java.util.concurrent.BrokenBarrierException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.stream.IntStream;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.nd4j.linalg.dataset.api.DataSet;
import org.symmem4j.dl4j.nd4j.Nd4jThreadLimit;
import org.symmem4j.parallel.affinity.RankAffinity;
import org.symmem4j.pipeline.schedule.MachineBound;
import org.symmem4j.pipeline.schedule.PipelineShape;
import org.symmem4j.pipeline.schedule.StageDurations;

/**
 * The per-core stage times that the machine's bound for a pipeline is made of ({@link MachineBound}): one platform
 * thread per pipeline rank, pinned where {@code symmem4j.affinity} pins that rank's thread, runs the rank's stages'
 * work (every microbatch's forward, its backward, or its input- and weight-gradient halves where the schedule splits
 * them, then the optimizer step) on its own copy of those stages, all ranks at once and independently: no message
 * passes between them and nothing waits on anything (each stage reads inputs and output gradients computed once,
 * before the first window). N independent jobs on N cores, as the data-parallel scaling benchmark measures N
 * independent models: what each core delivers to its stages' work while the others load the machine the same way.
 *
 * <p>A window ({@link #measure()}) starts every thread together; each times one pass over its stages, then repeats
 * untimed forward and backward passes until the slowest has finished its timed pass, so that every timed pass runs
 * with all cores busy. Call it between the pipeline's steps (the rank threads wait for their next task then), step
 * for step, so that the machine's drift hits both alike.
 */
public final class IndependentStages implements AutoCloseable {

    /**
     * One window's per-core times.
     *
     * @param micros          per stage, the mean forward and backward (input + weight gradient where split) over the
     *                        microbatches in microseconds (at least 1), with the measured weight-gradient share; the
     *                        communication latency 0 (no hand-offs)
     * @param optimizerMicros per rank, its stages' optimizer steps in microseconds
     */
    public record Window(StageDurations micros, long[] optimizerMicros) {

        /** Copies the array (the record is immutable). */
        public Window {
            Objects.requireNonNull(micros, "micros");
            optimizerMicros = optimizerMicros.clone();
        }

        @Override
        public long[] optimizerMicros() {
            return optimizerMicros.clone();
        }

        /** Per stage forward + backward in ms, ";"-separated. */
        public String stageMillis() {
            StringBuilder s = new StringBuilder();
            for (int stage = 0; stage < micros.stageCount(); stage++) {
                s.append(stage == 0 ? "" : ";").append(String.format(Locale.ROOT, "%.1f", micros.total(stage) / 1e3));
            }
            return s.toString();
        }
    }

    private final PipelineShape shape;
    private final boolean splitBackward;
    private final Duration timeout;
    private final List<Dl4jPipelineStage> stages;
    private final StepPlan plan;
    /** {@code inputs[s][mb]}: what stage {@code s}'s forward of {@code mb} reads (empty for stage 0). */
    private final MemorySegment[][] inputs;
    /** {@code gradients[s][mb]}: the output gradient stage {@code s}'s backward of {@code mb} reads (empty for the last). */
    private final MemorySegment[][] gradients;
    private final List<Worker> workers = new ArrayList<>();

    private IndependentStages(PipelineShape shape, boolean splitBackward, Duration timeout, List<Dl4jPipelineStage> stages,
                              StepPlan plan, MemorySegment[][] inputs, MemorySegment[][] gradients) {
        this.shape = shape;
        this.splitBackward = splitBackward;
        this.timeout = timeout;
        this.stages = stages;
        this.plan = plan;
        this.inputs = inputs;
        this.gradients = gradients;
    }

    /**
     * Builds a copy of every stage of {@code split}, computes each stage's inputs and output gradients for
     * {@code batch}'s microbatches once (on the calling thread), and starts one thread per rank, pinned as the
     * pipeline's rank threads are ({@code symmem4j.affinity} for {@code shape.ranks()} ranks).
     *
     * @param split         the split the pipeline runs ({@code PipelineParallelTrainer#split()})
     * @param shape         the pipeline's ranks, microbatches and stages per rank (stage {@code s} on rank
     *                      {@code shape.rankOf(s)})
     * @param batch         a batch of one step, cut into {@code shape.microbatches()} microbatches as the trainer cuts it
     * @param splitBackward whether the schedule splits backwards into input and weight gradients (ZB-H1)
     * @param ndThreads     ND4J threads per rank thread, as the pipeline's ranks have
     * @param timeout       the bound on every wait of a window
     * @return the running threads; close them with {@link #close()}
     * @throws IllegalArgumentException when the split's stage count is not the shape's, or the batch does not fit the
     *                                  network
     */
    public static IndependentStages start(PipelineStageSplit split, PipelineShape shape, DataSet batch,
                                          boolean splitBackward, int ndThreads, Duration timeout) {
        Objects.requireNonNull(split, "split");
        Objects.requireNonNull(shape, "shape");
        Objects.requireNonNull(batch, "batch");
        Objects.requireNonNull(timeout, "timeout");
        if (split.stageCount() != shape.stageCount()) {
            throw new IllegalArgumentException("independent stages: the split has stages=" + split.stageCount()
                    + " expected=" + shape.stageCount() + " (" + shape + "; fix: pass the trainer's split() and shape())");
        }
        if (ndThreads < 1) {
            throw new IllegalArgumentException("independent stages: ndThreads=" + ndThreads + " expected >= 1 (fix: pass"
                    + " the ND4J threads per rank, 1 for a core per rank)");
        }
        List<MultiLayerNetwork> networks = split.buildStageNetworks();
        List<Dl4jPipelineStage> stages = new ArrayList<>();
        for (int s = 0; s < networks.size(); s++) {
            stages.add(new Dl4jPipelineStage(s, networks.size(), networks.get(s)));
        }
        Microbatches microbatches = Microbatches.split(batch, shape.microbatches(), split.dataType());
        StepPlan plan = StepPlan.of(split, stages, microbatches, null);
        int count = stages.size();
        MemorySegment[][] inputs = new MemorySegment[count][shape.microbatches()];
        MemorySegment[][] gradients = new MemorySegment[count][shape.microbatches()];
        MemorySegment empty = MemorySegment.ofArray(new byte[0]);
        for (Dl4jPipelineStage stage : stages) {
            stage.beginStep(plan);
        }
        for (int mb = 0; mb < shape.microbatches(); mb++) {
            MemorySegment message = empty;
            for (int s = 0; s < count; s++) {
                inputs[s][mb] = message;
                message = StageProfile.copy(stages.get(s).forward(mb, message));
            }
            message = empty;
            for (int s = count - 1; s >= 0; s--) {
                gradients[s][mb] = message;
                message = StageProfile.copy(stages.get(s).backward(mb, message));
            }
        }
        IndependentStages runs = new IndependentStages(shape, splitBackward, timeout, List.copyOf(stages), plan, inputs,
                gradients);
        RankAffinity affinity = RankAffinity.fromConfiguration(shape.ranks());
        for (int rank = 0; rank < shape.ranks(); rank++) {
            Worker worker = runs.new Worker(rank);
            runs.workers.add(worker);
            int r = rank;
            worker.thread = Thread.ofPlatform().name("symmem4j-bound-" + rank).daemon(true).start(() -> {
                affinity.pinCurrentThread(r); // the CPU the pipeline's rank r runs on
                Nd4jThreadLimit.set(ndThreads);
                worker.loop();
            });
        }
        return runs;
    }

    /**
     * One window: every rank's stages' work at once on their CPUs, each timed once.
     *
     * @return the per-core times
     * @throws IllegalStateException when a rank does not finish its window within the timeout (it names the rank), or
     *                               a pass fails (the cause)
     */
    public Window measure() {
        int ranks = shape.ranks();
        CyclicBarrier go = new CyclicBarrier(ranks);
        AtomicInteger done = new AtomicInteger();
        List<CompletableFuture<long[][]>> results = new ArrayList<>();
        for (Worker worker : workers) {
            CompletableFuture<long[][]> result = new CompletableFuture<>();
            results.add(result);
            worker.tasks.add(new Task(go, done, result));
        }
        int stageCount = shape.stageCount();
        long[] forward = new long[stageCount];
        long[] backward = new long[stageCount];
        long[] weight = new long[stageCount];
        long[] optimizer = new long[ranks];
        long deadline = System.nanoTime() + timeout.toNanos();
        for (int rank = 0; rank < ranks; rank++) {
            long[][] times;
            try {
                times = results.get(rank).get(Math.max(0, deadline - System.nanoTime()), TimeUnit.NANOSECONDS);
            } catch (TimeoutException e) {
                throw new IllegalStateException("independent stages: rank=" + rank + " did not finish its window within "
                        + timeout + " (expected every rank's stages to run one pass; fix: give a longer timeout, or"
                        + " look for what holds that rank's CPU)", e);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new IllegalStateException("independent stages: interrupted while waiting for rank=" + rank
                        + " (fix: do not interrupt the thread that measures)", e);
            } catch (ExecutionException e) {
                throw new IllegalStateException("independent stages: rank=" + rank + " failed: " + e.getCause()
                        + " (fix: correct what the cause names)", e.getCause());
            }
            for (int s = 0; s < stageCount; s++) {
                if (shape.rankOf(s) == rank) {
                    int m = shape.microbatches();
                    forward[s] = Math.max(1, Math.round(times[0][s] / 1e3 / m));
                    backward[s] = Math.max(1, Math.round(times[1][s] / 1e3 / m));
                    weight[s] = splitBackward ? Math.min(backward[s] - 1, Math.round(times[2][s] / 1e3 / m))
                            : backward[s] / 2;
                }
            }
            optimizer[rank] = Math.round(times[3][0] / 1e3);
        }
        return new Window(new StageDurations(forward, backward, weight, 0), optimizer);
    }

    /** Stops the threads (each finishes the window it runs first). */
    @Override
    public void close() {
        for (Worker worker : workers) {
            worker.tasks.add(Task.STOP);
        }
        for (Worker worker : workers) {
            try {
                worker.thread.join(timeout.toMillis());
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                return;
            }
        }
    }

    /** A window for one rank thread; {@link #STOP} ends the thread. */
    private record Task(CyclicBarrier go, AtomicInteger done, CompletableFuture<long[][]> result) {
        static final Task STOP = new Task(null, null, null);
    }

    /** One rank's thread: its stages, and the windows it is handed. */
    private final class Worker {
        private final int rank;
        private final int[] mine;
        private final LinkedBlockingQueue<Task> tasks = new LinkedBlockingQueue<>();
        private Thread thread;

        Worker(int rank) {
            this.rank = rank;
            this.mine = IntStream.range(0, shape.stageCount()).filter(s -> shape.rankOf(s) == rank)
                    .toArray();
        }

        void loop() {
            while (true) {
                Task task;
                try {
                    task = tasks.take(); // parks between windows, as the pipeline's rank threads park between steps
                } catch (InterruptedException e) {
                    return;
                }
                if (task == Task.STOP) {
                    return;
                }
                try {
                    task.result().complete(window(task));
                } catch (Throwable t) {
                    task.done().incrementAndGet(); // the others stop keeping busy for this rank
                    task.result().completeExceptionally(t);
                }
            }
        }

        /** {@code [forward, backward, weight][stage]} nanoseconds summed over the microbatches, {@code [3][0]} the optimizer. */
        private long[][] window(Task task) throws InterruptedException, BrokenBarrierException, TimeoutException {
            int count = shape.stageCount();
            long[][] times = new long[4][count];
            for (int s : mine) {
                stages.get(s).beginStep(plan);
            }
            task.go().await(timeout.toNanos(), TimeUnit.NANOSECONDS);
            for (int s : mine) {
                Dl4jPipelineStage stage = stages.get(s);
                for (int mb = 0; mb < shape.microbatches(); mb++) {
                    long t0 = System.nanoTime();
                    stage.forward(mb, inputs[s][mb]);
                    times[0][s] += System.nanoTime() - t0;
                }
            }
            for (int i = mine.length - 1; i >= 0; i--) {
                int s = mine[i];
                Dl4jPipelineStage stage = stages.get(s);
                for (int mb = 0; mb < shape.microbatches(); mb++) {
                    long t0 = System.nanoTime();
                    if (splitBackward) {
                        stage.backwardInput(mb, gradients[s][mb]);
                        long t1 = System.nanoTime();
                        stage.backwardWeight(mb);
                        times[2][s] += System.nanoTime() - t1;
                    } else {
                        stage.backward(mb, gradients[s][mb]);
                    }
                    times[1][s] += System.nanoTime() - t0;
                }
            }
            long t0 = System.nanoTime();
            for (int s : mine) {
                stages.get(s).step();
            }
            times[3][0] = System.nanoTime() - t0;
            task.done().incrementAndGet();
            // keep this core as busy as in the timed pass until every rank has timed its pass
            Dl4jPipelineStage first = stages.get(mine[0]);
            long deadline = System.nanoTime() + timeout.toNanos();
            while (task.done().get() < shape.ranks() && System.nanoTime() < deadline) {
                first.beginStep(plan);
                first.forward(0, inputs[mine[0]][0]);
                first.backward(0, gradients[mine[0]][0]);
            }
            return times;
        }
    }
}
