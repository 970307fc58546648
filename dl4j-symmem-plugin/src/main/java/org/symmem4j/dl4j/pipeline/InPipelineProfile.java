package org.symmem4j.dl4j.pipeline;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.Objects;
import java.util.function.IntPredicate;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.symmem4j.pipeline.schedule.PipelineShape;
import org.symmem4j.pipeline.schedule.Schedule;
import org.symmem4j.pipeline.schedule.StageDurations;
import org.symmem4j.pipeline.schedule.StageSplitSearch;

/**
 * Stage times measured inside the pipeline, and the split they call for: what a re-balance after a few warm steps
 * needs, where {@link StageProfile} times each layer alone before training.
 *
 * <p>Why: alone, on one thread, equal layers take equal times; inside the pipeline a rank's passes cost more, and
 * unevenly (on 32 pinned cores each stage's pass took 1.12-1.17x its profile and the ranks' busy times spread
 * 1.25x: caches and memory traffic shared with the other ranks, and what each position in the schedule holds). The
 * executor times every action ({@link PipelineStepReport#timelines()}); this class takes each stage's median forward,
 * backward (input + weight gradient under ZB-H1) and weight-gradient share over the given steps and relates them to
 * what the alone profile predicts for the same layers: one factor per stage for the forward and one for the backward
 * (the output stage, whose forward runs inside its backward, one factor for both).
 *
 * <p>The model the new split is chosen with ({@link #stageDurationsMicros(int[])}): a stage's in-pipeline time is the
 * alone profile's time of the layers it would hold, times the factor measured at its position (stage s runs on rank
 * {@code s % ranks}, pinned to the same CPU, with the same place in the schedule). The split is then chosen by the
 * same rules as a split by measured times ({@link PipelineStageSplit#byProfile}): the split whose slowest stage is
 * least (exactly, over every split whose stages start where they may: tensor-parallel blocks and residual blocks stay
 * in one stage), then the move of consecutive boundaries the simulator finds faster for the trainer's schedule
 * ({@link StageSplitSearch}); the split that ran is kept unless the simulator, fed these times, finds another strictly
 * faster. {@link #layerTimes()} offers the other attribution: every layer its alone time times the factor of the stage
 * it ran in, as a {@link StageProfile} ({@link PipelineParallelTrainerBuilder#splitBy(StageProfile)}): right where
 * the extra cost belongs to the layers (one layer that thrashes the caches), wrong where it belongs to the rank.
 *
 * <p>Use: train a few steps with a split by measured times, collect the step reports, then build the trainer for the
 * real run with {@link PipelineParallelTrainerBuilder#splitBy(InPipelineProfile)}. To re-balance between steps in
 * thread mode, {@code copyParametersTo(network)} (parameters, updater state, counters), close, and build again from
 * the network with the new split: training goes on bitwise as if it had run with that split from the start.
 */
public final class InPipelineProfile {

    private final StageProfile alone;
    /** The split the steps ran with: stage s's first layer, the layer count last. */
    private final int[] ranWith;
    private final int ranks;
    /** Per stage, the steps' median durations, microseconds (the output stage's forward folded into its backward). */
    private final StageDurations measured;
    private final double[] forwardFactor;
    private final double[] backwardFactor;
    /** Per stage, the weight-gradient part of the measured backward (0.5 where the backward did not split). */
    private final double[] weightShare;

    private InPipelineProfile(StageProfile alone, int[] ranWith, int ranks, StageDurations measured) {
        this.alone = alone;
        this.ranWith = ranWith;
        this.ranks = ranks;
        this.measured = measured;
        int stages = ranWith.length - 1;
        StageDurations predicted = alone.stageDurationsMicros(ranWith);
        forwardFactor = new double[stages];
        backwardFactor = new double[stages];
        weightShare = new double[stages];
        for (int s = 0; s < stages; s++) {
            if (s == stages - 1) {
                // the output stage: its forward runs inside its backward, as the profile's durations fold it
                forwardFactor[s] = (double) measured.total(s) / predicted.total(s);
                backwardFactor[s] = forwardFactor[s];
            } else {
                forwardFactor[s] = (double) measured.forward()[s] / predicted.forward()[s];
                backwardFactor[s] = (double) measured.backward()[s] / predicted.backward()[s];
            }
            weightShare[s] = (double) measured.weightGradient()[s] / measured.backward()[s];
        }
    }

