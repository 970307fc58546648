package org.symmem4j.serving;

import java.lang.foreign.MemorySegment;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.LockSupport;

import org.nd4j.linalg.api.ndarray.INDArray;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.sync.BackoffIdleStrategy;
import org.symmem4j.parallel.sync.IdleStrategy;
import org.symmem4j.serving.ServingException.Kind;
import org.symmem4j.state.MessageHandler;
import org.symmem4j.state.SymmetricRingBuffer;

/**
 * The router side of worker processes: a {@link ModelRouter} made with one hands each batch it forms to a worker JVM
 * of the same host group through the state module's {@link SymmetricRingBuffer}s (a request ring to each worker, a
 * reply ring back), instead of running it on its own threads. The workers ({@link WorkerProcess#serve}) run the
 * network over the router's shared weights, which they open zero-copy, so K worker processes hold one copy of each
 * version.
 *
 * <pre>{@code
 * // rank 0 of the host group: the router, owner of the weights
 * try (SharedWeights weights = SharedWeights.create(group, 0, 256L << 20, 16);   // collective
 *      ProcessWorkers workers = ProcessWorkers.create(group, 1 << 22);           // collective with the workers' serve
 *      ModelRouter router = new ModelRouter(weights, RouterOptions.defaults().withWorkers(4), registry, workers)) {
 *     router.deploy("mnist", trained, 784);
 *     router.predict("mnist", features).join();                                  // computed in a worker process
 * }
 * }</pre>
 *
 * <ul>
 *   <li><b>Versions across processes</b>: the router takes a reference to the batch's version before it sends the
 *       batch and drops it only when that worker's reply has arrived, or the worker has exited: the version's reader
 *       count covers every process that reads it, so a retired version is freed only when no process reads it.</li>
 *   <li><b>Choice of worker</b>: the live worker with the fewest batches in flight (round robin among equals).</li>
 *   <li><b>Back-pressure</b>: a router worker thread waits for its batch's reply, so at most
 *       {@code RouterOptions.workers} batches are in flight; when every live worker's request ring is full the
 *       batch's requests are refused as {@link Kind#OVERLOADED}, the thread path's answer to a full queue.</li>
 *   <li><b>A worker process that dies</b>: a reply thread checks the workers' lives every few milliseconds; the
 *       batches in flight to a dead worker fail as {@link Kind#FAILED} with a message naming it, their versions are
 *       released, and later batches go to the workers left. A worker that lives but does not answer makes its
 *       requests time out ({@code requestTimeout}); its batch's version stays held until it answers or exits.</li>
 *   <li><b>Idle waiting</b>: the router's reply thread and each worker process poll their rings; when a poll finds
 *       nothing they follow an {@link IdleStrategy}, by default {@link #defaultIdleStrategy()}: {@value #IDLE_SPINS}
 *       busy polls, then {@value #IDLE_YIELDS} yields, then parks from {@value #IDLE_MIN_PARK_NANOS} ns doubling up
 *       to {@value #IDLE_MAX_PARK_NANOS} ns, back to spinning at the next message. An idle server thus wakes each
 *       thread about a thousand times a second instead of burning a core, and a busy one hands batches over at
 *       spinning latency. Nothing wakes a parked thread (no unpark crosses processes): it polls again when its park
 *       ends, so a message published while it parks is seen within one park, at most the cap. Pass another strategy
 *       to {@link #create(Group, int, IdleStrategy)} and to
 *       {@link WorkerProcess#serve(Group, org.symmem4j.serving.weights.SharedWeights, int, int, IdleStrategy,
 *       WorkerProcess.BatchListener)} (a lower cap for latency on dedicated cores, pure spinning with
 *       {@code maxSpins = Integer.MAX_VALUE}).</li>
 * </ul>
 *
 * Close it after the router, collectively with the workers (it sends them stop). When a worker has died, abort the
 * group before closing (the rings' collective close would wait for the dead rank).
 */
public final class ProcessWorkers implements AutoCloseable {

    /** Busy polls of the default idle strategy before it yields. */
    public static final int IDLE_SPINS = 256;
    /** {@code Thread.yield()} polls of the default idle strategy before it parks. */
    public static final int IDLE_YIELDS = 16;
    /** The default idle strategy's first park, in nanoseconds (1 µs); each further park doubles it. */
    public static final long IDLE_MIN_PARK_NANOS = 1_000;
    /**
     * The default idle strategy's longest park, in nanoseconds (1 ms): the most a message waits for a thread that
     * has been idle for a while, and the rate (about 1,000 wakes a second) at which an idle thread polls.
     */
    public static final long IDLE_MAX_PARK_NANOS = 1_000_000;

