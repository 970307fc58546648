package org.symmem4j.gradsync;

import io.micrometer.core.instrument.Counter;
import io.micrometer.core.instrument.DistributionSummary;
import io.micrometer.core.instrument.Gauge;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.Tag;
import io.micrometer.core.instrument.Tags;
import io.micrometer.core.instrument.Timer;
import io.micrometer.core.instrument.binder.BaseUnits;
import io.micrometer.core.instrument.binder.MeterBinder;
import java.time.Duration;
import java.util.Arrays;
import java.util.EnumMap;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReferenceArray;
import org.symmem4j.parallel.Algorithm;
import org.symmem4j.parallel.BuildInfo;

/**
 * Gradient-sync metrics as a Micrometer {@link MeterBinder}: the caller passes its registries (no
 * global registry is ever created); it may bind to several. Until bound, recording is a no-op.
 *
 * <table>
 *   <caption>Meters (Prometheus names in brackets)</caption>
 *   <tr><th>name</th><th>type</th><th>tags</th><th>what</th></tr>
 *   <tr><td>{@code symmem.allreduce.duration}</td><td>timer, histogram</td><td>algorithm, transport, size.class</td>
 *       <td>one all-reduce call (one gradient bucket) on one worker [symmem_allreduce_duration_seconds]</td></tr>
 *   <tr><td>{@code symmem.allreduce.bytes}</td><td>summary (bytes)</td><td>algorithm, transport, size.class</td>
 *       <td>the payload of one all-reduce call on one worker; every worker records its own call, so a
 *       group all-reduce of B bytes adds workers x B [symmem_allreduce_bytes]</td></tr>
 *   <tr><td>{@code symmem.gradsync.step.duration}</td><td>timer, histogram</td><td>transport</td>
 *       <td>one training step of one worker, sync included (every worker records it)</td></tr>
 *   <tr><td>{@code symmem.gradsync.sync.duration}</td><td>timer, histogram</td><td>transport</td>
 *       <td>the gradient-sync part of one worker's step (all buckets, waiting for peers included)</td></tr>
 *   <tr><td>{@code symmem.gradsync.worker.compute}</td><td>timer</td><td>transport, worker</td>
 *       <td>one worker's step less its sync: a straggler has the longest [symmem_gradsync_worker_compute_seconds]</td></tr>
 *   <tr><td>{@code symmem.gradsync.worker.sync}</td><td>timer</td><td>transport, worker</td>
 *       <td>one worker's sync; the peers of a straggler wait here, so it has the shortest</td></tr>
 *   <tr><td>{@code symmem.gradsync.sync.share}</td><td>gauge (ratio)</td><td>transport</td>
 *       <td>sync time / step time over all workers, cumulative since binding</td></tr>
 *   <tr><td>{@code symmem.gradsync.steps}</td><td>counter</td><td>transport</td>
 *       <td>steps the group finished, skipped ones included (once per step, not per worker) [symmem_gradsync_steps_total]</td></tr>
 *   <tr><td>{@code symmem.gradsync.examples}</td><td>counter</td><td>transport</td>
 *       <td>examples in those steps, over all workers [symmem_gradsync_examples_total]</td></tr>
 *   <tr><td>{@code symmem.gradsync.skipped.steps}</td><td>counter</td><td>transport</td>
 *       <td>steps skipped because the averaged gradient was not finite [symmem_gradsync_skipped_steps_total]</td></tr>
 *   <tr><td>{@code symmem.gradsync.failures}</td><td>counter</td><td>transport, reason</td>
 *       <td>steps that failed, by {@link FailureReason}: timeout, non_finite, error [symmem_gradsync_failures_total]</td></tr>
 *   <tr><td>{@code symmem.gradsync.step.bytes}</td><td>summary (bytes)</td><td>transport</td>
 *       <td>gradient bytes each worker synchronizes in one step, recorded once per step (the group moves
 *       workers x this) [symmem_gradsync_step_bytes]</td></tr>
 *   <tr><td>{@code symmem.gradsync.throughput}</td><td>gauge (examples/s)</td><td>transport</td>
 *       <td>the last step's examples over its duration (its slowest worker's step); the rate of
 *       {@code symmem.gradsync.examples} also counts the time between steps
 *       [symmem_gradsync_throughput_examples_per_second]</td></tr>
 *   <tr><td>{@code symmem4j.build.info}</td><td>gauge (always 1)</td><td>version, commit, java (no extra tags)</td>
 *       <td>which build recorded these meters [symmem4j_build_info]</td></tr>
 *   <tr><td>{@code symmem.gradsync.loss}</td><td>gauge</td><td>transport</td>
 *       <td>the last step's mean example loss (NaN before the first step)</td></tr>
 * </table>
 *
 * <p>Timers publish histograms from {@link #LATENCY_MIN} (1 µs) to {@link #LATENCY_MAX} (10 s), so
 * Prometheus' {@code histogram_quantile} tells a few-microsecond all-reduce from a sub-millisecond one
 * (Micrometer's default range starts at 1 ms). Only the per-worker timers carry the {@code worker}
 * tag, and they publish no histogram: three series per worker. The all-reduce meters of an
 * (algorithm, size class) appear with its first sample. Thread-safe: every worker of a group
 * records into the same instance.
 */
