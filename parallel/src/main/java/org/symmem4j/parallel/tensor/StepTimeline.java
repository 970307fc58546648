package org.symmem4j.parallel.tensor;

import java.lang.foreign.MemorySegment;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import org.symmem4j.parallel.DeviceCommunicator;
import org.symmem4j.parallel.WorkClock;
import org.symmem4j.parallel.tensor.ShardedStepPlan.Action;
import org.symmem4j.parallel.tensor.ShardedStepPlan.Kind;
import org.symmem4j.parallel.tensor.ShardedStepPlan.Stream;

/**
 * Where one step of {@link FullyShardedMlp} spends its time on the GPU, per action of its {@link ShardedStepPlan}: a CUDA
 * event is recorded on the action's stream before and after it (one {@link WorkClock} over the two streams of the rank,
 * so every time is on one time line), and {@link #read()} returns the last recorded step's. Recording adds event
 * records to the streams, never a wait: the step's order and overlap are the ones it has without it. From
 * {@link FullyShardedMlp#recordTimeline()}; one thread (the rank's) uses it.
 *
 * <pre>
 *  head: from the step's start to the first GEMM's (the first gather, nothing to hide it)
 *  tail: from the end of the last GEMM to the end of the step's last action (what is left of the
 *        reductions and Adam once the compute stream is done)
 * </pre>
 */
public final class StepTimeline implements AutoCloseable {

    /**
     * One action's time.
     *
     * @param action      the plan's action
     * @param startMillis when its stream reached it, from the step's start on the compute stream
     * @param endMillis   when its stream was past it
     */
    public record Span(Action action, double startMillis, double endMillis) {

        /** {@return how long it ran} */
        public double millis() {
            return endMillis - startMillis;
        }
    }

    /**
     * One step's timeline.
     *
     * @param spans every action's span (waits left out), in enqueue order
     */
    public record Timeline(List<Span> spans) {

        /** Copies. */
        public Timeline {
            spans = List.copyOf(spans);
        }

        /** {@return the end of the step's last action} */
        public double stepMillis() {
            return spans.stream().mapToDouble(Span::endMillis).max().orElse(0);
        }

        /** {@return the start of the first GEMM (forward of layer 0): the exposed first gather} */
        public double headMillis() {
            return spans.stream().filter(s -> s.action().stream() == Stream.COMPUTE).mapToDouble(Span::startMillis).min()
                    .orElse(0);
        }

        /** {@return from the end of the last GEMM to the end of the step: the exposed reductions and Adam} */
        public double tailMillis() {
            double lastGemm = spans.stream().filter(s -> s.action().stream() == Stream.COMPUTE).mapToDouble(Span::endMillis)
                    .max().orElse(0);
            return Math.max(0, stepMillis() - lastGemm);
        }

        /**
         * {@return the summed time of the actions on {@code stream} (overlapping ones of one stream cannot: one queue)}
         *
         * @param stream a stream
         */
        public double busyMillis(Stream stream) {
            return spans.stream().filter(s -> s.action().stream() == stream).mapToDouble(Span::millis).sum();
        }

        /** {@return the actions that end after the last GEMM, with their times: what the tail is made of} */
        public List<Span> tail() {
            double lastGemm = stepMillis() - tailMillis();
            return spans.stream().filter(s -> s.endMillis() > lastGemm && s.action().stream() == Stream.COMM).toList();
        }

        /** {@return one line: step, head, tail and its actions, busy time per stream} */
        public String summary() {
            StringBuilder b = new StringBuilder(String.format(Locale.ROOT,
                    "step %.3f ms, head %.3f ms (until the first GEMM), tail %.3f ms (after the last GEMM:", stepMillis(),
                    headMillis(), tailMillis()));
            for (Span s : tail()) {
                b.append(String.format(Locale.ROOT, " %s %.3f", s.action(), s.millis()));
            }
            b.append(String.format(Locale.ROOT, "), compute busy %.3f ms, comm busy %.3f ms", busyMillis(Stream.COMPUTE),
                    busyMillis(Stream.COMM)));
            return b.toString();
        }

        /** {@return one line per action: stream, action, start, end, duration} */
        public String table() {
            StringBuilder b = new StringBuilder();
            for (Span s : spans) {
                b.append(String.format(Locale.ROOT, "  %-7s %-10s %9.3f %9.3f %8.3f%n", s.action().stream(), s.action(),
                        s.startMillis(), s.endMillis(), s.millis()));
            }
            return b.toString();
        }
    }

    private final DeviceCommunicator compute;
    private final DeviceCommunicator comm;
    private final ShardedStepPlan plan;
    private final WorkClock clock;
    /** Per action of the plan, its marks this round (-1 for a wait). */
    private final long[] starts;
    private final long[] ends;
    private long origin = -1;
    private boolean closed;

    /** Creates the events (on the compute stream's context): the streams must not wait on a peer now. */
    StepTimeline(DeviceCommunicator compute, DeviceCommunicator comm, ShardedStepPlan plan) {
        this.compute = compute;
        this.comm = comm;
        this.plan = plan;
        int n = plan.actions().size();
        this.starts = new long[n];
        this.ends = new long[n];
        this.clock = compute.clock(1 + 2 * n);
    }

    /** A step starts: its first mark, on the compute stream, is the time line's zero. */
    void restart() {
        clock.restart();
        origin = clock.mark();
        java.util.Arrays.fill(starts, -1);
        java.util.Arrays.fill(ends, -1);
    }

    /** Before action i is enqueued. */
    void before(int i, Action x) {
        if (!isWait(x)) {
            starts[i] = clock.mark(streamOf(x));
        }
    }

    /** After action i was enqueued. */
    void after(int i, Action x) {
        if (!isWait(x)) {
            ends[i] = clock.mark(streamOf(x));
        }
    }

    private static boolean isWait(Action x) {
        return x.kind() == Kind.COMPUTE_WAITS_COMM || x.kind() == Kind.COMM_WAITS_COMPUTE;
    }

    private MemorySegment streamOf(Action x) {
        return x.stream() == Stream.COMPUTE ? compute.stream() : comm.stream();
    }

    /**
     * The last recorded step's timeline; waits for both streams.
     *
     * @return the timeline
     * @throws IllegalStateException when closed, or no step was recorded since it was made
     */
    public Timeline read() {
        if (closed || origin < 0) {
            throw new IllegalStateException("step timeline " + (closed ? "closed" : "without a recorded step") + " (fix: read"
                    + " it after a step() of the model, before closing it)");
        }
        compute.synchronize();
        comm.synchronize();
        long zero = clock.nanos(origin);
        List<Span> spans = new ArrayList<>();
        for (int i = 0; i < starts.length; i++) {
            if (starts[i] >= 0) {
                spans.add(new Span(plan.actions().get(i), (clock.nanos(starts[i]) - zero) / 1e6,
                        (clock.nanos(ends[i]) - zero) / 1e6));
            }
        }
        return new Timeline(spans);
    }

    /** {@return whether it was closed (the model records no more into it)} */
    public boolean closed() {
        return closed;
    }

    /** Stops the recording and frees the events, once the steps recorded have run (waits for both streams). Idempotent. */
    @Override
    public void close() {
        if (!closed) {
            closed = true;
            compute.synchronize();
            comm.synchronize();
            clock.close();
        }
    }
}
