package org.symmem4j.dl4j.pipeline;

import java.lang.foreign.MemorySegment;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.Objects;
import java.util.concurrent.atomic.AtomicReference;
import org.deeplearning4j.nn.conf.inputs.InputType;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.nd4j.linalg.dataset.api.DataSet;
import org.nd4j.linalg.factory.Nd4j;
import org.symmem4j.pipeline.schedule.StageDurations;

/**
 * Measured forward and backward time of every layer of a network for one microbatch: what a split by
 * compute time needs ({@link PipelineStageSplit#byCost}), since parameter counts say little about a
 * convolution's or an output layer's time.
 *
 * <p>{@link #measure} cuts a copy of the network into one stage per layer and runs a few training
 * passes of a sample batch's microbatches through them on a thread of its own (with the ND4J thread
 * count each rank will have), timing every layer's forward and backward; no update is applied and the
 * network is not touched. A layer's time includes reading its input message, as a stage boundary
 * there would. The last layer's forward runs inside its backward (where DL4J computes the loss), so
 * its time is all backward, as in the pipeline.
 */
public final class StageProfile {

    private final long[] forwardNanos;
    private final long[] backwardNanos;
    private final long microbatchExamples;

    /**
     * Measured pass times of every layer, for splitting the network into stages of equal time.
     *
     * @param forwardNanos       per layer, one microbatch's forward time (median)
     * @param backwardNanos      per layer, one microbatch's backward time (median)
     * @param microbatchExamples the microbatch size the times are for
     */
    public StageProfile(long[] forwardNanos, long[] backwardNanos, long microbatchExamples) {
        Objects.requireNonNull(forwardNanos, "forwardNanos");
        Objects.requireNonNull(backwardNanos, "backwardNanos");
        if (forwardNanos.length == 0 || forwardNanos.length != backwardNanos.length) {
            throw new IllegalArgumentException("profile: forward has " + forwardNanos.length + " layers, backward "
                    + backwardNanos.length + " expected the same count, at least 1 (fix: pass one forward and one"
                    + " backward time per layer, or measure them with StageProfile.measure)");
        }
        this.forwardNanos = forwardNanos.clone();
        this.backwardNanos = backwardNanos.clone();
        this.microbatchExamples = microbatchExamples;
    }

    /**
     * Measures {@code network}'s layers on {@code sample} cut into {@code microbatches} microbatches:
     * {@code steps} passes of every microbatch, the first one a warm-up left out, each layer's median
     * kept. The passes run on a thread of their own (dropout seeds that thread's ND4J generator, not
     * the caller's).
     *
     * @param network      the network to profile
     * @param sample       a batch like those of training
     * @param microbatches parts the sample is cut into
     * @param steps        passes, at least 2 (the first is a warm-up)
     * @param ndThreads    ND4J (OpenMP and BLAS) threads during the measurement: those each rank will use
     * @param inputType    the network's input type, or null to infer it from the features
     * @return per-layer forward and backward nanoseconds of one microbatch
     * @throws NullPointerException     when {@code network} or {@code sample} is null
     * @throws IllegalArgumentException when {@code steps} is below 2, or the network or the sample does not
     *                                  fit (as the trainer's checks); a pass that throws a runtime exception
     *                                  throws it here
     * @throws IllegalStateException    when the calling thread is interrupted while the passes run, or a
     *                                  pass fails with an error (not a runtime exception), which is the cause
     */
    public static StageProfile measure(MultiLayerNetwork network, DataSet sample, int microbatches, int steps,
                                       int ndThreads, InputType inputType) {
        Objects.requireNonNull(network, "network");
        Objects.requireNonNull(sample, "sample");
        if (steps < 2) {
            throw new IllegalArgumentException("profile steps=" + steps + " expected >= 2 (the first warms up;"
                    + " fix: pass 2 or more, e.g. 5)");
        }
        int layers = PipelineStageSplit.maxStages(network);
        int[] everyLayer = new int[layers - 1];
        for (int i = 1; i < layers; i++) {
            everyLayer[i - 1] = i;
        }
        PipelineStageSplit split = PipelineStageSplit.atBoundaries(network, everyLayer);
        Microbatches batch = Microbatches.split(sample, microbatches, split.dataType());
        AtomicReference<Object> result = new AtomicReference<>();
        // a thread of its own: dropout seeds the thread's ND4J generator, which must not be the caller's
        Thread thread = Thread.ofPlatform().name("symmem4j-pipeline-profile").start(() -> {
            try {
                Nd4j.getEnvironment().setMaxThreads(ndThreads);
                Nd4j.factory().blas().setMaxThreads(ndThreads);
                result.set(run(split, batch, steps, inputType));
            } catch (Throwable t) {
                result.set(t);
            }
        });
        try {
            thread.join();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException("interrupted while profiling the network's layers: expected the profile to"
                    + " run to its end (fix: do not interrupt the thread that calls StageProfile.measure)", e);
        }
        if (result.get() instanceof RuntimeException e) {
            throw e;
        }
        if (result.get() instanceof Throwable t) {
            throw new IllegalStateException("profiling the network's layers failed: " + t + " (fix: correct what the"
                    + " cause names; the profile runs the network's forward and backward on the sample given)", t);
        }
        return (StageProfile) result.get();
    }

