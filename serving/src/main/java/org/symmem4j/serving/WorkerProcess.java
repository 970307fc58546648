package org.symmem4j.serving;

import java.lang.foreign.MemorySegment;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.TimeUnit;

import org.nd4j.linalg.api.ndarray.INDArray;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.sync.IdleStrategy;
import org.symmem4j.serving.weights.SharedWeights;
import org.symmem4j.state.SymmetricRingBuffer;

/**
 * The worker side of {@link ProcessWorkers}: a JVM of the router's host group that takes batches from its request
 * ring, runs them on a network over the router's shared weights (opened zero-copy, never copied) and puts the outputs
 * on its reply ring, until the router sends stop.
 *
 * <pre>{@code
 * ProcessGroup group = ProcessGroup.fromEnvironment();                         // rank 1..K of the host group
 * try (SharedWeights weights = SharedWeights.create(group, 0, 256L << 20, 16)) { // collective, owner = router rank 0
 *     WorkerProcess.serve(group, weights, 0, 1 << 22);                         // until the router's ProcessWorkers closes
 * }
 * }</pre>
 *
 * The network of each version is built once, from the version's configuration, over the version's shared
 * parameters, and kept for the next batches of that version (the {@value #KEPT_NETWORKS} most recently used). The
 * configuration travels once per version: the first batch of a version to this worker carries it, later ones refer
 * to the copy this worker keeps ({@link WireConfigs}, the router mirrors it). A
 * version is read only between taking a batch and putting its reply: the router holds the version for the batch
 * until the reply arrives (or this process is gone), so the owner never frees memory a worker reads. A network that
 * fails answers an error message, which the router hands to the batch's requests; the worker goes on. Between
 * batches the worker waits on its request ring with an {@link IdleStrategy} ({@link ProcessWorkers#defaultIdleStrategy()}
 * unless given another): spin, yield, then park with back-off, so an idle worker does not burn a core.
 */
public final class WorkerProcess {

    /** How often an idle worker checks that the router's process still lives. */
    private static final long LIFE_CHECK_NANOS = TimeUnit.MILLISECONDS.toNanos(2);

    /** Networks kept per worker, by version (least recently used dropped). */
    public static final int KEPT_NETWORKS = 8;

    /** Observes each batch before it runs (logging; a test uses it to kill the worker mid-batch). */
    @FunctionalInterface
    public interface BatchListener {
        /**
         * @param model   the model's name
         * @param version the version the batch runs on
         * @param rows    the batch's rows
         */
        void beforeBatch(String model, long version, long rows);
    }

    private final Group group;
    private final SharedWeights weights;
    private final BatchListener listener;
    private final SymmetricRingBuffer replies;
    private final Map<String, ModelSpec.Network> networks = new LinkedHashMap<>(16, 0.75f, true) {
        @Override
        protected boolean removeEldestEntry(Map.Entry<String, ModelSpec.Network> eldest) {
            return size() > KEPT_NETWORKS;
        }
    };
    private final WireConfigs configs = new WireConfigs();
    private boolean stopped;
    private long batches;

    private WorkerProcess(Group group, SharedWeights weights, BatchListener listener, SymmetricRingBuffer replies) {
        this.group = group;
        this.weights = weights;
        this.listener = listener;
        this.replies = replies;
    }

    /**
     * Collective with the router's {@link ProcessWorkers#create}: serves batches until the router stops this worker.
     *
     * @param group        the host group (this rank is not the router)
     * @param weights      the shared weights, made collectively with the router's (the router rank owns them)
     * @param router       the router's rank
     * @param ringCapacity the rings' capacity, the same as the router's
     * @return the batches this worker ran
     * @throws IllegalStateException when the router's process exits before it sent stop
     */
    public static long serve(Group group, SharedWeights weights, int router, int ringCapacity) {
        return serve(group, weights, router, ringCapacity, (m, v, r) -> { });
    }

    /**
     * As {@link #serve(Group, SharedWeights, int, int, BatchListener)}, with the default idle strategy
     * ({@link ProcessWorkers#defaultIdleStrategy()}).
     *
     * @param group        the host group
     * @param weights      the shared weights
     * @param router       the router's rank
     * @param ringCapacity the rings' capacity
     * @param listener     called before each batch runs
     * @return the batches this worker ran
     */
    public static long serve(Group group, SharedWeights weights, int router, int ringCapacity,
                             BatchListener listener) {
        return serve(group, weights, router, ringCapacity, ProcessWorkers.defaultIdleStrategy(), listener);
    }

