package org.symmem4j.benchmarks;

import org.openjdk.jmh.annotations.Level;
import org.openjdk.jmh.annotations.Param;
import org.openjdk.jmh.annotations.Setup;

/**
 * What the flight recorder costs (issue #36: at most 1 % of a 1 KiB all-reduce): {@link HostAllReduceBenchmark}'s
 * all-reduce (float32 SUM in place, ranks as threads of one JVM, 2 and 4 of them) with each communicator's recorder
 * off ({@code flightRecorderEntries=0}) and on (the default 1024), both in the same run: the recorder-off rows are
 * the baseline. JMH forks a JVM per parameter set, so the property set here reaches only that fork's communicators;
 * fork-to-fork spread is larger than the cost, so compare with several forks and read the error bars. On a machine
 * with at least 4 idle cores (each rank spins on a core of its own; fewer cores measure the scheduler):
 * {@code java -jar benchmarks/target/benchmarks.jar FlightRecorderCost -p bytes=1024 -p algorithm=ONE_SHOT,TWO_SHOT -f 5}.
 * {@code bench/flight-recorder-cost.sh} runs that and prints the on/off ratio per row.
 */
public class FlightRecorderCostBenchmark extends HostAllReduceBenchmark {

    @Param({"0", "1024"})
    public int flightRecorderEntries;

    @Param({"2", "4"})
    public int ranks;

    @Override
    protected int ranks() {
        return ranks;
    }

    @Override
    @Setup(Level.Trial)
    public void setUp() throws InterruptedException {
        System.setProperty("symmem4j.flight.recorder.entries", Integer.toString(flightRecorderEntries));
        super.setUp();
    }
}