    /**
     * The in-pipeline times of a trainer's steps: its split and its profile (it must have been split by measured
     * times, so that each stage's time can be related to its layers').
     *
     * @param trainer the trainer that ran the steps (open or closed)
     * @param steps   its step reports (e.g. from a {@code stepListener}), warm steps only, at least 1
     * @return the times
     * @throws IllegalArgumentException when the trainer has no profile, or a step has another rank count
     */
    public static InPipelineProfile of(PipelineParallelTrainer trainer, List<PipelineStepReport> steps) {
        Objects.requireNonNull(trainer, "trainer");
        if (trainer.profile() == null) {
            throw new IllegalArgumentException("in-pipeline times of a trainer without a profile: expected a trainer split"
                    + " by measured times, whose layer times relate each stage's time to its layers (fix: build the"
                    + " profiling trainer with splitByMeasuredTimes(sample) or splitBy(StageProfile.measure(...)))");
        }
        return of(trainer.profile(), trainer.split(), trainer.shape(), steps);
    }

    /**
     * The in-pipeline times of steps that ran {@code ranWith} on {@code shape}.
     *
     * @param alone   the layers' times measured alone ({@link StageProfile#measure}, or the trainer's profile)
     * @param ranWith the split the steps ran with
     * @param shape   the pipeline they ran on
     * @param steps   the step reports, at least 1
     * @return the times
     * @throws IllegalArgumentException when the profile and the split differ in layers, the shape in stages, no step is
     *                                  given, or a step has another rank count than the shape
     */
    public static InPipelineProfile of(StageProfile alone, PipelineStageSplit ranWith, PipelineShape shape,
                                       List<PipelineStepReport> steps) {
        Objects.requireNonNull(steps, "steps");
        List<StageDurations> perStep = new ArrayList<>();
        for (PipelineStepReport step : steps) {
            if (step.timelines().size() != shape.ranks()) {
                throw new IllegalArgumentException("step " + step.step() + " has " + step.timelines().size()
                        + " rank timelines expected=" + shape.ranks() + " (fix: pass the reports of the trainer that ran"
                        + " this split, in thread mode every rank's)");
            }
            perStep.add(step.timelineReport().stageDurationsMicros(shape));
        }
        return ofDurations(alone, ranWith, shape, perStep);
    }

