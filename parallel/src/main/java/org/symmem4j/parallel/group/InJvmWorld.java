package org.symmem4j.parallel.group;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReferenceArray;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.ReentrantLock;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.Configuration;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.GroupAbort;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.Invariants;
import org.symmem4j.parallel.PeerTimeoutException;
import org.symmem4j.parallel.SymmemException;
import org.symmem4j.parallel.SymmetricMemory;
import org.symmem4j.parallel.Transport;
import org.symmem4j.parallel.affinity.RankAffinity;
import org.symmem4j.parallel.host.InJvmTransport;
import org.symmem4j.parallel.rendezvous.InMemoryStore;

/**
 * A group whose ranks are threads of this JVM. Create the world once, then each rank's thread
 * calls {@link #join(int)} with its rank; the thread that joins is the rank's owner, and peers
 * treat its death as the rank leaving ({@link PeerTimeoutException.Reason#PEER_EXITED}).
 *
 * <pre>{@code
 * try (InJvmWorld world = InJvmWorld.create(4)) {
 *     List<float[]> results = InJvmWorld.runOnEveryRank(world, group -> {
 *         try (Communicator comm = Communicator.create(group)) { ... }
 *     });
 * }
 * }</pre>
 */
public final class InJvmWorld implements AutoCloseable {

    /**
     * Work one rank does; may throw.
     *
     * @param <T> what the rank returns
     */
    @FunctionalInterface
    public interface RankTask<T> {
        /**
         * Runs on the rank's own thread.
         *
         * @param group the rank's group
         * @return the rank's result
         * @throws Exception anything the work throws; {@link #runOnEveryRank} rethrows the first
         */
        T run(Group group) throws Exception;
    }

    private final int worldSize;
    private final GroupOptions options;
    private final InMemoryStore store = new InMemoryStore();
    private final Transport transport;
    private final Transport hostTransport;
    private final AtomicReferenceArray<Thread> owners;
    private final ReentrantLock exchangeLock = new ReentrantLock();
    private final Condition exchangeChanged = exchangeLock.newCondition();
    private final Map<String, Exchange> exchanges = new HashMap<>();
    /**
     * Every member's abort state of each group, by the group's exchange namespace: the ranks are threads
     * of this JVM, so an exchange sees a peer's abort at once, as the contract of {@link Group#abort}
     * asks, rather than when the peer's thread ends or the timeout passes.
     */
    private final Map<String, AtomicReferenceArray<GroupAbort>> abortsByGroup = new ConcurrentHashMap<>();
    private final List<AutoCloseable> resources = new ArrayList<>();
    /** Who is dead, for {@link Group#shrink}: null unless created shrinking ({@link #createShrinking}). */
    private final InJvmMembership membership;

    private InJvmWorld(int worldSize, GroupOptions options, Transport transport) {
        this(worldSize, options, transport, null);
    }

    private InJvmWorld(int worldSize, GroupOptions options, Transport transport, InJvmMembership membership) {
        if (worldSize < 1) {
            throw new IllegalArgumentException("worldSize=" + worldSize + " must be >= 1 (the number of ranks;"
                    + " fix: pass e.g."
                    + " InJvmWorld.create(2))");
        }
        Configuration.validate(); // a bad -Dsymmem4j.* value fails here, not inside a collective
        this.worldSize = worldSize;
        this.options = Objects.requireNonNull(options, "options");
        this.transport = Objects.requireNonNull(transport, "transport");
        // a device transport's control plane needs host memory the threads share: the world's own
        this.hostTransport = transport instanceof InJvmTransport ? transport : new InJvmTransport();
        this.owners = new AtomicReferenceArray<>(worldSize);
        this.membership = membership;
    }

    /**
     * A world of {@code worldSize} ranks with {@link GroupOptions#defaults()}.
     *
     * @param worldSize number of ranks (threads), at least 1
     * @return the world; each rank's thread calls {@link #join(int)}
     * @throws IllegalArgumentException when {@code worldSize} is below 1
     */
    public static InJvmWorld create(int worldSize) {
        return new InJvmWorld(worldSize, GroupOptions.defaults(), new InJvmTransport());
    }

    /**
     * A world of {@code worldSize} ranks.
     *
     * @param worldSize number of ranks (threads), at least 1
     * @param options   timeout and waiting of every group of this world
     * @return the world; each rank's thread calls {@link #join(int)}
     * @throws IllegalArgumentException when {@code worldSize} is below 1
     */
    public static InJvmWorld create(int worldSize, GroupOptions options) {
        return new InJvmWorld(worldSize, options, new InJvmTransport());
    }

