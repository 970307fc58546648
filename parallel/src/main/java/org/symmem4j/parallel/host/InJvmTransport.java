package org.symmem4j.parallel.host;

import java.lang.foreign.Arena;
import java.lang.ref.Cleaner;
import java.lang.ref.WeakReference;
import java.lang.foreign.MemorySegment;
import java.util.Objects;
import java.util.concurrent.atomic.AtomicLong;
import org.symmem4j.parallel.memory.Pages;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.CommunicatorOptions;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.GroupAbort;
import org.symmem4j.parallel.SymmemException;
import org.symmem4j.parallel.SymmetricMemory;
import org.symmem4j.parallel.Transport;
import org.symmem4j.parallel.TransportCapabilities;
import org.symmem4j.parallel.TransportCapabilities.Capability;
import org.symmem4j.parallel.control.SignalPadLayout;

/**
 * Ranks are threads of one JVM: each rank allocates its buffer and pad off-heap in a shared arena,
 * and the ranks swap segments through the world's in-memory exchange. Any existing off-heap
 * segment can be registered, so DL4J's gradient view is reduced in place.
 */
public final class InJvmTransport implements Transport {

    /** The transport's name, as {@code transportName()} reports it and configuration selects it. */
    public static final String NAME = Transport.HOST_IN_JVM;

    /** A transport for groups whose ranks are threads of this JVM (groups that are {@link PeerThreads}). */
    public InJvmTransport() {
    }

    private final AtomicLong nextId = new AtomicLong();

    @Override
    public String name() {
        return NAME;
    }

    /** A rank's part of a new memory; {@code problem}: why peers could not use its buffer, or null. */
    private record Contribution(MemorySegment data, MemorySegment pad, long idProposal, String problem) {
    }

    @Override
    public SymmetricMemory allocate(Group group, long bytes) {
        PeerThreads peers = inJvm(group);
        if (bytes < 0) {
            throw new IllegalArgumentException("bytes=" + bytes + " must be >= 0 (fix: pass the size to"
                    + " allocate in bytes)");
        }
        Arena arena = Arena.ofShared();
        // reserved, not committed: pages hold memory once written, and decommit gives them back
        MemorySegment data;
        try {
            data = bytes == 0 ? arena.allocate(0, 4096) : Pages.reserve(bytes, arena);
        } catch (RuntimeException e) {
            arena.close();
            throw e;
        }
        return share(group, peers, arena, data, "allocate", null, bytes == 0 ? -1 : Pages.MADV_DONTNEED);
    }

    @Override
    public SymmetricMemory register(Group group, MemorySegment buffer) {
        PeerThreads peers = inJvm(group);
        Objects.requireNonNull(buffer, "buffer");
        if (!buffer.isNative()) {
            throw new IllegalArgumentException("register needs an off-heap (native) segment; found a heap segment of "
                    + buffer.byteSize() + " bytes (fix: copy it off-heap, or allocate with SymmetricMemory.allocate)");
        }
        // Found here, refused on every rank after the exchange: peers' threads read this buffer, so one
        // confined to a thread (even this rank's own) or already freed could never be used by the group.
        String problem = !buffer.scope().isAlive() ? "its memory is freed: alive=false expected=true (register a segment"
                + " of an open arena)"
                : !buffer.isAccessibleBy(Thread.ofPlatform().unstarted(() -> { }))
                ? "it is confined to one thread: accessibleByPeerThreads=false expected=true (peers' threads read it;"
                + " register a segment of Arena.ofShared() or Arena.global())" : null;
        return share(group, peers, Arena.ofShared(), buffer, "register", problem, -1);
    }