    /**
     * As {@link #of(StageProfile, PipelineStageSplit, PipelineShape, List)} from each step's per-stage durations
     * ({@code TimelineReport.stageDurationsMicros}, microseconds): each stage's median over the steps is kept.
     *
     * @param alone   the layers' times measured alone
     * @param ranWith the split the steps ran with
     * @param shape   the pipeline they ran on
     * @param steps   per step, every stage's measured durations, at least 1
     * @return the times
     * @throws IllegalArgumentException as {@link #of(StageProfile, PipelineStageSplit, PipelineShape, List)}
     */
    public static InPipelineProfile ofDurations(StageProfile alone, PipelineStageSplit ranWith, PipelineShape shape,
                                                List<StageDurations> steps) {
        Objects.requireNonNull(alone, "alone");
        Objects.requireNonNull(ranWith, "ranWith");
        Objects.requireNonNull(shape, "shape");
        Objects.requireNonNull(steps, "steps");
        int layers = alone.layerNanos().length;
        if (ranWith.layerCount() != layers) {
            throw new IllegalArgumentException("the split has " + ranWith.layerCount() + " layers but the profile " + layers
                    + " (fix: pass the profile of the network the split was made from, e.g. trainer.profile())");
        }
        if (ranWith.stageCount() != shape.stageCount()) {
            throw new IllegalArgumentException("the split has " + ranWith.stageCount() + " stages but the pipeline "
                    + shape.stageCount() + " (fix: pass the trainer's split() and shape() together)");
        }
        if (steps.isEmpty()) {
            throw new IllegalArgumentException("no steps given: expected at least 1 warm step's stage times (fix: collect"
                    + " the step reports of a few steps after the first, e.g. with stepListener(...))");
        }
        int stages = shape.stageCount();
        long[] f = new long[stages];
        long[] b = new long[stages];
        long[] w = new long[stages];
        long[] latency = new long[steps.size()];
        for (int s = 0; s < stages; s++) {
            long[] fs = new long[steps.size()];
            long[] bs = new long[steps.size()];
            long[] ws = new long[steps.size()];
            for (int i = 0; i < steps.size(); i++) {
                StageDurations d = steps.get(i);
                if (d.stageCount() != stages) {
                    throw new IllegalArgumentException("step " + i + " has " + d.stageCount() + " stages expected="
                            + stages + " (fix: pass the durations of steps on this pipeline's shape)");
                }
                boolean last = s == stages - 1;
                // the output stage's forward folded into its backward, as StageProfile's durations do
                fs[i] = last ? 1 : d.forward()[s];
                bs[i] = last ? d.forward()[s] + d.backward()[s] : d.backward()[s];
                ws[i] = d.weightGradient()[s];
                latency[i] = d.communicationLatency();
            }
            f[s] = median(fs);
            b[s] = median(bs);
            w[s] = Math.min(b[s] - 1, median(ws));
        }
        int[] starts = new int[stages + 1];
        for (int s = 0; s < stages; s++) {
            starts[s] = ranWith.firstLayer(s);
        }
        starts[stages] = layers;
        return new InPipelineProfile(alone, starts, shape.ranks(), new StageDurations(f, b, w, median(latency)));
    }

    /**
     * The split these times call for, for {@code schedule} on {@code shape} (see the class comment).
     *
     * @param network  the network the profile and the split that ran are of
     * @param schedule the schedule that will run the new split
     * @param shape    its pipeline: the stage count that ran
     * @return the split
     * @throws IllegalArgumentException when the network, the shape or the schedule do not fit the times
     */
    public PipelineStageSplit split(MultiLayerNetwork network, Schedule schedule, PipelineShape shape) {
        return split(network, schedule, shape, layer -> true);
    }

    /** As {@link #split(MultiLayerNetwork, Schedule, PipelineShape)}, with stages starting only where {@code canStart} says. */
    PipelineStageSplit split(MultiLayerNetwork network, Schedule schedule, PipelineShape shape, IntPredicate canStart) {
        Objects.requireNonNull(network, "network");
        int stages = ranWith.length - 1;
        if (shape.stageCount() != stages || shape.ranks() != ranks) {
            throw new IllegalArgumentException("in-pipeline times of " + stages + " stages on " + ranks + " ranks, a"
                    + " pipeline of " + shape.stageCount() + " stages on " + shape.ranks() + " ranks: expected the same"
                    + " (the times are per stage position; fix: measure with the ranks and stagesPerRank of the run)");
        }
        if (PipelineStageSplit.maxStages(network) != ranWith[stages]) {
            throw new IllegalArgumentException("in-pipeline times of " + ranWith[stages] + " layers, a network of "
                    + PipelineStageSplit.maxStages(network) + " (fix: re-balance the network the times were measured on)");
        }
        int[] chosen = StageSplitSearch.search(balancedStarts(canStart), canStart, this::stageDurationsMicros, schedule,
                shape);
        if (startsAllowed(ranWith, canStart) && StageSplitSearch.makespan(ranWith, this::stageDurationsMicros, schedule,
                shape) <= StageSplitSearch.makespan(chosen, this::stageDurationsMicros, schedule, shape)) {
            chosen = ranWith; // no move unless the simulator finds one strictly faster
        }
        return PipelineStageSplit.atBoundaries(network, Arrays.copyOfRange(chosen, 1, stages));
    }

