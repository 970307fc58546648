package org.symmem4j.gradsync;

import io.micrometer.core.instrument.DistributionSummary;
import io.micrometer.core.instrument.Gauge;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.Tag;
import io.micrometer.core.instrument.Tags;
import io.micrometer.core.instrument.Timer;
import io.micrometer.core.instrument.binder.MeterBinder;
import java.util.EnumMap;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
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
 * Timers publish percentile histograms, so Prometheus can compute quantiles across workers.
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


    /** Meters created at bind time, so the hot path only looks them up. */
    private static final class Bound {
        final Map<Algorithm, Map<SizeClass, Timer>> latency = new EnumMap<>(Algorithm.class);
        final Map<Algorithm, Map<SizeClass, DistributionSummary>> bytes = new EnumMap<>(Algorithm.class);
        Timer step;
        Timer sync;
        final AtomicLong stepNanos = new AtomicLong();
        final AtomicLong syncNanos = new AtomicLong();
    }

    @Override
    public void bindTo(MeterRegistry registry) {
        Bound b = new Bound();
        Tags base = extraTags.and("transport", transport);
        for (Algorithm a : Algorithm.values()) {
            Map<SizeClass, Timer> timers = new EnumMap<>(SizeClass.class);
            Map<SizeClass, DistributionSummary> sizes = new EnumMap<>(SizeClass.class);
            for (SizeClass c : SizeClass.values()) {
                Tags t = base.and("algorithm", a.name(), "size.class", c.tag());
                timers.put(c, Timer.builder("symmem.allreduce.latency")
                        .description("Latency of one gradient bucket's all-reduce")
                        .tags(t).publishPercentileHistogram().register(registry));
                sizes.put(c, DistributionSummary.builder("symmem.allreduce.bytes")
                        .description("Bytes per all-reduce").baseUnit("bytes").tags(t).register(registry));
            }
            b.latency.put(a, timers);
            b.bytes.put(a, sizes);
        }
        b.step = Timer.builder("symmem.gradsync.step.latency").description("One worker's training step, sync included")
                .tags(base).publishPercentileHistogram().register(registry);
        b.sync = Timer.builder("symmem.gradsync.sync.latency").description("Gradient sync part of a step")
                .tags(base).publishPercentileHistogram().register(registry);
        Gauge.builder("symmem.gradsync.sync.share", b, x -> {
            long step = x.stepNanos.get();
            return step == 0 ? 0.0 : (double) x.syncNanos.get() / step;
        }).description("Share of step time spent in gradient sync").baseUnit("ratio").tags(base).register(registry);
        bound = b;
    }

    /** One all-reduce of {@code bytes} with {@code algorithm} that took {@code nanos}. */
    public void recordAllReduce(Algorithm algorithm, long bytes, long nanos) {
        Bound b = bound;
        if (b == null) {
            return;
        }
        SizeClass c = SizeClass.of(bytes);
        b.latency.get(algorithm).get(c).record(nanos, TimeUnit.NANOSECONDS);
        b.bytes.get(algorithm).get(c).record(bytes);
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
