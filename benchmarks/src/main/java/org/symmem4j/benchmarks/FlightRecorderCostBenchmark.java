package org.symmem4j.benchmarks;

import org.openjdk.jmh.annotations.Level;
import org.openjdk.jmh.annotations.Param;
import org.openjdk.jmh.annotations.Setup;

/**
 * What the flight recorder costs: {@link HostAllReduceBenchmark}'s all-reduce (2 ranks as threads,
 * float32 SUM in place) with each communicator's recorder off ({@code 0} entries) and on (the default
 * 1024). JMH forks a JVM per parameter set, so the property set here reaches only that fork's
 * communicators. Run with {@code -p bytes=1024} (the size) and compare the two rows:
 * {@code java -jar benchmarks/target/benchmarks.jar FlightRecorderCost -p bytes=1024 -p algorithm=TWO_SHOT -f 3}.
 */
public class FlightRecorderCostBenchmark extends HostAllReduceBenchmark {

    @Param({"0", "1024"})
    public int flightRecorderEntries;

    @Override
    @Setup(Level.Trial)
    public void setUp() throws InterruptedException {
        System.setProperty("symmem4j.flight.recorder.entries", Integer.toString(flightRecorderEntries));
        super.setUp();
    }
}
