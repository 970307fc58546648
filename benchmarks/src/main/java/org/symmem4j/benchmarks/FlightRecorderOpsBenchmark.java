package org.symmem4j.benchmarks;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.VarHandle;
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
import org.symmem4j.parallel.control.OpDescriptorLayout;
import org.symmem4j.parallel.control.OpDescriptorLayout.Descriptor;
import org.symmem4j.parallel.control.OpDescriptorLayout.Kind;
import org.symmem4j.parallel.control.OpDescriptorLayout.Problem;

/**
 * The flight recorder's own work per collective, alone: the three calls the control plane makes (arrived,
 * started, completed), against a baseline that numbers the collective, fills its descriptor and writes this rank's own
 * descriptor line into its own pad (with the epoch's release store), as the control plane and the synchronizer do with
 * the recorder off. The own-line layout (the default since 2026-11-30) writes that line into its entry instead, so
 * there the recorder's side leaves the pad's write out ({@link FlightRecorder#takesOwnLine}); the other layouts write
 * both, as they do in a collective. Before 2026-11-30 the baseline wrote no pad line (both sides lacked it, so the
 * difference was the same for the layouts of then). {@link FlightRecorderPairedBenchmark}
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

    /** {@link FlightRecorder#takesOwnLine}: the recorder's side writes no pad line. */
    private static final boolean OWN_LINE = FlightRecorder.takesOwnLine();
    private static final VarHandle LONG = ValueLayout.JAVA_LONG.varHandle();

    private FlightRecorder recorder;
    private final Descriptor descriptor = new Descriptor();
    /** Stands for this rank's own signal pad: two 128-byte entry lines, page-aligned as the transports allocate pads. */
    private MemorySegment ownPad;
    private long seq;

    @Setup
    public void setUp() {
        recorder = FlightRecorder.create(0, 2, "bench", entries);
        ownPad = Arena.ofAuto().allocate(4096, 4096);
    }

    /**
     * This rank's own line, as {@code PadSynchronizer.arrive} writes it: into its own pad with the epoch's release
     * store (recorder off, or a layout that copies), or into the recorder's entry without it (own-line, recorder on).
     */
    private void writeOwnLine(Descriptor d, long s, boolean intoEntry) {
        MemorySegment target = intoEntry ? recorder.ownLineSegment() : ownPad;
        long line = intoEntry ? recorder.ownLineOffset(s) : 128 * (s & 1);
        d.write(target, line);
        if (!intoEntry) {
            // release: as arrive() publishes the line (nobody acquires it here: this is the cost of the store alone)
            LONG.setRelease(ownPad, line + OpDescriptorLayout.EPOCH, s + 1);
        }
    }

    /**
     * What the control plane and the synchronizer do per collective with the recorder off: number it, fill its
     * descriptor, write this rank's own line into its own pad.
     */
    @Benchmark
    public Descriptor baseline() {
        long s = seq++;
        Descriptor d = descriptor.set(s, Kind.ALL_REDUCE, DType.FLOAT32.ordinal(), ReduceOp.SUM.ordinal(),
                Algorithm.TWO_SHOT.ordinal(), -1, 256, 1024, 3, 0, 0, Problem.NONE);
        writeOwnLine(d, s, false);
        return d;
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
        writeOwnLine(d, s, OWN_LINE); // own-line: into the entry instead of the pad, as arrive() does
        recorder.begun();
        if (OWN_LINE) {
            recorder.ownLineWritten(d, "all-reduce");
        } else if (!RUNS) {
            recorder.arrived(d, "all-reduce");
        }
        recorder.started(d, "all-reduce");
        recorder.completed(s);
        return d;
    }
}