    /**
     * The idle strategy the reply thread and the worker processes use unless given another: spin, yield, then park
     * with exponential back-off, as the constants above say.
     *
     * @return a new strategy (one per waiting thread: strategies keep per-thread state)
     */
    public static IdleStrategy defaultIdleStrategy() {
        return new BackoffIdleStrategy(IDLE_SPINS, IDLE_YIELDS, IDLE_MIN_PARK_NANOS, IDLE_MAX_PARK_NANOS);
    }

    /** One worker process as the router sees it. */
    private static final class Worker {
        final int rank;
        final SymmetricRingBuffer requests;
        final SymmetricRingBuffer replies;
        /** Guarded by this: batches sent and not yet answered, by id. */
        final Map<Long, Dispatch> inFlight = new HashMap<>();
        /** Guarded by this: the mirror of the configurations the worker holds, updated in its ring's order. */
        final WireConfigs configs = new WireConfigs();
        /** Written under this; read without it by the reply thread (a stale true only polls once more). */
        volatile boolean alive = true;
        volatile long batches;
        String deathNote;
        /** Reads one of this worker's replies; made once, before the reply thread starts (not per poll). */
        MessageHandler onReply;

        Worker(int rank, SymmetricRingBuffer requests, SymmetricRingBuffer replies) {
            this.rank = rank;
            this.requests = requests;
            this.replies = replies;
        }
    }

    /** One batch sent to a worker process: holds its version until the reply (or the worker's death). */
    static final class Dispatch {
        final ServedVersion served;
        final int rank;
        final CompletableFuture<INDArray> result = new CompletableFuture<>();

        Dispatch(ServedVersion served, int rank) {
            this.served = served;
            this.rank = rank;
        }

        /** The worker has stopped reading the version: drop it, then complete (a client holding its answer knows). */
        void finish(INDArray out, ServingException failure) {
            served.release();
            if (failure != null) {
                result.completeExceptionally(failure);
            } else {
                result.complete(out);
            }
        }

        /**
         * The batch's outputs, waiting at most {@code timeout}.
         *
         * @throws ServingException FAILED (the worker failed or died), TIMEOUT (no answer in time)
         */
        INDArray await(String model, Duration timeout) {
            try {
                return result.get(timeout.toNanos(), TimeUnit.NANOSECONDS);
            } catch (ExecutionException e) {
                if (e.getCause() instanceof ServingException se) {
                    throw se;
                }
                throw new ServingException(Kind.FAILED, "model '" + model + "' worker process rank=" + rank + ": "
                        + e.getCause() + " (fix: act on this cause)", e.getCause());
            } catch (TimeoutException e) {
                throw new ServingException(Kind.TIMEOUT, "model '" + model + "': worker process rank=" + rank
                        + " gave no answer within requestTimeout=" + timeout + "; it is still alive, and the batch's"
                        + " version=" + served.version + " stays held until it answers or exits (fix: look at that"
                        + " process, e.g. with jstack, or raise RouterOptions.requestTimeout)", e);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new ServingException(Kind.FAILED, "model '" + model + "': interrupted while waiting for worker"
                        + " process rank=" + rank + " (fix: do not interrupt the router's threads)", e);
            }
        }
    }

    private static final long LIFE_CHECK_NANOS = TimeUnit.MILLISECONDS.toNanos(2);

    private final Group group;
    private final WorkerRings rings;
    private final List<Worker> workers = new ArrayList<>();
    private final int ringCapacity;
    private final AtomicLong ids = new AtomicLong();
    private final AtomicLong turn = new AtomicLong();
    private final AtomicLong configsCarried = new AtomicLong();
    private final IdleStrategy idle;
    private final Thread replyThread;
    private volatile boolean stopReplies;
    private volatile Throwable replyFailure;
    private boolean closed;

    private ProcessWorkers(Group group, WorkerRings rings, int ringCapacity, IdleStrategy idle) {
        this.group = group;
        this.rings = rings;
        this.ringCapacity = ringCapacity;
        this.idle = idle;
        for (int i = 0; i < rings.workers.size(); i++) {
            Worker w = new Worker(rings.workers.get(i), rings.requests.get(i), rings.replies.get(i));
            w.onReply = (type, buf, off, len) -> onReply(w, type, buf, off, len);
            workers.add(w);
        }
        this.replyThread = Thread.ofPlatform().daemon().name("symmem4j-serving-replies").start(this::readReplies);
    }

    /**
     * Collective with {@link WorkerProcess#serve} on every other rank of the group: makes the rings; this rank is the
     * router (and must own the shared weights).
     *
     * @param group        the host group: this rank and the worker processes
     * @param ringCapacity bytes of each ring, a power of two; a batch's message (its features and the network's
     *                     configuration) must fit an eighth of it
     * @return the workers, for {@link ModelRouter#ModelRouter(org.symmem4j.serving.weights.SharedWeights,
     *         RouterOptions, io.micrometer.core.instrument.MeterRegistry, ProcessWorkers)}
     */
    public static ProcessWorkers create(Group group, int ringCapacity) {
        return create(group, ringCapacity, defaultIdleStrategy());
    }