    private SymmetricMemory share(Group g, PeerThreads peers, Arena arena, MemorySegment data, String what, String problem,
                                  int decommitAdvice) {
        int n = g.worldSize();
        int slots = SignalPadLayout.DEFAULT_SIGNAL_SLOTS;
        MemorySegment pad;
        try {
            pad = arena.allocate(SignalPadLayout.padBytes(n, slots), 4096);
            SignalPadLayout.initialize(pad, n, g.rank(), slots, data.byteSize());
        } catch (RuntimeException e) {
            arena.close();
            throw e;
        }
        Object[] all;
        try {
            // The exchange's lock orders the initialization above before peers read the pad.
            all = peers.allGatherObjects("symmetric-memory-" + what,
                    new Contribution(data, pad, g.rank() == 0 ? nextId.getAndIncrement() : -1, problem));
        } catch (RuntimeException e) {
            arena.close();
            throw e;
        }
        MemorySegment[] datas = new MemorySegment[n];
        MemorySegment[] pads = new MemorySegment[n];
        StringBuilder sizes = new StringBuilder();
        StringBuilder problems = new StringBuilder();
        boolean sameSize = true;
        for (int r = 0; r < n; r++) {
            Contribution c = (Contribution) all[r];
            datas[r] = c.data();
            pads[r] = c.pad();
            sameSize &= c.data().byteSize() == data.byteSize();
            sizes.append(r == 0 ? "" : ", ").append("rank=").append(r).append(" bytes=").append(c.data().byteSize());
            if (c.problem() != null) {
                problems.append(problems.isEmpty() ? "" : "; ").append("rank=").append(r).append("'s segment: ")
                        .append(c.problem());
            }
        }
        if (!problems.isEmpty()) {
            arena.close();
            throw new SymmemException("symmetric memory " + what + " refused on every rank: " + problems
                    + " (fix: register on every rank an open segment of Arena.ofShared() or Arena.global())");
        }
        if (!sameSize) {
            arena.close();
            throw new SymmemException("symmetric memory " + what + ": sizes differ across ranks: " + sizes
                    + " (fix: every rank must " + what + " the same number of bytes)");
        }
        long id = ((Contribution) all[0]).idProposal();
        RankPart part = new RankPart(arena, g, id);
        HostSymmetricMemory memory = new HostSymmetricMemory(g, NAME, id, data.byteSize(), slots, datas, pads, () -> {
            peers.forget(part);
            part.release();
        }, decommitAdvice);
        part.owner = new WeakReference<>(memory);
        peers.keepUntilWorldCloses(part);
        return memory;
    }

    /** Frees what a closed world orphaned once nothing holds its memory object ({@link RankPart#close()}). */
    private static final Cleaner ORPHANS = Cleaner.create(Thread.ofPlatform().daemon().name("symmem4j-orphaned-memory")
            .factory());

    /**
     * One rank's part of a symmetric memory (its arena: the pad, and the buffer when allocated here), freed once by
     * whoever may free it: the rank's own {@link HostSymmetricMemory#close()}, or, for a part its rank never closed,
     * the {@link Cleaner} once the memory object is unreachable after the world closed.
     *
     * <p>Never by the world's close on another thread while the memory is open: the rank's threads read their own
     * part through segments without a lifetime check (an ND4J gradient view placed in the memory, and segments
     * reinterpreted over it to the global scope), and unmapping it under them crashed the JVM with SIGSEGV
     * ({@code ClosedWorldMemorySafetyTest}). The world's close aborts the group instead, naming the rank, so every
     * later collective fails with a Java exception, and leaves the part mapped.
     *
     * <p>Memory ordering: {@link #release()} and {@link #close()} run on different threads (the rank's, the world
     * closer's, the cleaner's) and decide under this object's monitor: a monitor exit releases and the next enter
     * acquires, so whichever comes second sees {@code released}/{@code orphaned} as the first left them. The rank's own
     * accesses precede its close in program order, so they happen-before the unmap that close performs.
     */
    private static final class RankPart implements AutoCloseable {
        private final Arena arena;
        private final int rank;
        private final long id;
        /**
         * The memory whose part this is: written once before {@code keepUntilWorldCloses} publishes the part (under
         * the world's lock: that lock's release there and acquire in the world's close order this write before the
         * closer's read). Weak: the part, and the cleaner's action that holds it, must not keep the memory reachable.
         */
        private WeakReference<HostSymmetricMemory> owner;
        /** The rank's abort record; dropped once used or freed (guarded by this object's monitor). */
        private GroupAbort abort;
        private boolean released;
        private boolean orphaned;