    private static StageProfile run(PipelineStageSplit split, Microbatches batch, int steps, InputType inputType) {
        List<MultiLayerNetwork> networks = split.buildStageNetworks();
        List<Dl4jPipelineStage> stages = new ArrayList<>();
        for (int s = 0; s < networks.size(); s++) {
            stages.add(new Dl4jPipelineStage(s, networks.size(), networks.get(s)));
        }
        StepPlan plan = StepPlan.of(split, stages, batch, inputType);
        int layers = stages.size();
        int samples = (steps - 1) * batch.count();
        long[][] forward = new long[layers][samples];
        long[][] backward = new long[layers][samples];
        MemorySegment empty = MemorySegment.ofArray(new byte[0]);
        for (int step = 0; step < steps; step++) {
            for (Dl4jPipelineStage stage : stages) {
                stage.beginStep(plan);
            }
            for (int mb = 0; mb < batch.count(); mb++) {
                int sample = (step - 1) * batch.count() + mb;
                MemorySegment message = empty;
                for (int s = 0; s < layers; s++) {
                    long start = System.nanoTime();
                    message = copy(stages.get(s).forward(mb, message));
                    if (step > 0) {
                        forward[s][sample] = System.nanoTime() - start;
                    }
                }
                message = empty;
                for (int s = layers - 1; s >= 0; s--) {
                    long start = System.nanoTime();
                    message = copy(stages.get(s).backward(mb, message));
                    if (step > 0) {
                        backward[s][sample] = System.nanoTime() - start;
                    }
                }
            }
        }
        long[] f = new long[layers];
        long[] b = new long[layers];
        for (int s = 0; s < layers; s++) {
            f[s] = median(forward[s]);
            b[s] = median(backward[s]);
        }
        return new StageProfile(f, b, batch.size(0));
    }

    /**
     * A stage's output is valid until its next call: the next layer reads a copy, as from a link slot (also
     * {@link IndependentStages}'s stored inputs and gradients).
     */
    static MemorySegment copy(MemorySegment message) {
        long bytes = message.byteSize();
        MemorySegment copy = MemorySegment.ofArray(new long[Math.toIntExact((bytes + 7) / 8)]).asSlice(0, bytes);
        copy.copyFrom(message);
        return copy;
    }

    private static long median(long[] values) {
        long[] sorted = values.clone();
        Arrays.sort(sorted);
        return sorted[sorted.length / 2];
    }

    /**
     * Per layer, one microbatch's forward time.
     *
     * @return nanoseconds per layer (a copy)
     */
    public long[] forwardNanos() {
        return forwardNanos.clone();
    }

    /**
     * Per layer, one microbatch's backward time.
     *
     * @return nanoseconds per layer (a copy)
     */
    public long[] backwardNanos() {
        return backwardNanos.clone();
    }

    /**
     * Per layer, forward plus backward: the cost {@link PipelineStageSplit#byCost} balances.
     *
     * @return nanoseconds per layer
     */
    public long[] layerNanos() {
        long[] total = new long[forwardNanos.length];
        for (int i = 0; i < total.length; i++) {
            total[i] = forwardNanos[i] + backwardNanos[i];
        }
        return total;
    }

    /**
     * The microbatch size the times are for.
     *
     * @return examples per microbatch
     */
    public long microbatchExamples() {
        return microbatchExamples;
    }

    /**
     * The split's stages' pass times in microseconds (at least 1) as the simulator takes them: each
     * stage's layers summed, the last stage's forward inside its backward as the pipeline runs it.
     *
     * @param split a split of the profiled network
     * @return forward and backward microseconds per stage
     * @throws IllegalArgumentException when the split has another layer count than the profile (it was
     *                                  made from another network)
     */
    public StageDurations stageDurationsMicros(PipelineStageSplit split) {
        if (split.layerCount() != forwardNanos.length) {
            throw new IllegalArgumentException("the split has " + split.layerCount() + " layers but the profile "
                    + forwardNanos.length + " (fix: profile the network the split was made from)");
        }
        int[] starts = new int[split.stageCount() + 1];
        for (int s = 0; s < split.stageCount(); s++) {
            starts[s] = split.firstLayer(s);
        }
        starts[split.stageCount()] = split.layerCount();
        return stageDurationsMicros(starts);
    }

    /**
     * As {@link #stageDurationsMicros(PipelineStageSplit)} for the stages that start at {@code starts} (the last entry
     * the layer count): what the split search simulates for each candidate.
     *
     * @param starts stage {@code s} runs layers {@code [starts[s], starts[s + 1])}; checked by the caller
     * @return forward and backward microseconds per stage
     */
    StageDurations stageDurationsMicros(int[] starts) {
        int stages = starts.length - 1;
        long[] f = new long[stages];
        long[] b = new long[stages];
        for (int s = 0; s < stages; s++) {
            long fs = 0;
            long bs = 0;
            for (int layer = starts[s]; layer < starts[s + 1]; layer++) {
                fs += forwardNanos[layer];
                bs += backwardNanos[layer];
            }
            if (s == stages - 1) {
                bs += fs;
                fs = 0;
            }
            f[s] = Math.max(1, Math.round(fs / 1e3));
            b[s] = Math.max(1, Math.round(bs / 1e3));
        }
        return new StageDurations(f, b, 0);
    }

    @Override
    public String toString() {
        StringBuilder text = new StringBuilder("StageProfile[microbatch=" + microbatchExamples + " examples, per layer F/B ms:");
        for (int i = 0; i < forwardNanos.length; i++) {
            text.append(String.format(Locale.ROOT, " %d: %.3f/%.3f", i, forwardNanos[i] / 1e6, backwardNanos[i] / 1e6));
        }
        return text.append(']').toString();
    }
}