public final class SyncMetrics implements MeterBinder {

    /** The lowest latency the timers' histograms resolve: a host ONE_SHOT of a few bytes takes a few µs. */
    public static final Duration LATENCY_MIN = Duration.ofNanos(1_000);
    /** The highest: a slow training step. Longer samples land in the +Inf bucket. */
    public static final Duration LATENCY_MAX = Duration.ofSeconds(10);

    /** Why a step failed: the {@code reason} tag of {@code symmem.gradsync.failures}. */
    public enum FailureReason {
        /** A worker waited for a peer past the group's timeout. */
        TIMEOUT("timeout"),
        /** The averaged gradient held NaN or an infinity (with non-finite gradients set to fail). */
        NON_FINITE("non_finite"),
        /** Anything else a worker threw. */
        ERROR("error");

        private final String tag;

        FailureReason(String tag) {
            this.tag = tag;
        }

        /**
         * The tag value ({@code reason}).
         *
         * @return the value on the failure counter
         */
        public String tag() {
            return tag;
        }
    }

    private final String transport;
    private final Tags extraTags;
    /** One entry per registry bound to; replaced whole on each bind (copy on write). */
    private volatile Bound[] bound = new Bound[0];

    /**
     * Metrics of one transport; bind them to registries with {@link #bindTo}.
     *
     * @param transport the {@code transport} tag value (for example {@code host-in-jvm})
     * @param extraTags added to every meter (for example {@code application})
     */
    public SyncMetrics(String transport, Iterable<Tag> extraTags) {
        this.transport = Objects.requireNonNull(transport, "transport");
        this.extraTags = Tags.of(extraTags);
    }

    /**
     * Metrics of one transport, without extra tags.
     *
     * @param transport the {@code transport} tag value
     */
    public SyncMetrics(String transport) {
        this(transport, Tags.empty());
    }

    private static final SizeClass[] SIZE_CLASSES = SizeClass.values();

    /** One registry's meters; the all-reduce and per-worker ones appear on first use. */
    private static final class Bound {
        final MeterRegistry registry;
        final Tags base;
        /** Index {@code algorithm.ordinal() * SizeClass count + sizeClass.ordinal()}; null until first use. */
        final AtomicReferenceArray<AllReduceMeters> allReduce =
                new AtomicReferenceArray<>(Algorithm.values().length * SIZE_CLASSES.length);
        final Map<Integer, WorkerMeters> workers = new ConcurrentHashMap<>();
        final Timer step;
        final Timer sync;
        final Counter steps;
        final Counter examples;
        final Counter skippedSteps;
        final Map<FailureReason, Counter> failures = new EnumMap<>(FailureReason.class);
        final DistributionSummary stepBytes;
        final AtomicLong stepNanos = new AtomicLong();
        final AtomicLong syncNanos = new AtomicLong();
        /** The bits of a double in one atomic word: a scrape sees this step's value or the last one. */
        final AtomicLong throughputBits = new AtomicLong(Double.doubleToRawLongBits(Double.NaN));
        final AtomicLong lossBits = new AtomicLong(Double.doubleToRawLongBits(Double.NaN));