    /**
     * As {@link #create(Group, int)}, with the idle strategy of the reply thread (see the class comment).
     *
     * @param group        the host group: this rank and the worker processes
     * @param ringCapacity bytes of each ring, a power of two
     * @param idle         what the reply thread does after a poll of every reply ring found nothing; used by that
     *                     thread alone (do not share it with another thread)
     * @return the workers
     */
    public static ProcessWorkers create(Group group, int ringCapacity, IdleStrategy idle) {
        Objects.requireNonNull(group, "group");
        Objects.requireNonNull(idle, "idle");
        return new ProcessWorkers(group, WorkerRings.create(group, group.rank(), ringCapacity), ringCapacity, idle);
    }

    /** {@return the worker ranks still alive} */
    public List<Integer> liveWorkers() {
        return workers.stream().filter(w -> w.alive).map(w -> w.rank).toList();
    }

    /** {@return every worker rank} */
    public List<Integer> workers() {
        return workers.stream().map(w -> w.rank).toList();
    }

    /**
     * @param rank a worker rank
     * @return the batches it answered
     */
    public long batchesAnswered(int rank) {
        return workers.stream().filter(w -> w.rank == rank).mapToLong(w -> w.batches).sum();
    }

    /**
     * Sends a batch to a live worker; the dispatch now holds {@code served}'s reference (the caller's).
     *
     * @throws ServingException OVERLOADED when every live worker's ring is full, FAILED when none lives or the batch
     *         does not fit a ring (the caller still holds the reference then)
     */
    Dispatch submit(String model, ServedVersion served, INDArray features) {
        long id = ids.incrementAndGet();
        String key = org.symmem4j.serving.weights.SharedWeights.key(model, served.version);
        WireConfigs.Config config = new WireConfigs.Config(served.spec.kind(), served.spec.configJson());
        byte[] referring = BatchWire.batch(id, served.version, model, null, features); // the usual message
        byte[] carrying = null; // made when a worker first needs this version's configuration
        int maxPayload = workers.get(0).requests.maxPayload();
        checkFits(model, features, referring.length, maxPayload);
        List<Worker> order = new ArrayList<>(workers);
        java.util.Collections.rotate(order, (int) (turn.getAndIncrement() % order.size()));
        Map<Worker, Integer> loads = new HashMap<>(); // read once: other threads change them while this one sorts
        for (Worker w : order) {
            loads.put(w, load(w));
        }
        order.sort(Comparator.comparingInt(loads::get)); // stable: round robin among equally loaded workers
        boolean anyAlive = false;
        for (Worker w : order) {
            synchronized (w) { // the mirror changes in the order the ring takes the messages
                if (!w.alive) {
                    continue;
                }
                anyAlive = true;
                boolean carry = w.configs.mustCarry(key, config);
                if (carry && carrying == null) {
                    carrying = BatchWire.batch(id, served.version, model, config, features);
                    checkFits(model, features, carrying.length, maxPayload);
                }
                Dispatch d = new Dispatch(served, w.rank);
                w.inFlight.put(id, d); // before the offer: the reply may come before offer returns
                if (w.requests.offer(BatchWire.BATCH, carry ? carrying : referring)) {
                    w.configs.sent(key, config, carry);
                    if (carry) {
                        configsCarried.incrementAndGet();
                    }
                    return d;
                }
                w.inFlight.remove(id);
            }
        }
        if (!anyAlive) {
            throw new ServingException(Kind.FAILED, "model '" + model + "': no worker process is alive ("
                    + deathNotes() + "; fix: see those processes' output for why they exited, then start the router"
                    + " and its workers again)");
        }
        throw new ServingException(Kind.OVERLOADED, "model '" + model + "' is overloaded: the request ring of every"
                + " live worker process (ranks " + liveWorkers() + ", ringCapacity=" + ringCapacity + ") is full (fix:"
                + " retry later, or start more worker processes, or create ProcessWorkers with a larger ringCapacity)");
    }

    private void checkFits(String model, INDArray features, int bytes, int maxPayload) {
        if (bytes > maxPayload) {
            throw new ServingException(Kind.FAILED, "model '" + model + "' batch of rows=" + features.size(0)
                    + " takes bytes=" + bytes + " on the ring, more than its maxPayload=" + maxPayload
                    + " (ringCapacity=" + ringCapacity + "; fix: create ProcessWorkers with ringCapacity >= "
                    + Integer.highestOneBit(bytes * 8 + 64) * 2 + ", or lower RouterOptions.maxBatch)");
        }
    }