    /**
     * A world of {@code worldSize} ranks on host memory whose world group can shrink in place
     * ({@link Group#canShrink()}, {@link Group#shrink(java.util.function.IntFunction)}), as a process group under
     * {@code symmem4j-run --on-failure shrink} can: the world is the membership authority. A rank whose task in
     * {@link #runOnEveryRank(InJvmWorld, RankTask)} throws is dead (as a process that exits with an error); the
     * survivors' {@code shrink()} waits (at most the timeout) until one is, and joins them into a new world of their
     * own, numbered densely in their old order, which this world closes with itself. A task that returns is not dead
     * (a rank whose replica was lost leaves that way). Sub-groups cannot shrink (shrink the world's group, or a
     * {@link org.symmem4j.parallel.DeviceMesh} over it). Run its ranks with {@link #runOnEveryRankSurviving}, which
     * returns the survivors' results and the dead ranks' failures as a value ({@link #runOnEveryRank(InJvmWorld,
     * RankTask)} throws the first failure, as on any world).
     *
     * @param worldSize number of ranks (threads), at least 1
     * @param options   timeout and waiting of every group of this world and of the worlds its shrinks form
     * @return the world; run its ranks with {@link #runOnEveryRank(InJvmWorld, RankTask)}, which announces the dead
     * @throws IllegalArgumentException when {@code worldSize} is below 1
     */
    public static InJvmWorld createShrinking(int worldSize, GroupOptions options) {
        return new InJvmWorld(worldSize, options, new InJvmTransport(), InJvmMembership.first(Math.max(worldSize, 0)));
    }

    /** The survivors' world of a shrink of this one: the same options and transport, closed with this world. */
    InJvmWorld formShrunk(int size, InJvmMembership next) {
        InJvmWorld shrunk = new InJvmWorld(size, options, transport, next);
        track(shrunk);
        return shrunk;
    }

    /** {@return the membership authority of a shrinking world, or null} */
    InJvmMembership membership() {
        return membership;
    }

    /**
     * A world of {@code worldSize} ranks whose groups live on {@code transport}: every group's
     * {@link Group#transport()} is it, so {@link SymmetricMemory#allocate(Group, long)} and
     * {@link Communicator#create(Group)} give that transport's memory and communicators, and code
     * that uses the groups never names the transport's classes. For GPUs, one per rank:
     *
     * <pre>{@code
     * try (InJvmWorld world = InJvmWorld.create(2, GroupOptions.defaults(), CudaTransport.create())) {
     *     InJvmWorld.runOnEveryRank(world, group -> {
     *         try (SymmetricMemory grads = SymmetricMemory.allocate(group, bytes);   // device memory
     *              Communicator comm = Communicator.create(group)) {
     *             grads.copyFromHost(hostGrads, 0);
     *             comm.allReduce(grads, 0, count, DType.FLOAT32, ReduceOp.SUM, Algorithm.TWO_SHOT);
     *             grads.copyToHost(0, hostGrads);                                   // waits for the GPU
     *         }
     *         return null;
     *     });
     * }
     * }</pre>
     *
     * The transport may be shared by several worlds; the world does not close it.
     *
     * @param worldSize number of ranks (threads), at least 1
     * @param options   timeout and waiting of every group of this world
     * @param transport the transport of every group of this world (for example {@code CudaTransport.create()})
     * @return the world; each rank's thread calls {@link #join(int)}
     * @throws IllegalArgumentException when {@code worldSize} is below 1
     * @throws NullPointerException     when {@code options} or {@code transport} is null
     */
    public static InJvmWorld create(int worldSize, GroupOptions options, Transport transport) {
        return new InJvmWorld(worldSize, options, transport);
    }

    /**
     * The number of ranks.
     *
     * @return the size given at creation
     */
    public int worldSize() {
        return worldSize;
    }

    /**
     * The options of this world's groups.
     *
     * @return the options given at creation
     */
    public GroupOptions options() {
        return options;
    }

    /**
     * Called by rank {@code rank}'s own thread; each rank joins once.
     *
     * @param rank this thread's rank, 0..worldSize-1
     * @return the rank's group
     * @throws IllegalArgumentException when {@code rank} is out of range
     * @throws IllegalStateException    when the rank already joined
     */
    public Group join(int rank) {
        if (rank < 0 || rank >= worldSize) {
            throw new IllegalArgumentException("rank=" + rank + " outside [0, " + worldSize + ") for"
                    + " worldSize=" + worldSize
                    + " (fix: join ranks 0 .. " + (worldSize - 1) + ", each from its own thread)");
        }
        Thread me = Thread.currentThread();
        if (!owners.compareAndSet(rank, null, me)) {
            throw new IllegalStateException("rank=" + rank + " already joined by thread '" + owners.get(rank).getName()
                    + "' (fix: join each rank once, from its own thread)");
        }
        return new InJvmGroup(this, rank);
    }