        Bound(MeterRegistry registry, Tags base) {
            this.registry = registry;
            this.base = base;
            registerBuildInfo(registry);
            step = durationTimer("symmem.gradsync.step.duration", "One worker's training step, sync included")
                    .tags(base).register(registry);
            sync = durationTimer("symmem.gradsync.sync.duration", "Gradient-sync part of one worker's step")
                    .tags(base).register(registry);
            steps = Counter.builder("symmem.gradsync.steps").description("Steps the group finished, skipped ones included")
                    .baseUnit("steps").tags(base).register(registry);
            examples = Counter.builder("symmem.gradsync.examples").description("Examples in the finished steps, all workers")
                    .baseUnit("examples").tags(base).register(registry);
            skippedSteps = Counter.builder("symmem.gradsync.skipped.steps")
                    .description("Steps skipped because the averaged gradient was not finite")
                    .baseUnit("steps").tags(base).register(registry);
            for (FailureReason r : FailureReason.values()) {
                failures.put(r, Counter.builder("symmem.gradsync.failures").description("Steps that failed, by reason")
                        .baseUnit("failures").tags(base).tag("reason", r.tag()).register(registry));
            }
            stepBytes = DistributionSummary.builder("symmem.gradsync.step.bytes")
                    .description("Gradient bytes each worker synchronizes in one step (recorded once per step)")
                    .baseUnit(BaseUnits.BYTES).tags(base).register(registry);
            // Gauges hold their state strongly: the registry usually outlives the wrapper (an endpoint
            // serves the last values after training), and Micrometer's default weak reference would turn
            // them into NaN once the wrapper is collected.
            Gauge.builder("symmem.gradsync.sync.share", this, b -> {
                long s = b.stepNanos.get();
                return s == 0 ? 0.0 : (double) b.syncNanos.get() / s;
            }).description("Share of step time spent in gradient sync").baseUnit("ratio").tags(base).strongReference(true).register(registry);
            Gauge.builder("symmem.gradsync.throughput", throughputBits, b -> Double.longBitsToDouble(b.get()))
                    .description("Examples per second of the last step").baseUnit("examples.per.second").tags(base)
                    .strongReference(true).register(registry);
            Gauge.builder("symmem.gradsync.loss", lossBits, b -> Double.longBitsToDouble(b.get()))
                    .description("Mean example loss of the last step").tags(base).strongReference(true).register(registry);
        }
    }

    private record AllReduceMeters(Timer duration, DistributionSummary bytes) {
    }

    private record WorkerMeters(Timer compute, Timer sync) {
    }

    /**
     * The {@code symmem4j.build.info} gauge (always 1; tags {@code version}, {@code commit}, {@code java}),
     * without the extra tags: the pipeline metrics register the same gauge,
     * and a registry answers the second registration with the first meter.
     */
    static void registerBuildInfo(MeterRegistry registry) {
        Gauge.builder(BUILD_INFO, () -> 1).description("The symmem4j build: version, commit, Java runtime (value 1)")
                .tags(BuildInfo.current().tags()).strongReference(true).register(registry);
    }

    /** The build-info gauge's name ({@code symmem4j_build_info} in Prometheus). */
    public static final String BUILD_INFO = "symmem4j.build.info";

    /** A timer builder with this project's histogram range (shared by every timer here). */
    private static Timer.Builder durationTimer(String name, String description) {
        return Timer.builder(name).description(description).publishPercentileHistogram()
                .minimumExpectedValue(LATENCY_MIN).maximumExpectedValue(LATENCY_MAX);
    }

    @Override
    public synchronized void bindTo(MeterRegistry registry) {
        Bound b = new Bound(registry, extraTags.and("transport", transport));
        Bound[] next = Arrays.copyOf(bound, bound.length + 1);
        next[next.length - 1] = b;
        bound = next; // volatile: recorders see the new registry's meters, fully built, from their next sample
    }

    /**
     * One all-reduce of {@code bytes} with {@code algorithm} that took {@code nanos}, on one worker.
     *
     * @param algorithm the algorithm that ran
     * @param bytes     the message size in bytes
     * @param nanos     its duration in nanoseconds
     */
    public void recordAllReduce(Algorithm algorithm, long bytes, long nanos) {
        for (Bound b : bound) {
            AllReduceMeters m = meters(b, algorithm, SizeClass.of(bytes));
            m.duration().record(nanos, TimeUnit.NANOSECONDS);
            m.bytes().record(bytes);
        }
    }

