package org.symmem4j.benchmarks;

import java.util.concurrent.TimeUnit;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Fork;
import org.openjdk.jmh.annotations.Measurement;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Param;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.Warmup;
import org.symmem4j.parallel.Algorithm;
import org.symmem4j.parallel.Configuration;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.ReduceOp;
import org.symmem4j.parallel.control.FlightRecorder;
import org.symmem4j.parallel.control.OpDescriptorLayout.Descriptor;
import org.symmem4j.parallel.control.OpDescriptorLayout.Kind;
import org.symmem4j.parallel.control.OpDescriptorLayout.Problem;

/**
 * The flight recorder's own work per collective, alone: the three calls the control plane makes (arrived,
 * started, completed), against a baseline that numbers the collective and fills its descriptor as the
 * control plane does with the recorder off. {@link FlightRecorderPairedBenchmark}
 * measures the same cost inside a real all-reduce, recorder on and off in one JVM; this one bounds it:
 * {@link FlightRecorderCostBench} runs both and divides this one's difference by the all-reduce's time.
 */
@BenchmarkMode(Mode.AverageTime)
@OutputTimeUnit(TimeUnit.NANOSECONDS)
@Warmup(iterations = 3, time = 1)
@Measurement(iterations = 5, time = 1)
@Fork(value = 2, jvmArgsAppend = {"--enable-native-access=ALL-UNNAMED"})
@State(Scope.Thread)
public class FlightRecorderOpsBenchmark {

    /** The ring's entries (FlightRecorderCostBench passes its {@code --entries}). */
    @Param({"1024"})
    public int entries;

    /** {@link Configuration#FLIGHT_RECORDER_RUNS}, as the recorder reads it (once per JVM). */
    private static final boolean RUNS = Configuration.FLIGHT_RECORDER_RUNS.get();

    private FlightRecorder recorder;
    private final Descriptor descriptor = new Descriptor();
    private long seq;

    @Setup
    public void setUp() {
        recorder = FlightRecorder.create(0, 2, "bench", entries);
    }

    /** What the control plane does per collective with or without a recorder: number it and fill its descriptor. */
    @Benchmark
    public Descriptor baseline() {
        long s = seq++;
        return descriptor.set(s, Kind.ALL_REDUCE, DType.FLOAT32.ordinal(), ReduceOp.SUM.ordinal(),
                Algorithm.TWO_SHOT.ordinal(), -1, 256, 1024, 3, 0, 0, Problem.NONE);
    }

    /**
     * The same and the recorder's calls, in the control plane's order: the difference is what the recorder adds (the
     * run-length layout, {@code symmem4j.flight.recorder.runs}, writes nothing at arrival and extends one run here).
     */
    @Benchmark
    public Descriptor recordOneCollective() {
        long s = seq++;
        Descriptor d = descriptor.set(s, Kind.ALL_REDUCE, DType.FLOAT32.ordinal(), ReduceOp.SUM.ordinal(),
                Algorithm.TWO_SHOT.ordinal(), -1, 256, 1024, 3, 0, 0, Problem.NONE);
        recorder.begun();
        if (!RUNS) {
            recorder.arrived(d, "all-reduce");
        }
        recorder.started(d, "all-reduce");
        recorder.completed(s);
        return d;
    }
}