    /** Pins the calling rank thread as {@code affinity} says and returns {@code rank}: the thread fails before it joins. */
    private static int rankPinned(RankAffinity affinity, int rank) {
        affinity.pinCurrentThread(rank);
        return rank;
    }

    /**
     * Runs {@code task} on {@code worldSize} new platform threads, one per rank, each with its
     * joined group, and returns the results in rank order. If any rank fails, waits for the others
     * (their waits fail within the timeout, so this returns) and throws the first failure with the
     * rest suppressed.
     *
     * @param <T>   what each rank returns
     * @param world the world whose ranks run it
     * @param task  the work of one rank
     * @return the ranks' results, in rank order
     * @throws SymmemException when a rank's task threw (the first rank's failure, in rank order, wrapped
     *                         with the others' suppressed), when this thread was interrupted while waiting
     *                         for the ranks, or when a rank was still running four timeouts (plus 30 s) after
     *                         the start (a wait that ignores the timeout)
     */
    public static <T> List<T> runOnEveryRank(InJvmWorld world, RankTask<T> task) {
        return runOnEveryRankSurviving(world, task).orThrow();
    }

    /**
     * Runs {@code task} on every rank, as {@link #runOnEveryRank(InJvmWorld, RankTask)} does, and returns how each
     * rank's task ended instead of throwing a rank's failure: on a world made by {@link #createShrinking}, the
     * survivors' results and the dead ranks' failures ({@link RankOutcomes}; {@link RankOutcomes#orThrow()} is what
     * {@code runOnEveryRank} returns or throws).
     *
     * @param <T>   what each rank returns
     * @param world the world whose ranks run it
     * @param task  the work of one rank
     * @return every rank's result or failure
     * @throws SymmemException when this thread was interrupted while waiting for the ranks, or when a rank was still
     *                         running four timeouts (plus 30 s) after the start (a wait that ignores the timeout)
     */
    public static <T> RankOutcomes<T> runOnEveryRankSurviving(InJvmWorld world, RankTask<T> task) {
        int n = world.worldSize;
        List<T> results = new ArrayList<>(java.util.Collections.nCopies(n, null));
        Throwable[] failures = new Throwable[n];
        Thread[] threads = new Thread[n];
        // symmem4j.affinity: checked before any rank starts; each rank pins its own thread before it joins
        RankAffinity affinity = RankAffinity.fromConfiguration(n);
        for (int r = 0; r < n; r++) {
            final int rank = r;
            threads[r] = Thread.ofPlatform().name("symmem4j-rank-" + r).unstarted(() -> {
                try (Group g = world.join(rankPinned(affinity, rank))) {
                    results.set(rank, task.run(g));
                } catch (Throwable t) {
                    failures[rank] = t;
                    if (world.membership != null) {
                        world.membership.died(rank); // a shrinking world's survivors go on without it
                    }
                }
            });
        }
        for (Thread t : threads) {
            t.start();
        }
        // Every wait inside a rank is bounded by the timeout, so ranks end within a few timeouts;
        // the join bound only turns a bug (an unbounded wait) into an error instead of a hang.
        long joinBoundNanos = world.options.timeout().multipliedBy(4).plus(Duration.ofSeconds(30)).toNanos();
        long deadline = System.nanoTime() + joinBoundNanos;
        for (int r = 0; r < n; r++) {
            boolean ended;
            try {
                long left = deadline - System.nanoTime();
                // join's answer, never isAlive() read after it: on JDK 25 join(Duration) can return true (the
                // thread terminated) while isAlive() still says true for a moment, which reported hangs that
                // never happened in about 1 of 10,000 calls (RunOnEveryRankStressTest)
                ended = threads[r].join(Duration.ofNanos(Math.max(1, left)));
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new SymmemException("interrupted while waiting for rank threads (expected the caller's thread to"
                        + " wait until every rank returned; fix: do not interrupt the thread that runs"
                        + " InJvmWorld.run, or cancel the ranks' work by failing one rank)", e);
            }
            if (!ended) {
                SymmemException hang = new SymmemException("rank " + r + " still running after "
                        + Duration.ofNanos(joinBoundNanos) + " (expected every wait to end by the group's timeout;"
                        + " fix: if the rank's own code blocks outside symmem4j, bound that wait; if the stack trace"
                        + " below is in symmem4j, " + Invariants.HOW_TO_REPORT + ")");
                hang.setStackTrace(threads[r].getStackTrace());
                throw hang;
            }
        }
        // Thread.join orders every rank thread's writes of results and failures before these reads
        return new RankOutcomes<>(results, failures);
    }