    /**
     * The stages' in-pipeline pass times, microseconds, if they held the layers {@code starts} gives: the alone
     * profile's times of those layers times the factors measured at each stage position, each stage's measured
     * weight-gradient share and hand-off latency.
     *
     * @param starts stage s runs layers {@code [starts[s], starts[s + 1])}, {@code starts[0] == 0}, the layer count last
     * @return per stage, forward and backward microseconds (at least 1)
     * @throws IllegalArgumentException when {@code starts} has another stage or layer count
     */
    public StageDurations stageDurationsMicros(int[] starts) {
        int stages = ranWith.length - 1;
        if (starts.length != stages + 1 || starts[0] != 0 || starts[stages] != ranWith[stages]) {
            throw new IllegalArgumentException("stage starts " + Arrays.toString(starts) + " expected " + (stages + 1)
                    + " entries from 0 to " + ranWith[stages] + " (fix: pass a split of the measured network into its "
                    + stages + " stages)");
        }
        StageDurations predicted = alone.stageDurationsMicros(starts);
        long[] f = new long[stages];
        long[] b = new long[stages];
        long[] w = new long[stages];
        for (int s = 0; s < stages; s++) {
            f[s] = Math.max(1, Math.round(predicted.forward()[s] * forwardFactor[s]));
            b[s] = Math.max(1, Math.round(predicted.backward()[s] * backwardFactor[s]));
            w[s] = Math.min(b[s] - 1, Math.round(b[s] * weightShare[s]));
        }
        return new StageDurations(f, b, w, measured.communicationLatency());
    }

    /**
     * As {@link #stageDurationsMicros(int[])} for the stages of {@code split}.
     *
     * @param split a split of the measured network into the measured stage count
     * @return per stage, forward and backward microseconds (at least 1)
     * @throws IllegalArgumentException when the split has another stage or layer count
     */
    public StageDurations stageDurationsMicros(PipelineStageSplit split) {
        int[] starts = new int[split.stageCount() + 1];
        for (int s = 0; s < split.stageCount(); s++) {
            starts[s] = split.firstLayer(s);
        }
        starts[split.stageCount()] = split.layerCount();
        return stageDurationsMicros(starts);
    }

    /**
     * The exact split whose slowest stage, by {@link #stageDurationsMicros}'s model, is least (forward plus backward,
     * stages starting where {@code canStart} says); among equal ones the first found, the earliest boundaries.
     */
    int[] balancedStarts(IntPredicate canStart) {
        long[] fl = alone.forwardNanos();
        long[] bl = alone.backwardNanos();
        int layers = fl.length;
        int stages = ranWith.length - 1;
        double[] pf = new double[layers + 1];
        double[] pb = new double[layers + 1];
        for (int i = 0; i < layers; i++) {
            pf[i + 1] = pf[i] + fl[i];
            pb[i + 1] = pb[i] + bl[i];
        }
        // best[s][j]: the least largest stage cost for layers [0, j) in stages 0..s; from[s][j]: stage s's start
        double[][] best = new double[stages][layers + 1];
        int[][] from = new int[stages][layers + 1];
        for (double[] row : best) {
            Arrays.fill(row, Double.POSITIVE_INFINITY);
        }
        for (int j = 1; j <= layers; j++) {
            best[0][j] = cost(0, 0, j, pf, pb);
        }
        for (int s = 1; s < stages; s++) {
            for (int j = s + 1; j <= layers; j++) {
                for (int i = s; i < j; i++) {
                    if (!canStart.test(i) || best[s - 1][i] == Double.POSITIVE_INFINITY) {
                        continue;
                    }
                    double c = Math.max(best[s - 1][i], cost(s, i, j, pf, pb));
                    if (c < best[s][j]) {
                        best[s][j] = c;
                        from[s][j] = i;
                    }
                }
            }
        }
        if (best[stages - 1][layers] == Double.POSITIVE_INFINITY) {
            throw new IllegalArgumentException("no split of " + layers + " layers into " + stages + " stages starts only"
                    + " where stages may start (tensor-parallel and residual blocks stay in one stage); fix: use fewer"
                    + " stages");
        }
        int[] starts = new int[stages + 1];
        starts[stages] = layers;
        for (int s = stages - 1; s > 0; s--) {
            starts[s] = from[s][starts[s + 1]];
        }
        return starts;
    }