    /**
     * {@return the batches sent with their version's configuration: one per version and worker, unless a worker
     * dropped a configuration it held (more than {@value WireConfigs#CAPACITY} versions since its last use)}
     */
    long configurationsCarried() {
        return configsCarried.get();
    }

    private int load(Worker w) {
        synchronized (w) {
            return w.alive ? w.inFlight.size() : Integer.MAX_VALUE;
        }
    }

    private String deathNotes() {
        List<String> notes = new ArrayList<>();
        for (Worker w : workers) {
            synchronized (w) {
                if (!w.alive) {
                    notes.add(w.deathNote);
                }
            }
        }
        return String.join("; ", notes);
    }

    // ------------------------------------------------------------------------------------------ reply thread

    private void readReplies() {
        idle.reset();
        long nextLifeCheck = System.nanoTime() + LIFE_CHECK_NANOS;
        try {
            while (!stopReplies) {
                int got = 0;
                for (Worker w : workers) {
                    if (w.alive) {
                        got += w.replies.poll(w.onReply, 16);
                    }
                }
                if (got > 0) {
                    idle.reset();
                } else {
                    idle.idle(); // parks at most the strategy's cap, then polls again: no wake-up to lose
                }
                long now = System.nanoTime();
                if (now - nextLifeCheck >= 0) {
                    nextLifeCheck = now + LIFE_CHECK_NANOS;
                    for (Worker w : workers) {
                        if (w.alive && !group.isAlive(w.rank)) {
                            buried(w);
                        }
                    }
                }
            }
        } catch (Throwable t) { // fail what waits instead of leaving it to time out
            replyFailure = t;
            for (Worker w : workers) {
                failInFlight(w, "the router's reply thread failed: " + t);
            }
        }
    }

    private void onReply(Worker w, int type, MemorySegment buffer, long offset, int length) {
        long id = BatchWire.replyId(buffer, offset);
        Dispatch d;
        synchronized (w) {
            d = w.inFlight.remove(id);
        }
        if (d == null) {
            throw org.symmem4j.parallel.Invariants.violated("a reply from worker process rank=" + w.rank + " for"
                    + " batch id=" + id + ", which is not in flight to it");
        }
        if (type == BatchWire.OUTPUT) {
            INDArray out = BatchWire.readOutput(buffer, offset, length); // copied out of the ring
            w.batches++; // only this thread writes it
            d.finish(out, null);
        } else {
            d.finish(null, new ServingException(Kind.FAILED, "model version=" + d.served.version + " failed in "
                    + BatchWire.readError(buffer, offset, length) + " (fix: act on this cause, the model's own"
                    + " failure; when only this version fails, rollback serves the previous one)"));
        }
    }

    /** A worker exited: read what it answered before, then fail what it never will. */
    private void buried(Worker w) {
        w.replies.poll(w.onReply, Integer.MAX_VALUE);
        failInFlight(w, null);
    }

    private void failInFlight(Worker w, String why) {
        List<Dispatch> lost;
        String note;
        synchronized (w) {
            if (w.alive) {
                w.alive = false;
                w.deathNote = why != null ? why : "worker process " + group.describe(w.rank) + " exited";
            }
            note = w.deathNote;
            lost = new ArrayList<>(w.inFlight.values());
            w.inFlight.clear();
            w.configs.clear(); // its cache died with it
        }
        for (Dispatch d : lost) {
            d.finish(null, new ServingException(Kind.FAILED, note + " with this batch of version="
                    + d.served.version + " in flight (its requests are not answered; fix: retry them: the router"
                    + " goes on with worker processes " + liveWorkers() + ")"));
        }
    }

    /**
     * Collective with the workers: sends each live worker stop (after the batches it has), waits for the replies
     * in flight (bounded by the group's timeout), then frees the rings. Close the router first.
     */
    @Override
    public synchronized void close() {
        if (closed) {
            return;
        }
        closed = true;
        for (Worker w : workers) {
            synchronized (w) {
                if (w.alive) {
                    w.requests.put(BatchWire.STOP, new byte[0]); // waits (bounded) while its ring is full
                }
            }
        }
        long deadline = System.nanoTime() + group.options().timeout().toNanos();
        while (replyFailure == null && workers.stream().anyMatch(this::busy) && System.nanoTime() < deadline) {
            LockSupport.parkNanos(100_000);
        }
        stopReplies = true;
        try {
            replyThread.join(TimeUnit.NANOSECONDS.toMillis(group.options().timeout().toNanos()) + 1);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        for (Worker w : workers) {
            if (busy(w)) {
                failInFlight(w, "worker process " + group.describe(w.rank) + " did not answer before close");
            }
        }
        rings.close();
    }

    private boolean busy(Worker w) {
        synchronized (w) {
            return w.alive && !w.inFlight.isEmpty();
        }
    }
}