    /**
     * Convenience: creates a world, runs {@code task} on every rank, closes the world.
     *
     * @param <T>       what each rank returns
     * @param worldSize number of ranks (threads), at least 1
     * @param options   timeout and waiting
     * @param task      the work of one rank
     * @return the ranks' results, in rank order
     * @throws IllegalArgumentException when {@code worldSize} is below 1
     * @throws SymmemException         when a rank's task threw (the first rank's failure, in rank order, wrapped
     *                                 with the others' suppressed), when this thread was interrupted while waiting
     *                                 for the ranks, or when a rank was still running four timeouts (plus 30 s) after
     *                                 the start (a wait that ignores the timeout)
     */
    public static <T> List<T> runOnEveryRank(int worldSize, GroupOptions options, RankTask<T> task) {
        try (InJvmWorld world = create(worldSize, options)) {
            return runOnEveryRank(world, task);
        }
    }

    /**
     * Convenience: creates a world on {@code transport}, runs {@code task} on every rank, closes the world.
     *
     * @param <T>       what each rank returns
     * @param worldSize number of ranks (threads), at least 1
     * @param options   timeout and waiting
     * @param transport the transport of every rank's group (see {@link #create(int, GroupOptions, Transport)})
     * @param task      the work of one rank
     * @return the ranks' results, in rank order
     * @throws IllegalArgumentException when {@code worldSize} is below 1
     * @throws SymmemException         when a rank's task threw (the first rank's failure, in rank order, wrapped
     *                                 with the others' suppressed), when this thread was interrupted while waiting
     *                                 for the ranks, or when a rank was still running four timeouts (plus 30 s) after
     *                                 the start (a wait that ignores the timeout)
     */
    public static <T> List<T> runOnEveryRank(int worldSize, GroupOptions options, Transport transport, RankTask<T> task) {
        try (InJvmWorld world = create(worldSize, options, transport)) {
            return runOnEveryRank(world, task);
        }
    }

    InMemoryStore store() {
        return store;
    }

    /**
     * The transport of this world's groups.
     *
     * @return the transport given at creation ({@code host-in-jvm} unless another was given)
     */
    public Transport transport() {
        return transport;
    }

    /**
     * The host transport of this world's groups: {@link #transport()} when that is host memory, else
     * the world's own {@code host-in-jvm} transport, where device transports keep their control plane.
     *
     * @return the host transport
     */
    public Transport hostTransport() {
        return hostTransport;
    }

    Thread owner(int rank) {
        return owners.get(rank);
    }

    /**
     * Keeps {@code resource} to close with the world, in case its rank has not closed it by then (see
     * {@link #close()}: a resource's close on the world closer's thread never frees what a rank's thread may read).
     *
     * @param resource a memory or communicator of one of the world's ranks
     */
    public void track(AutoCloseable resource) {
        synchronized (resources) {
            resources.add(resource);
        }
    }

    /**
     * Drops a resource its rank closed itself.
     *
     * @param resource a resource passed to {@link #track} before
     */
    public void untrack(AutoCloseable resource) {
        synchronized (resources) {
            resources.remove(resource);
        }
    }

    /** Rank {@code rank} of the group whose exchange keys start with {@code namespace} makes its abort state known. */
    void registerAbort(String namespace, int rank, int groupSize, GroupAbort abort) {
        abortsByGroup.computeIfAbsent(namespace, k -> new AtomicReferenceArray<>(groupSize)).set(rank, abort);
    }

    /** The first abort raised by any rank of the group of {@code namespace} (this rank's own first), or null. */
    private GroupAbort.Cause abortOf(String namespace, Group group) {
        GroupAbort.Cause own = group.abortState().cause();
        if (own != null) {
            return own;
        }
        AtomicReferenceArray<GroupAbort> members = abortsByGroup.get(namespace);
        for (int p = 0; members != null && p < members.length(); p++) {
            GroupAbort peer = members.get(p);
            GroupAbort.Cause c = peer == null ? null : peer.cause();
            if (c != null) {
                return c;
            }
        }
        return null;
    }

    private void failIfAborted(String namespace, Group group, String key, int rank, List<Integer> missing) {
        GroupAbort.Cause aborted = abortOf(namespace, group);
        if (aborted != null) {
            throw new PeerTimeoutException("rank=" + rank + " set-up exchange '" + key + "': group aborted: "
                    + aborted.reason() + " (fix: see the aborting rank's error, which names the cause)", rank, missing,
                    "exchange " + key, PeerTimeoutException.Reason.PEER_ABORTED,
                    options.timeout());
        }
    }

