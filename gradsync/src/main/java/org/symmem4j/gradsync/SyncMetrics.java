package org.symmem4j.gradsync;

import io.micrometer.core.instrument.DistributionSummary;
import io.micrometer.core.instrument.Gauge;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.Tag;
import io.micrometer.core.instrument.Tags;
import io.micrometer.core.instrument.Timer;
import io.micrometer.core.instrument.binder.MeterBinder;
import java.util.Objects;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReferenceArray;
import org.symmem4j.parallel.Algorithm;

/**
 * Gradient-sync metrics as a Micrometer {@link MeterBinder}: the caller passes its registry (no
 * global registry is ever created). Until bound, recording is a no-op.
 *
 * <table>
 *   <caption>Meters</caption>
 *   <tr><th>name</th><th>type</th><th>tags</th><th>what</th></tr>
 *   <tr><td>{@code symmem.allreduce.latency}</td><td>timer</td><td>algorithm, transport, size.class</td>
 *       <td>one bucket's all-reduce</td></tr>
 *   <tr><td>{@code symmem.allreduce.bytes}</td><td>summary (bytes)</td><td>algorithm, transport, size.class</td>
 *       <td>bytes per all-reduce</td></tr>
 *   <tr><td>{@code symmem.gradsync.step.latency}</td><td>timer</td><td>transport</td>
 *       <td>one training step of one worker, sync included</td></tr>
 *   <tr><td>{@code symmem.gradsync.sync.latency}</td><td>timer</td><td>transport</td>
 *       <td>the gradient sync part of a step (all buckets)</td></tr>
 *   <tr><td>{@code symmem.gradsync.sync.share}</td><td>gauge (ratio)</td><td>transport</td>
 *       <td>sync time / step time, cumulative since binding</td></tr>
 * </table>
 *
 * Timers publish percentile histograms, so Prometheus can compute quantiles across workers. The
 * all-reduce meters of an (algorithm, size class) appear with its first sample.
 * Thread-safe: every worker of a group records into the same instance.
 */
public final class SyncMetrics implements MeterBinder {

    private final String transport;
    private final Tags extraTags;
    private volatile Bound bound;

    /** @param extraTags added to every meter (for example the job name) */
    public SyncMetrics(String transport, Iterable<Tag> extraTags) {
        this.transport = Objects.requireNonNull(transport, "transport");
        this.extraTags = Tags.of(extraTags);
    }

    public SyncMetrics(String transport) {
        this(transport, Tags.empty());
    }


    /** The registry and the step meters, fixed at bind time; all-reduce meters appear on first use. */
    private static final class Bound {
        final MeterRegistry registry;
        final Tags base;
        /** Index {@code algorithm.ordinal() * SizeClass count + sizeClass.ordinal()}; null until first use. */
        final AtomicReferenceArray<AllReduceMeters> allReduce =
                new AtomicReferenceArray<>(Algorithm.values().length * SIZE_CLASSES.length);
        final Timer step;
        final Timer sync;
        final AtomicLong stepNanos = new AtomicLong();
        final AtomicLong syncNanos = new AtomicLong();

        Bound(MeterRegistry registry, Tags base) {
            this.registry = registry;
            this.base = base;
            step = Timer.builder("symmem.gradsync.step.latency").description("One worker's training step, sync included")
                    .tags(base).publishPercentileHistogram().register(registry);
            sync = Timer.builder("symmem.gradsync.sync.latency").description("Gradient sync part of a step")
                    .tags(base).publishPercentileHistogram().register(registry);
        }
    }

    private record AllReduceMeters(Timer latency, DistributionSummary bytes) {}

    private static final SizeClass[] SIZE_CLASSES = SizeClass.values();

    @Override
    public void bindTo(MeterRegistry registry) {
        Bound b = new Bound(registry, extraTags.and("transport", transport));
        Gauge.builder("symmem.gradsync.sync.share", b, x -> {
            long step = x.stepNanos.get();
            return step == 0 ? 0.0 : (double) x.syncNanos.get() / step;
        }).description("Share of step time spent in gradient sync").baseUnit("ratio").tags(b.base).register(registry);
        bound = b;
    }

    /** One all-reduce of {@code bytes} with {@code algorithm} that took {@code nanos}. */
    public void recordAllReduce(Algorithm algorithm, long bytes, long nanos) {
        Bound b = bound;
        if (b == null) {
            return;
        }
        SizeClass c = SizeClass.of(bytes);
        AllReduceMeters m = meters(b, algorithm, c);
        m.latency().record(nanos, TimeUnit.NANOSECONDS);
        m.bytes().record(bytes);
    }

    /**
     * The meters of one (algorithm, size class), registered the first time that pair runs, so a
     * scrape shows only series that carry data (a host job has no NCCL series; each timer is a
     * full percentile histogram, about 70 series). After the first use this is one array read: no
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
                Timer.builder("symmem.allreduce.latency").description("Latency of one gradient bucket's all-reduce")
                        .tags(t).publishPercentileHistogram().register(b.registry),
                DistributionSummary.builder("symmem.allreduce.bytes").description("Bytes per all-reduce")
                        .baseUnit("bytes").tags(t).register(b.registry));
        b.allReduce.set(index, m);
        return m;
    }

    /** One training step that took {@code stepNanos}, of which {@code syncNanos} were gradient sync. */
    public void recordStep(long stepNanos, long syncNanos) {
        Bound b = bound;
        if (b == null) {
            return;
        }
        b.step.record(stepNanos, TimeUnit.NANOSECONDS);
        b.sync.record(syncNanos, TimeUnit.NANOSECONDS);
        b.stepNanos.addAndGet(stepNanos);
        b.syncNanos.addAndGet(syncNanos);
    }

    public String transport() {
        return transport;
    }
}