    /**
     * As {@link #serve(Group, SharedWeights, int, int)}, waiting between batches with {@code idle} and calling
     * {@code listener} before each batch.
     *
     * @param group        the host group
     * @param weights      the shared weights
     * @param router       the router's rank
     * @param ringCapacity the rings' capacity
     * @param idle         what this worker does after a poll of its request ring found nothing (see
     *                     {@link ProcessWorkers}' class comment); used by the calling thread alone
     * @param listener     called before each batch runs
     * @return the batches this worker ran
     */
    public static long serve(Group group, SharedWeights weights, int router, int ringCapacity, IdleStrategy idle,
                             BatchListener listener) {
        Objects.requireNonNull(group, "group");
        Objects.requireNonNull(weights, "weights");
        Objects.requireNonNull(idle, "idle");
        Objects.requireNonNull(listener, "listener");
        if (group.rank() == router) {
            throw new IllegalArgumentException("WorkerProcess.serve on rank=" + router + ", the router's rank"
                    + " (fix: call ProcessWorkers.create on the router's rank, WorkerProcess.serve on the others)");
        }
        try (WorkerRings rings = WorkerRings.create(group, router, ringCapacity)) {
            int me = rings.indexOf(group.rank());
            SymmetricRingBuffer requests = rings.requests.get(me);
            WorkerProcess worker = new WorkerProcess(group, weights, listener, rings.replies.get(me));
            idle.reset();
            long nextLifeCheck = System.nanoTime() + LIFE_CHECK_NANOS;
            while (!worker.stopped) {
                if (requests.poll(worker::onMessage, 1) > 0) {
                    idle.reset();
                    continue;
                }
                long now = System.nanoTime();
                if (now - nextLifeCheck >= 0) {
                    nextLifeCheck = now + LIFE_CHECK_NANOS;
                    if (!group.isAlive(router)) {
                        throw new IllegalStateException("worker process rank=" + group.rank() + ": the router "
                                + group.describe(router) + " exited without stopping this worker (fix: see the"
                                + " router's output for why it exited; close its ProcessWorkers before it ends)");
                    }
                }
                idle.idle(); // parks at most the strategy's cap, then polls again: no wake-up to lose
            }
            return worker.batches;
        }
    }

    private void onMessage(int type, MemorySegment buffer, long offset, int length) {
        if (type == BatchWire.STOP) {
            stopped = true;
            return;
        }
        if (type != BatchWire.BATCH) {
            throw org.symmem4j.parallel.Invariants.violated("worker process rank=" + group.rank() + " got message"
                    + " type=" + type + ", expected BATCH or STOP");
        }
        BatchWire.Batch b = BatchWire.readBatch(buffer, offset, length); // copies the features out of the ring
        String key = SharedWeights.key(b.model(), b.version());
        if (b.config() != null && configs.mustCarry(key, b.config())) {
            networks.remove(key); // another router reuses this version number for another configuration
        }
        WireConfigs.Config config = configs.received(key, b.config()); // in ring order, as the router's mirror
        byte[] reply;
        int replyType = BatchWire.OUTPUT;
        try {
            listener.beforeBatch(b.model(), b.version(), b.features().size(0));
            INDArray out = network(b, key, config).output(b.features());
            reply = BatchWire.output(b.id(), out);
            batches++;
            if (reply.length > replies.maxPayload()) {
                replyType = BatchWire.ERROR;
                reply = BatchWire.error(b.id(), "worker process rank=" + group.rank() + ": the output of bytes="
                        + reply.length + " exceeds the reply ring's maxPayload=" + replies.maxPayload() + " (fix:"
                        + " create ProcessWorkers with a larger ringCapacity, at least 8 x the largest batch's output"
                        + " bytes, or lower RouterOptions.maxBatch)");
            }
        } catch (RuntimeException e) {
            replyType = BatchWire.ERROR;
            reply = BatchWire.error(b.id(), "worker process rank=" + group.rank() + ": " + e);
        }
        replies.put(replyType, reply); // waits (bounded) while the router's reply thread catches up
    }

    private ModelSpec.Network network(BatchWire.Batch b, String key, WireConfigs.Config config) {
        ModelSpec.Network net = networks.get(key);
        if (net == null) {
            MemorySegment params = weights.open(b.model(), b.version());
            if (params == null) {
                throw new IllegalStateException("version " + key + " is not in the shared weights (expected the"
                        + " router to hold it for this batch; fix: report this as a bug)");
            }
            long[] shape = b.features().shape();
            net = ModelSpec.fromJson(config.kind(), config.json(), java.util.Arrays.copyOfRange(shape, 1, shape.length))
                    .networkOver(params);
            networks.put(key, net);
        }
        return net;
    }
}