        RankPart(Arena arena, Group group, long id) {
            this.arena = arena;
            this.rank = group.rank();
            this.id = id;
            this.abort = group.abortState();
        }

        /** The rank's close (or the cleaner): frees the part, once. */
        synchronized void release() {
            if (!released) {
                released = true;
                abort = null;
                arena.close();
            }
        }

        /**
         * The world closes with this part still open: the rank, or a thread working for it (a trainer's worker), may
         * still read it, so it is not freed here. The group is aborted, so the rank's next collective and its peers'
         * fail at once with this reason; the part is freed by the rank's own close, or once its memory object is
         * unreachable.
         */
        @Override
        public void close() {
            GroupAbort toRaise;
            synchronized (this) {
                if (released || orphaned) {
                    return;
                }
                orphaned = true;
                toRaise = abort;
                abort = null;
            }
            // short enough for the pad's reason line (SignalPadLayout.ABORT_REASON_MAX_BYTES), so peers read all of it
            toRaise.raise(rank, "the world was closed while rank " + rank + " still had symmetric memory id=" + id
                    + " open (fix: close the trainer, or the rank's memories, before InJvmWorld.close; retry a failed run"
                    + " on a new world)");
            HostSymmetricMemory memory = owner.get();
            if (memory == null) {
                release(); // nothing holds the memory object, so no rank thread reads its part through it
            } else {
                ORPHANS.register(memory, this::release);
            }
        }
    }

    @Override
    public Communicator communicator(Group group, CommunicatorOptions options) {
        inJvm(group); // refuses a group of another kind, naming it
        // a group on a GPU transport reaches this one as its host transport (Group.hostTransport()): the scratch of its
        // host collectives is this transport's memory, never the group's own (device memory Java cannot touch)
        return group.transport().deviceMemory() ? new HostCommunicator(group, this, options)
                : new HostCommunicator(group, options);
    }

    /**
     * This transport: it keeps nothing per rank (a sub-group's ranks exchange their segments through
     * the sub-group's own exchange, and memory ids come from one counter, unique across sub-groups).
     */
    @Override
    public Transport forSubGroup(int[] parentRanks) {
        return this;
    }

    /**
     * Everything a group of threads needs, nothing exchanged: any off-heap segment every rank's thread can read is
     * registered, every peer's memory is a segment of this JVM. Not device memory, not processes.
     */
    @Override
    public TransportCapabilities capabilities(Group group) {
        return capabilities();
    }

    /**
     * The answers, alike for every group of this transport (its ranks are threads of this JVM).
     *
     * @return what {@link #capabilities(Group)} answers for any group
     */
    public static TransportCapabilities capabilities() {
        return TransportCapabilities.of(NAME)
                .yes(Capability.ALLOCATE, "off-heap segments")
                .yes(Capability.REGISTER, "any off-heap segment of a shared or global arena")
                .yes(Capability.PEER_ACCESS, "")
                .yes(Capability.IN_PLACE_REDUCE_SCATTER, "")
                .yes(Capability.IN_PLACE_ALL_GATHER, "")
                .yes(Capability.SUB_GROUPS, "")
                .no(Capability.DEVICE_MEMORY, "transport " + NAME + " holds host memory (off-heap segments); for GPU"
                        + " memory create the group on the cuda transport")
                .no(Capability.CROSS_PROCESS, "transport " + NAME + " serves ranks that are threads of one JVM"
                        + " (InJvmWorld); for one process per rank join a ProcessGroup (transport " + HOST_SHM + ")")
                .yes(Capability.DECOMMIT, "allocated memory: reserved anonymous pages (MAP_NORESERVE), given back with"
                        + " MADV_DONTNEED; not registered memory")
                .build();
    }

    private static PeerThreads inJvm(Group group) {
        if (group instanceof PeerThreads peers) {
            return peers;
        }
        throw new IllegalArgumentException("transport " + NAME + " needs a group whose ranks are threads of this JVM (PeerThreads: InJvmWorld's groups); found "
                + (group == null ? "null" : group.getClass().getSimpleName())
                    + " (fix: use group.transport() of an InJvmWorld group)");
    }
}
