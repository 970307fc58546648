package org.symmem4j.benchmarks.dl4j;

import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import org.symmem4j.pipeline.schedule.MachineBound;
import org.symmem4j.pipeline.schedule.StageDurations;

/**
 * A run's pipeline steps against the machine's bound measured between them (ABAB: step i, then the bound's window i,
 * so that the machine's drift hits both alike): each step paired with the window that follows it, the comparison made
 * per pair and the median of the pairs kept, so a slow stretch of the machine slows the step and its bound together.
 *
 * @param boundBubble           the bound's bubble (median over the windows), fraction
 * @param overBoundPoints       median over the pairs of (measured bubble − the pair's bound bubble), in points
 * @param boundExamplesPerSecond the bound's speed (median over the windows)
 * @param speedOverBound        median over the pairs of the bound's step time over the pipeline's (= examples/s over
 *                              the bound's examples/s): target at least 0.8
 * @param pairs                 step/window pairs
 */
record MachineBoundSteps(double boundBubble, double overBoundPoints, double boundExamplesPerSecond,
                         double speedOverBound, int pairs) {

    /**
     * Pairs step {@code i} with bound {@code i}.
     *
     * @param measuredBubbles each timed step's measured bubble (its timeline report's)
     * @param stepNanos       each timed step's wall time ({@code fit()})
     * @param bounds          the bound of the window after each step, its times in microseconds
     * @param examples        examples per step
     * @return the medians
     * @throws IllegalArgumentException when the lengths differ or there is no pair
     */
    static MachineBoundSteps of(double[] measuredBubbles, long[] stepNanos, List<MachineBound> bounds, long examples) {
        int n = bounds.size();
        if (n == 0 || measuredBubbles.length != n || stepNanos.length != n) {
            throw new IllegalArgumentException("machine bound: steps=" + measuredBubbles.length + " step times="
                    + stepNanos.length + " bound windows=" + n + " expected the same count, at least 1 (fix: measure one"
                    + " window after every timed step)");
        }
        double[] bound = new double[n];
        double[] over = new double[n];
        double[] rate = new double[n];
        double[] speed = new double[n];
        for (int i = 0; i < n; i++) {
            MachineBound b = bounds.get(i);
            bound[i] = b.bubbleFraction();
            over[i] = 100 * (measuredBubbles[i] - bound[i]);
            rate[i] = b.examplesPerSecondMicros(examples);
            speed[i] = b.stepTime() * 1e3 / stepNanos[i];
        }
        return new MachineBoundSteps(median(bound), median(over), median(rate), median(speed), n);
    }

    /**
     * One step's points over its window's bound, split by what the simulator can tell apart: {@code passes} = the
     * simulator fed with the step's own stage times and free hand-offs, minus the bound (the stages' passes ran
     * slower, or faster, inside the pipeline than alone on their cores); {@code handoffs} = the same with the step's
     * measured hand-off latency, minus without it; {@code rest} = the measured bubble minus that simulation (the
     * executor, waits on full or empty links beyond the mean latency, and the passes' jitter around their mean). The
     * three add up to the measured bubble minus the bound's.
     *
     * @param passes   points from the stages' pass times in the pipeline against alone
     * @param handoffs points from the hand-off latency
     * @param rest     points the simulation with the step's own times does not explain
     */
    record Excess(double passes, double handoffs, double rest) {

        /**
         * The split of one step's excess.
         *
         * @param measured      the step's measured bubble
         * @param simulated     the simulator's for its stage times and hand-off latency
         * @param simulatedFree the simulator's for its stage times with free hand-offs
         * @param bound         the paired window's bound
         * @return the parts, in points
         */
        static Excess of(double measured, double simulated, double simulatedFree, double bound) {
            return new Excess(100 * (simulatedFree - bound), 100 * (simulated - simulatedFree), 100 * (measured - simulated));
        }

        @Override
        public String toString() {
            return String.format(Locale.ROOT, "%+.1f / %+.1f / %+.1f", passes, handoffs, rest);
        }
    }

    /**
     * Per stage, the pipeline's forward + backward over the independent job's on the same core, ";"-separated: above 1
     * where running inside the pipeline slows a stage's passes (caches, a core that idles between passes).
     */
    static String passRatio(StageDurations inPipeline, StageDurations independent) {
        StringBuilder s = new StringBuilder();
        for (int stage = 0; stage < inPipeline.stageCount(); stage++) {
            s.append(stage == 0 ? "" : ";").append(String.format(Locale.ROOT, "%.2f",
                    (double) inPipeline.total(stage) / independent.total(stage)));
        }
        return s.toString();
    }

    @Override
    public String toString() {
        return String.format(Locale.ROOT, "bubble %.1f %%, the measured %+.1f points over it, %.0f examples/s, speed /"
                + " bound %.2f (medians of %d step/window pairs)", 100 * boundBubble, overBoundPoints,
                boundExamplesPerSecond, speedOverBound, pairs);
    }

    private static double median(double[] values) {
        double[] sorted = values.clone();
        Arrays.sort(sorted);
        int n = sorted.length;
        return n % 2 == 1 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
    }
}
