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
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.ReduceOp;
import org.symmem4j.parallel.control.FlightRecorder;
import org.symmem4j.parallel.control.OpDescriptorLayout;
import org.symmem4j.parallel.control.OpDescriptorLayout.Descriptor;
import org.symmem4j.parallel.control.OpDescriptorLayout.Kind;
import org.symmem4j.parallel.control.OpDescriptorLayout.Problem;

/**
 * The flight recorder's own work per collective, alone: the calls the control plane and the synchronizer make (the
 * entry's name word beside the line at arrival, the completion count at return), against a baseline that numbers the collective, fills its
 * descriptor and writes this rank's own descriptor line into its own pad (with the epoch's release store), as the
 * control plane and the synchronizer do with the recorder off. With the recorder on that line goes into the
 * recorder's entry instead, without the release store, so the recorder's side writes it there and not into the pad.
 * {@link FlightRecorderPairedBenchmark} measures the same cost inside a real all-reduce, recorder on and off in one
 * JVM; this one bounds it: {@link FlightRecorderCostBench} runs both and divides this one's difference by the
 * all-reduce's time.
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
     * store (recorder off), or into the recorder's entry without it (recorder on).
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
     * The same and the recorder's calls, in the control plane's order: the difference is what the recorder adds.
     */
    @Benchmark
    public Descriptor recordOneCollective() {
        long s = seq++;
        Descriptor d = descriptor.set(s, Kind.ALL_REDUCE, DType.FLOAT32.ordinal(), ReduceOp.SUM.ordinal(),
                Algorithm.TWO_SHOT.ordinal(), -1, 256, 1024, 3, 0, 0, Problem.NONE);
        writeOwnLine(d, s, true); // into the entry instead of the pad, as arrive() does with the recorder on
        recorder.ownLineWritten(d, "all-reduce");
        recorder.completed(s);
        return d;
    }
}
