package org.symmem4j.serving;

import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.Consumer;

import io.micrometer.core.instrument.Counter;
import io.micrometer.core.instrument.DistributionSummary;
import io.micrometer.core.instrument.Gauge;
import io.micrometer.core.instrument.Meter;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.Timer;
import org.symmem4j.serving.ServingException.Kind;

/**
 * One model name as {@link ModelRouter} serves it: its bounded request queue, its current version and the one kept
 * for rollback, its meters, its batching token, and the admission count that lets an undeployed model let go of its
 * versions only after the last request it admitted has its answer. The version fields are written under this
 * object's monitor by the router; the queue and the token are shared with the router's workers.
 */
final class ServedModel {
    /** The sign bit of {@link #admitted}: set by {@link ModelRouter#undeploy}, after which no request is admitted. */
    static final long NO_ADMISSION = Long.MIN_VALUE;
    final String name;
    final ArrayBlockingQueue<QueuedRequest> queue;
    volatile ServedVersion current;
    volatile ServedVersion previous;
    long lastVersion;
    final Timer duration;
    final Timer queued;
    final DistributionSummary batchSize;
    final Counter swaps;
    final Map<String, Counter> outcomes = new ConcurrentHashMap<>();
    /** True while the model is on the ready list or a worker forms its batch (the batching token). */
    final AtomicBoolean scheduled = new AtomicBoolean();
    /** A request that did not fit the last batch; starts the next one (read and written by the token holder). */
    QueuedRequest carried;
    /**
     * Requests admitted and not yet answered (or refused, or timed out), plus {@link #NO_ADMISSION} once the model
     * is undeployed: whoever brings it to exactly {@code NO_ADMISSION} (the last request to leave, or undeploy
     * when none is in) drops the router's references to the versions.
     */
    final AtomicLong admitted = new AtomicLong();
    /** Set (under the model's monitor) by {@link ModelRouter#undeploy}; a deploy that finds it takes a new model. */
    boolean undeployed;
    /** Completes when an undeployed model has let go of its versions. */
    final CompletableFuture<Void> released = new CompletableFuture<>();
    /** The meters registered for this model, removed from the registry by {@link ModelRouter#undeploy}. */
    final List<Meter> meters = new ArrayList<>();
    /** Guards {@link #metersRemoved} against a first-time outcome counter registering after the removal. */
    private final Object meterLock = new Object();
    private boolean metersRemoved;
    private final MeterRegistry registry;
    /** Drops the router's references to the versions once an undeployed model's last request has left. */
    private final Consumer<ServedModel> letGo;

    /**
     * @param name          the model's name
     * @param lastVersion   the last version number given to this name before (0 for none)
     * @param queueCapacity the request queue's capacity
     * @param registry      where the model's meters go
     * @param letGo         called once, when an undeployed model has no admitted request left
     */
    ServedModel(String name, long lastVersion, int queueCapacity, MeterRegistry registry,
                Consumer<ServedModel> letGo) {
        this.name = name;
        this.lastVersion = lastVersion;
        this.registry = registry;
        this.letGo = letGo;
        this.queue = new ArrayBlockingQueue<>(queueCapacity);
        this.duration = Timer.builder(ServingMeters.REQUEST_DURATION.meterName()).tag("model", name)
                .description("request arrival to answer").publishPercentileHistogram().register(registry);
        this.queued = Timer.builder(ServingMeters.QUEUE_DURATION.meterName()).tag("model", name)
                .description("request arrival to its batch's start").publishPercentileHistogram().register(registry);
        this.batchSize = DistributionSummary.builder(ServingMeters.BATCH_SIZE.meterName()).tag("model", name)
                .description("rows per batch").publishPercentileHistogram().register(registry);
        this.swaps = Counter.builder(ServingMeters.SWAPS.meterName()).tag("model", name)
                .description("versions made current").register(registry);
        meters.addAll(List.of(duration, queued, batchSize, swaps));
        meters.add(Gauge.builder(ServingMeters.QUEUE_DEPTH.meterName(), queue, ArrayBlockingQueue::size)
                .tag("model", name).description("requests waiting").register(registry));
        meters.add(Gauge.builder(ServingMeters.CURRENT_VERSION.meterName(), this,
                m -> m.current == null ? 0 : m.current.version)
                .tag("model", name).description("the version new requests go to").register(registry));
    }

    void count(String outcome) {
        Counter c = outcomes.get(outcome);
        if (c == null) {
            synchronized (meterLock) {
                if (metersRemoved) {
                    return; // undeployed: its answers still complete, but nothing registers again
                }
                c = outcomes.computeIfAbsent(outcome, o -> Counter.builder(ServingMeters.REQUESTS.meterName())
                        .tag("model", name).tag("outcome", o).description("requests by outcome")
                        .register(registry));
            }
        }
        c.increment(); // after removal this counts into a meter no registry reports: harmless
    }

    /** {@return the outcome tag of a request refused or failed with {@code kind}} */
    static String outcome(Kind kind) {
        return kind.name().toLowerCase(Locale.ROOT);
    }

    /** Counts the outcome of {@code e} and fails {@code r} with it, unless it was settled already. */
    void fail(QueuedRequest r, ServingException e) {
        if (r.claim()) {
            count(outcome(e.kind()));
            r.answer().completeExceptionally(e);
        }
    }

    /** Takes the registry's meters of this model away (a redeploy of the name registers new ones). */
    void removeMeters() {
        synchronized (meterLock) {
            metersRemoved = true;
            meters.forEach(registry::remove);
            outcomes.values().forEach(registry::remove);
        }
    }

    /** {@return true when a request may enter (the model is not undeployed); pair it with {@link #leave}} */
    boolean admit() {
        while (true) {
            long c = admitted.get();
            if (c < 0) {
                return false;
            }
            if (admitted.compareAndSet(c, c + 1)) {
                return true;
            }
        }
    }

    /** An admitted request has its answer (or refusal); the last one out of an undeployed model lets go. */
    void leave() {
        if (admitted.decrementAndGet() == NO_ADMISSION) {
            letGo.accept(this);
        }
    }

    /** Admits nobody from now on; lets go of the versions at once when no admitted request is left. */
    void stopAdmitting() {
        long before = admitted.getAndUpdate(c -> c | NO_ADMISSION);
        if (before == 0) {
            letGo.accept(this);
        }
    }
}