    /**
     * Collective among the threads of {@code group} (the world, or one of its sub-groups): rank
     * {@code rank} of that group contributes {@code mine}; returns all contributions in the group's
     * rank order once all {@code group.worldSize()} ranks have contributed. {@code key} is unique
     * within the world (a sub-group's keys carry its id, {@code namespace}), so disjoint sub-groups
     * exchange at once. Fails on entry, and while waiting, once any rank of the group has aborted it.
     */
    Object[] exchange(String namespace, String key, int rank, Object mine, Group group) {
        int worldSize = group.worldSize();
        long deadline = System.nanoTime() + options.timeout().toNanos();
        long nextLivenessCheck = System.nanoTime() + options.livenessInterval().toNanos();
        exchangeLock.lock();
        try {
            Exchange ex = exchanges.computeIfAbsent(key, k -> new Exchange(worldSize));
            // an aborted group fails every exchange entered after the abort, on every rank: checked before
            // contributing, since a peer that failed this exchange left its contribution, and the last rank
            // to arrive would otherwise complete it as if nothing had happened
            failIfAborted(namespace, group, key, rank, ex.missing());
            if (ex.values[rank] != null) {
                throw Invariants.violated("rank=" + rank + " contributed twice to exchange '" + key + "'");
            }
            ex.values[rank] = mine;
            ex.arrived++;
            exchangeChanged.signalAll();
            while (ex.arrived < worldSize) {
                long now = System.nanoTime();
                List<Integer> missing = ex.missing();
                // a sub-group hears of its parent's (or a sibling's) abort here: no rank waits out the timeout
                failIfAborted(namespace, group, key, rank, missing);
                if (now >= nextLivenessCheck) {
                    nextLivenessCheck = now + options.livenessInterval().toNanos();
                    List<Integer> dead = missing.stream().filter(p -> !group.isAlive(p)).toList();
                    if (!dead.isEmpty()) {
                        throw new PeerTimeoutException("rank=" + rank + " set-up exchange '" + key + "': "
                                + describeAll(group, dead) + " exited before arriving (fix: see that rank's own error,"
                                + " which names the cause)", rank, dead,
                                "exchange " + key, PeerTimeoutException.Reason.PEER_EXITED, options.timeout());
                    }
                }
                if (now >= deadline) {
                    throw new PeerTimeoutException("rank=" + rank + " set-up exchange '" + key + "': timed out after "
                            + options.timeout() + " waiting for ranks " + missing
                            + " (they never arrived; fix: check that every rank calls the same collectives in"
                            + " the same order)",
                            rank, missing, "exchange " + key, PeerTimeoutException.Reason.DEADLINE_PASSED, options.timeout());
                }
                exchangeChanged.await(Math.min(deadline, nextLivenessCheck) - now, TimeUnit.NANOSECONDS);
            }
            Object[] out = ex.values.clone();
            if (++ex.collected == worldSize) {
                exchanges.remove(key);
            }
            return out;
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new SymmemException("rank=" + rank + " interrupted in set-up exchange '" + key + "' (expected it to"
                    + " wait for every rank; fix: do not interrupt a rank's thread during group set-up)", e);
        } finally {
            exchangeLock.unlock();
        }
    }

    static String describeAll(Group group, List<Integer> ranks) {
        return String.join(", ", ranks.stream().map(group::describe).toList());
    }

    /**
     * Closes the world: tells every resource its rank has not closed (for example after the rank's thread died, or
     * while a trainer's worker threads still finish after a failure). Such a symmetric memory is not freed under
     * threads that may still read it (its part is unmapped by its rank's own close, or once nothing holds it): its
     * group is aborted instead, so every later collective of the rank and its peers fails at once with an error that
     * says the world was closed.
     */
    @Override
    public void close() {
        List<AutoCloseable> left;
        synchronized (resources) {
            left = new ArrayList<>(resources);
            resources.clear();
        }
        for (AutoCloseable c : left) {
            try {
                c.close();
            } catch (Exception ignored) {
                // best effort: the world is going away
            }
        }
        store.close();
    }

    private static final class Exchange {
        final Object[] values;
        int arrived;
        int collected;

        Exchange(int n) {
            values = new Object[n];
        }

        List<Integer> missing() {
            List<Integer> m = new ArrayList<>();
            for (int i = 0; i < values.length; i++) {
                if (values[i] == null) {
                    m.add(i);
                }
            }
            return m;
        }

        @Override
        public String toString() {
            return Arrays.toString(values);
        }
    }
}