    /** Stage s's cost holding layers [i, j): its forward and backward at its position's factors. */
    private double cost(int s, int i, int j, double[] pf, double[] pb) {
        return forwardFactor[s] * (pf[j] - pf[i]) + backwardFactor[s] * (pb[j] - pb[i]);
    }

    private static boolean startsAllowed(int[] starts, IntPredicate canStart) {
        for (int s = 1; s < starts.length - 1; s++) {
            if (!canStart.test(starts[s])) {
                return false;
            }
        }
        return true;
    }

    /**
     * Every layer's time as it ran in the pipeline: its alone time times the factor of the stage it ran in (forward and
     * backward apart; the output stage's one factor for both). The attribution that moves a stage's extra cost with its
     * layers; {@link PipelineParallelTrainerBuilder#splitBy(StageProfile)} splits by it.
     *
     * @return per layer, forward and backward nanoseconds, for the profile's microbatch size
     */
    public StageProfile layerTimes() {
        long[] f = alone.forwardNanos();
        long[] b = alone.backwardNanos();
        for (int s = 0; s < ranWith.length - 1; s++) {
            for (int layer = ranWith[s]; layer < ranWith[s + 1]; layer++) {
                f[layer] = Math.round(f[layer] * forwardFactor[s]);
                b[layer] = Math.round(b[layer] * backwardFactor[s]);
            }
        }
        return new StageProfile(f, b, alone.microbatchExamples());
    }

    /**
     * {@return per stage, its measured forward plus backward over the alone profile's for the same layers (above 1:
     * the pipeline made it slower)}
     */
    public double[] stageFactors() {
        StageDurations predicted = alone.stageDurationsMicros(ranWith);
        double[] factors = new double[ranWith.length - 1];
        for (int s = 0; s < factors.length; s++) {
            factors[s] = (double) measured.total(s) / predicted.total(s);
        }
        return factors;
    }

    /** {@return the stages' median in-pipeline durations, microseconds, the output stage's forward in its backward} */
    public StageDurations measuredMicros() {
        return measured;
    }

    /** {@return the split the steps ran with: each stage's first layer, then the layer count} */
    public int[] ranWithStarts() {
        return ranWith.clone();
    }

    /** {@return the layers' times measured alone that the stage factors relate to} */
    public StageProfile aloneProfile() {
        return alone;
    }

    private static long median(long[] values) {
        long[] sorted = values.clone();
        Arrays.sort(sorted);
        return sorted[sorted.length / 2];
    }

    @Override
    public String toString() {
        StringBuilder text = new StringBuilder("InPipelineProfile[ran with starts " + Arrays.toString(ranWith)
                + ", per stage measured F/B ms and factor over the profile:");
        double[] factors = stageFactors();
        for (int s = 0; s < factors.length; s++) {
            text.append(String.format(Locale.ROOT, " %d: %.2f/%.2f x%.3f", s, measured.forward()[s] / 1e3,
                    measured.backward()[s] / 1e3, factors[s]));
        }
        return text.append(']').toString();
    }
}
