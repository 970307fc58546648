package org.symmem4j.benchmarks.dl4j;

import java.util.stream.DoubleStream;

/** The statistics the DL4J benchmarks report over their repetitions. */
final class Stats {

    private Stats() {
    }

    /**
     * The median: the middle value, or the mean of the two middle values of an even count.
     *
     * @param values the values, in any order
     * @return the median, NaN when there are none
     */
    static double median(DoubleStream values) {
        double[] v = values.sorted().toArray();
        if (v.length == 0) {
            return Double.NaN;
        }
        return v.length % 2 == 1 ? v[v.length / 2] : (v[v.length / 2 - 1] + v[v.length / 2]) / 2;
    }
}
