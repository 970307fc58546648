package org.symmem4j.pipeline.schedule;

import java.util.Objects;

/**
 * The bubble and step time a schedule can reach on a given machine: the {@link ScheduleSimulator} fed with each
 * stage's pass times measured on its rank's own CPU while every rank's CPU ran its stages' work at once and
 * independently (no hand-offs, no waiting: N independent jobs on N cores, as the data-parallel scaling bench measures
 * the machine's bound for N workers), with free hand-offs, then each rank's optimizer step after its last pass.
 *
 * <p>Three bubbles describe a pipeline step, and they differ in what they take from the machine:
 * <ul>
 *   <li><b>ideal</b>: the schedule with equal stages, backward = 2 × forward, free hand-offs; nothing measured;</li>
 *   <li><b>simulated with the measured stage times</b>: the stages' mean pass times and hand-off latency measured in
 *       the pipeline's own step ({@code TimelineReport.simulatePerStage}): what the schedule makes of the step the
 *       pipeline ran, so it absorbs every slowdown the pipeline itself caused;</li>
 *   <li><b>the machine's bound</b> (this class): the pass times each rank's CPU delivers to its stages' work when
 *       nothing waits on anything, measured in the same run, pinned where the ranks are pinned: what the schedule
 *       can reach on these cores with this split. What the pipeline adds over it (hand-offs, waiting for a slow link,
 *       passes slowed by running inside the pipeline, the executor) is the pipeline's own.</li>
 * </ul>
 * The bound's step ends when the last rank ends its optimizer step, begun right after that rank's last pass (as the
 * executor runs it); its speed is the step's examples over that time.
 *
 * @param simulated        the dry run with the per-core times (makespan and bubble over the passes' window)
 * @param stepTime         when the last rank's optimizer step ends, in the durations' unit
 * @param perCore          the durations the dry run used (their communication latency 0)
 */
public record MachineBound(SimulationResult.Completed simulated, long stepTime, StageDurations perCore) {

    /**
     * The bound for {@code schedule} with each stage's per-core times.
     *
     * @param schedule       the schedule the pipeline runs
     * @param shape          the pipeline it runs on
     * @param perCore        each stage's forward, backward (and weight-gradient share) measured on its rank's CPU; its
     *                       communication latency is ignored: the bound's hand-offs are free
     * @param optimizerTimes per rank, its optimizer step (all its stages'), in the same unit, each {@code >= 0}
     * @return the bound
     * @throws IllegalArgumentException when the schedule is invalid, the durations are for another stage count, or
     *                                  {@code optimizerTimes} has another length than the ranks or a negative entry
     * @throws IllegalStateException    when the schedule deadlocks
     */
    public static MachineBound of(Schedule schedule, PipelineShape shape, StageDurations perCore, long[] optimizerTimes) {
        Objects.requireNonNull(perCore, "perCore");
        Objects.requireNonNull(optimizerTimes, "optimizerTimes");
        if (optimizerTimes.length != shape.ranks()) {
            throw new IllegalArgumentException("machine bound: optimizerTimes has " + optimizerTimes.length
                    + " ranks expected=" + shape.ranks() + " (" + shape + "; fix: pass one optimizer time per rank, 0"
                    + " where it is not measured)");
        }
        for (int r = 0; r < optimizerTimes.length; r++) {
            if (optimizerTimes[r] < 0) {
                throw new IllegalArgumentException("machine bound: optimizerTimes[" + r + "]=" + optimizerTimes[r]
                        + " expected >= 0 (fix: pass the measured optimizer step, or 0)");
            }
        }
        // free hand-offs: what the pipeline spends passing messages is its own, not the machine's
        StageDurations free = new StageDurations(perCore.forward(), perCore.backward(), perCore.weightGradient(), 0);
        SimulationResult.Completed run = ScheduleSimulator.simulate(schedule, shape, free).requireCompleted();
        long step = 0;
        for (int rank = 0; rank < shape.ranks(); rank++) {
            int last = schedule.actions(rank).size() - 1;
            Action action = schedule.actions(rank).get(last);
            long end = run.startOf(rank, last) + free.of(action.type(), action.stage());
            step = Math.max(step, end + optimizerTimes[rank]);
        }
        return new MachineBound(run, step, free);
    }

    /**
     * The bound's bubble: the idle share of the ranks over the passes' window, as {@link
     * SimulationResult.Completed#bubbleFraction()} and the measured bubble count it.
     *
     * @return the bubble fraction, in [0, 1]
     */
    public double bubbleFraction() {
        return simulated.bubbleFraction();
    }

    /**
     * The bound's speed for steps of {@code examples} examples, with the durations in microseconds.
     *
     * @param examples examples per step
     * @return examples per second
     */
    public double examplesPerSecondMicros(long examples) {
        return examples / (stepTime / 1e6);
    }
}