    /**
     * The meters of one (algorithm, size class), registered the first time that pair runs, so a
     * scrape shows only series that carry data (a host job has no NCCL series; each timer is a
     * full histogram, about 110 series). After the first use this is one array read: no
     * allocation on the sync path. Two workers racing on first use both register, which Micrometer
     * answers with the same meter, so whichever store wins holds the right pair.
     */
    private static AllReduceMeters meters(Bound b, Algorithm algorithm, SizeClass c) {
        int index = algorithm.ordinal() * SIZE_CLASSES.length + c.ordinal();
        AllReduceMeters m = b.allReduce.get(index);
        if (m != null) {
            return m;
        }
        Tags t = b.base.and("algorithm", algorithm.name(), "size.class", c.tag());
        m = new AllReduceMeters(
                durationTimer("symmem.allreduce.duration", "One all-reduce call (one gradient bucket) on one worker")
                        .tags(t).register(b.registry),
                DistributionSummary.builder("symmem.allreduce.bytes")
                        .description("Payload of one all-reduce call on one worker (every worker records its own call)")
                        .baseUnit(BaseUnits.BYTES).tags(t).register(b.registry));
        b.allReduce.set(index, m);
        return m;
    }

    /**
     * One worker's step: it took {@code stepNanos}, of which {@code syncNanos} were gradient sync
     * (waiting for peers included). Every worker calls this once per step.
     *
     * @param worker    the worker, from 0
     * @param stepNanos the worker's step, nanoseconds
     * @param syncNanos the part spent in gradient sync, nanoseconds
     */
    public void recordWorkerStep(int worker, long stepNanos, long syncNanos) {
        for (Bound b : bound) {
            b.step.record(stepNanos, TimeUnit.NANOSECONDS);
            b.sync.record(syncNanos, TimeUnit.NANOSECONDS);
            b.stepNanos.addAndGet(stepNanos);
            b.syncNanos.addAndGet(syncNanos);
            WorkerMeters w = b.workers.computeIfAbsent(worker, k -> new WorkerMeters(
                    Timer.builder("symmem.gradsync.worker.compute").description("One worker's step less its gradient sync")
                            .tags(b.base).tag("worker", Integer.toString(k)).register(b.registry),
                    Timer.builder("symmem.gradsync.worker.sync").description("One worker's gradient sync, waiting included")
                            .tags(b.base).tag("worker", Integer.toString(k)).register(b.registry)));
            w.compute().record(Math.max(0, stepNanos - syncNanos), TimeUnit.NANOSECONDS);
            w.sync().record(syncNanos, TimeUnit.NANOSECONDS);
        }
    }

    /**
     * One step the group finished, once per step (not per worker).
     *
     * @param examples      examples of the step, over all workers
     * @param gradientBytes gradient bytes each worker synchronized in the step
     * @param stepNanos     the step's duration: its slowest worker's step
     * @param loss          the step's mean example loss
     * @param skipped       whether the step was skipped (non-finite averaged gradient)
     */
    public void recordStep(long examples, long gradientBytes, long stepNanos, double loss, boolean skipped) {
        for (Bound b : bound) {
            b.steps.increment();
            b.examples.increment(examples);
            if (skipped) {
                b.skippedSteps.increment();
            }
            b.stepBytes.record(gradientBytes);
            if (stepNanos > 0) {
                b.throughputBits.set(Double.doubleToRawLongBits(examples * 1e9 / stepNanos));
            }
            b.lossBits.set(Double.doubleToRawLongBits(loss));
        }
    }

    /**
     * One step that failed, once per step.
     *
     * @param reason why the step failed
     */
    public void recordFailure(FailureReason reason) {
        Objects.requireNonNull(reason, "reason");
        for (Bound b : bound) {
            b.failures.get(reason).increment();
        }
    }

    /**
     * The transport tag.
     *
     * @return the {@code transport} tag value
     */
    public String transport() {
        return transport;
    }
}
