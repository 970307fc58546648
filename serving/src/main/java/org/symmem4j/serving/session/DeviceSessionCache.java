package org.symmem4j.serving.session;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Objects;

import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.DeviceCommunicator;
import org.symmem4j.parallel.PeerTimeoutException;
import org.symmem4j.parallel.layout.ParameterCacheLayout;
import org.symmem4j.state.DeviceParameterCache;

/**
 * The GPU form of {@link SessionCache}: per-session decoding state in CUDA symmetric memory, built on
 * {@link DeviceParameterCache} (one entry per session, named {@code "s/" + id}; its budget and LRU eviction are the
 * session cache's). A worker {@link #save}s a session's state into its own rank's part; any rank {@link #find}s the
 * latest saved state and reads it in place: {@link Block#deviceAddress()} is the owner's memory as mapped on the
 * reader's GPU (zero-copy, for the reader's kernels), or {@link #copyInto} copies it into the reader's own device
 * buffer (a peer copy on the reader's stream).
 *
 * <pre>{@code
 * try (DeviceSessionCache cache = DeviceSessionCache.create(comm, 64L << 20, 1024, 64 << 10)) {   // collective
 *     long n = cache.copyInto("user-17", myStateOnGpu);   // -1: a new session; any rank, any step
 *     ... step the network on the GPU ...
 *     cache.saveFromDevice("user-17", myStateOnGpu.asSlice(0, n));
 * }
 * }</pre>
 *
 * <ul>
 *   <li><b>Whose copy is current</b>: each save carries a stamp, larger than every stamp this rank saved or found
 *       before ({@code max(last + 1, nanoTime)}), so a save that follows this rank's find of the session (the router's
 *       one step of a session at a time: load, step, save) orders after the copy it continued. The stamp is the
 *       entry's version in the cache's directory, and the state's length its length less the 64 bytes reserved before
 *       the state (not written). {@link #find} looks the session up in
 *       every rank's part and takes the copy with the largest stamp; a stale copy in the finder's own part is removed
 *       then (a stale copy in another part is left to that part's LRU).</li>
 *   <li><b>A find is host loads</b>: the directory of {@link DeviceParameterCache} is host memory the ranks share, so
 *       finding a session reads no device memory and waits for no stream: only reading its bytes does (one peer
 *       copy, or the reader's kernel), and the check after use is host loads again.</li>
 *   <li><b>Eviction as on the host</b>: the blocks' budget evicts least recently used sessions (a find or a save is
 *       a use). Each rank keeps a ledger of the ids its part evicted last ({@code sessionsPerRank} of them, hashes,
 *       in a second {@link DeviceParameterCache} of one entry per rank, which never evicts); a session found in no
 *       part but in some rank's ledger throws {@link SessionExpiredException} ({@code EVICTED}), one found nowhere
 *       is unknown (-1, null). A session whose id left every ledger (more evictions since) reads as unknown, as the
 *       host cache's id whose slot was reused.</li>
 *   <li><b>Writer died</b>: a save is the owner's put; an owner that died in the middle of it leaves the entry's
 *       slot odd, and a reader waiting on it (bounded) throws {@link SessionExpiredException} ({@code WRITER_DIED}),
 *       never the half-written state.</li>
 *   <li><b>Checked after use</b>: a block pins nothing (as {@link DeviceParameterCache.View}): {@link #copyInto} and
 *       {@link #get} re-check {@link Block#isValid()} after their copy completed and find the session again when a
 *       newer save or an eviction freed it; a kernel reading {@link Block#deviceAddress()} does the same after its
 *       stream's synchronize.</li>
 * </ul>
 *
 * One thread per rank uses an instance. Created on a GPU communicator whose ranks map each other's memory (CUDA on
 * one machine); elsewhere use {@link SessionCache}. Tested on GPUs by {@code CudaDeviceSessionCacheTest}.
 */
public final class DeviceSessionCache implements AutoCloseable {

    /**
     * The bytes reserved before a session's state in its block (not written: the stamp and the length are the entry's
     * version and length in the directory); 64 keeps the state aligned.
     */
    public static final long HEADER_BYTES = 64;
    /** The longest id: the entry name's 68 bytes less the {@code "s/"} prefix. */
    public static final int MAX_ID_BYTES = 66;
    private static final String PREFIX = "s/";
    private static final String LEDGER = "evicted";

    /**
     * A session's latest saved state, in place: its owner's GPU memory as mapped on this rank's GPU.
     *
     * @param id     the session's id
     * @param owner  the rank whose part holds it (the rank that saved it)
     * @param stamp  its save's stamp
     * @param length the state's bytes
     * @param view   the cache entry (header and state)
     */
    public record Block(String id, int owner, long stamp, long length, DeviceParameterCache.View view) {
        /** {@return the state's bytes, in place (device memory of this rank's GPU's mapping)} */
        public MemorySegment data() {
            return view.data().asSlice(HEADER_BYTES, length);
        }

        /** {@return the state's device address on this rank's GPU (zero-copy)} */
        public long deviceAddress() {
            return view.deviceAddress() + HEADER_BYTES;
        }

        /** {@return true while no newer save, eviction or remove freed the bytes (check after reading them)} */
        public boolean isValid() {
            return view.isValid();
        }
    }

    private final int rank;
    private final int world;
    private final DeviceCommunicator gpu;
    private final DeviceParameterCache blocks;
    private final DeviceParameterCache ledger;
    private final long maxStateBytes;
    private final Arena arena = Arena.ofShared();
    /** Host staging for a save from host memory: header and state. */
    private final MemorySegment hostStage;
    /** Device staging for a save from device memory: header and state, one put. */
    private final MemorySegment deviceStage;
    /** This rank's ledger (owner side): hashes of the ids its part evicted last, a ring. */
    private final MemorySegment ledgerRing;
    private final MemorySegment ledgerCopy;
    private int ledgerNext;
    private long clock;

    private DeviceSessionCache(Communicator comm, DeviceCommunicator gpu, DeviceParameterCache blocks,
                               DeviceParameterCache ledger, long maxStateBytes, int sessionsPerRank) {
        this.rank = comm.group().rank();
        this.world = comm.group().worldSize();
        this.gpu = gpu;
        this.blocks = blocks;
        this.ledger = ledger;
        this.maxStateBytes = maxStateBytes;
        this.hostStage = arena.allocate(HEADER_BYTES + maxStateBytes, 64);
        this.deviceStage = gpu.allocateDevice(HEADER_BYTES + maxStateBytes);
        this.ledgerRing = arena.allocate(8L * sessionsPerRank, Long.BYTES);
        this.ledgerCopy = arena.allocate(8L * sessionsPerRank, Long.BYTES);
    }

    /**
     * Collective: a session cache in every rank's GPU memory.
     *
     * @param comm               this rank's communicator, of a GPU transport whose ranks map each other's memory
     * @param budgetBytesPerRank bytes of session blocks each rank's part holds (each state takes its bytes plus 64,
     *                           rounded up to 64, plus the cache's 64-byte block header): the eviction budget
     * @param sessionsPerRank    sessions each rank's part holds, at least 1
     * @param maxStateBytes      the largest state one save may store, at least 1
     * @return this rank's view; close it collectively
     * @throws IllegalArgumentException for a bad size, a budget that cannot hold one largest state beside its
     *         previous version, or ranks that disagree on the budget or sessions (on every rank, before anything is
     *         allocated)
     * @throws UnsupportedOperationException on a host communicator (use {@link SessionCache})
     */
    public static DeviceSessionCache create(Communicator comm, long budgetBytesPerRank, int sessionsPerRank,
                                            long maxStateBytes) {
        Objects.requireNonNull(comm, "comm");
        if (maxStateBytes < 1 || sessionsPerRank < 1) {
            throw new IllegalArgumentException("device session cache: maxStateBytes=" + maxStateBytes
                    + " sessionsPerRank=" + sessionsPerRank + ", expected both >= 1 (fix: pass positive sizes)");
        }
        long largest = blockBytes(HEADER_BYTES + maxStateBytes);
        if (budgetBytesPerRank < 2 * largest) {
            throw new IllegalArgumentException("device session cache: budgetBytesPerRank=" + budgetBytesPerRank
                    + " cannot hold two blocks of the largest state (maxStateBytes=" + maxStateBytes + " takes "
                    + largest + " bytes with its headers; a save writes beside the version it replaces; fix: a budget"
                    + " of at least " + 2 * largest + ", sized as sessions x state bytes)");
        }
        DeviceCommunicator gpu = comm.unwrap(DeviceCommunicator.class).orElseThrow(() ->
                new UnsupportedOperationException("device session cache on communicator=" + comm + ": not a GPU"
                        + " communicator (fix: SessionCache.create with the group, for a cache in host memory)"));
        DeviceParameterCache blocks = DeviceParameterCache.create(comm, budgetBytesPerRank, sessionsPerRank);
        DeviceParameterCache ledger = null;
        try {
            ledger = DeviceParameterCache.create(comm, 3 * blockBytes(8L * sessionsPerRank), 1);
            return new DeviceSessionCache(comm, gpu, blocks, ledger, maxStateBytes, sessionsPerRank);
        } catch (RuntimeException e) {
            if (ledger != null) {
                ledger.close();
            }
            blocks.close();
            throw e;
        }
    }

    private static long blockBytes(long dataBytes) {
        return ParameterCacheLayout.align64(dataBytes) + 64;
    }

    // ------------------------------------------------------------------------------------------ saves (owner)

    /**
     * Saves session {@code id}'s state from host memory into this rank's part (synchronous: published on return);
     * evicts least recently used sessions of this part as its budget needs.
     *
     * @param id    the session's id, 1..66 UTF-8 bytes
     * @param state host bytes, at most {@code maxStateBytes}
     * @return the save's stamp
     * @throws IllegalArgumentException for a bad id or a state larger than {@code maxStateBytes}, before anything is
     *         written
     */
    public long save(String id, MemorySegment state) {
        String name = name(id);
        checkSize(id, state);
        long stamp = nextStamp();
        MemorySegment.copy(state, 0, hostStage, HEADER_BYTES, state.byteSize());
        blocks.put(name, hostStage.asSlice(0, HEADER_BYTES + state.byteSize()), stamp);
        afterSave(id);
        return stamp;
    }

    /**
     * Saves session {@code id}'s state from this rank's device memory (after the work enqueued on this rank's stream,
     * e.g. the kernel that produced it) into this rank's part; synchronous, as {@link #save}.
     *
     * @param id    the session's id, 1..66 UTF-8 bytes
     * @param state device memory of this rank, at most {@code maxStateBytes}
     * @return the save's stamp
     * @throws IllegalArgumentException for a bad id or a state larger than {@code maxStateBytes}, before anything is
     *         written
     */
    public long saveFromDevice(String id, MemorySegment state) {
        String name = name(id);
        checkSize(id, state);
        long stamp = nextStamp();
        if (state.byteSize() > 0) {
            gpu.copyAsync(deviceStage.asSlice(HEADER_BYTES, state.byteSize()), state); // after the producing work
        }
        blocks.putFromDevice(name, deviceStage.asSlice(0, HEADER_BYTES + state.byteSize()), stamp); // waits
        afterSave(id);
        return stamp;
    }

    private void checkSize(String id, MemorySegment state) {
        Objects.requireNonNull(state, "state");
        if (state.byteSize() > maxStateBytes) {
            throw new IllegalArgumentException("device session cache save of session '" + id + "': state bytes="
                    + state.byteSize() + " exceeds maxStateBytes=" + maxStateBytes + " (fix: create the cache with a"
                    + " larger maxStateBytes)");
        }
    }

    /** Takes the next stamp: above every stamp this rank saved or found before. */
    private long nextStamp() {
        clock = Math.max(clock + 1, System.nanoTime());
        return clock;
    }

    /** Records the ids this save evicted in this rank's ledger, and takes the saved id out of it. */
    private void afterSave(String id) {
        boolean changed = forget(SessionCache.hash(id.getBytes(StandardCharsets.UTF_8)));
        List<String> evicted = blocks.takeEvicted();
        for (String name : evicted) {
            long h = SessionCache.hash(name.substring(PREFIX.length()).getBytes(StandardCharsets.UTF_8));
            ledgerRing.setAtIndex(ValueLayout.JAVA_LONG, ledgerNext, h);
            ledgerNext = (ledgerNext + 1) % (int) (ledgerRing.byteSize() / Long.BYTES);
            changed = true;
        }
        if (changed) {
            ledger.put(LEDGER, ledgerRing);
        }
    }

    private boolean forget(long h) {
        boolean found = false;
        for (long i = 0; i < ledgerRing.byteSize() / Long.BYTES; i++) {
            if (ledgerRing.getAtIndex(ValueLayout.JAVA_LONG, i) == h) {
                ledgerRing.setAtIndex(ValueLayout.JAVA_LONG, i, 0);
                found = true;
            }
        }
        return found;
    }

    /**
     * Removes this rank's copy of session {@code id} (the owner's remove: call it on the rank that saved it last,
     * {@link Block#owner()}); a later find answers null, unless another rank holds a copy.
     *
     * @param id the session's id
     * @return true when this rank's part had it
     */
    public boolean remove(String id) {
        return blocks.remove(name(id));
    }

    // ------------------------------------------------------------------------------------------ reads (any rank)

    /**
     * The latest saved state of session {@code id}, in place (a zero-copy view of its owner's GPU memory).
     *
     * @param id the session's id
     * @return its block, or null when the session is unknown (never saved, removed, or evicted long ago)
     * @throws SessionExpiredException ({@code EVICTED}) when a rank's budget evicted it recently;
     *         ({@code WRITER_DIED}) when its owner died while saving it
     */
    public Block find(String id) {
        String name = name(id);
        try {
            Block best = null;
            Block mine = null;
            for (int r = 0; r < world; r++) {
                Block b = lookup(r, id, name);
                if (b != null && (best == null || b.stamp() > best.stamp())) {
                    best = b;
                }
                if (b != null && r == rank) {
                    mine = b;
                }
            }
            if (mine != null && mine != best) {
                blocks.remove(name); // a stale copy: a newer save of the session is in another rank's part
            }
            if (best != null) {
                clock = Math.max(clock, best.stamp()); // this rank's next save orders after it
                return best;
            }
            int evictedBy = evictedBy(SessionCache.hash(id.getBytes(StandardCharsets.UTF_8)));
            if (evictedBy >= 0) {
                throw new SessionExpiredException(id, SessionExpiredException.Reason.EVICTED, "session '" + id
                        + "' was evicted by rank " + evictedBy + "'s session budget (least recently used first; fix:"
                        + " start the session again, or raise budgetBytesPerRank)");
            }
            return null;
        } catch (PeerTimeoutException e) {
            if (e.reason() != PeerTimeoutException.Reason.PEER_EXITED) {
                throw e;
            }
            SessionExpiredException x = new SessionExpiredException(id, SessionExpiredException.Reason.WRITER_DIED,
                    "session '" + id + "': its writer died while saving it (" + e.getMessage() + "; fix: start the"
                            + " session again)");
            x.initCause(e);
            throw x;
        }
    }

    /** Rank {@code owner}'s copy, from the directory alone (host loads): its stamp is the entry's version. */
    private Block lookup(int owner, String id, String name) {
        DeviceParameterCache.View v = blocks.get(owner, name);
        return v == null ? null : new Block(id, owner, v.version(), v.data().byteSize() - HEADER_BYTES, v);
    }

    /** The first rank whose ledger lists {@code h}, or -1. */
    private int evictedBy(long h) {
        for (int r = 0; r < world; r++) {
            while (true) {
                DeviceParameterCache.View v = ledger.get(r, LEDGER);
                if (v == null) {
                    break;
                }
                MemorySegment into = ledgerCopy.asSlice(0, v.data().byteSize());
                gpu.copyToHost(into, v.data());
                if (!v.isValid()) {
                    continue;
                }
                for (long i = 0; i < into.byteSize() / Long.BYTES; i++) {
                    if (into.getAtIndex(ValueLayout.JAVA_LONG, i) == h) {
                        return r;
                    }
                }
                break;
            }
        }
        return -1;
    }

    /**
     * Copies session {@code id}'s latest state into this rank's device memory (a peer copy from its owner's GPU on
     * this rank's stream, then a synchronize), whole: found again when a save or an eviction freed it meanwhile.
     *
     * @param id  the session's id
     * @param dst this rank's device memory, at least the state's bytes
     * @return the state's bytes, or -1 when the session is unknown
     * @throws SessionExpiredException as {@link #find}
     * @throws IllegalArgumentException when {@code dst} is smaller than the state
     */
    public long copyInto(String id, MemorySegment dst) {
        return read(id, dst, true);
    }

    /**
     * Copies session {@code id}'s latest state into host memory, whole, as {@link #copyInto}.
     *
     * @param id  the session's id
     * @param dst host memory, at least the state's bytes
     * @return the state's bytes, or -1 when the session is unknown
     * @throws SessionExpiredException as {@link #find}
     * @throws IllegalArgumentException when {@code dst} is smaller than the state
     */
    public long get(String id, MemorySegment dst) {
        return read(id, dst, false);
    }

    private long read(String id, MemorySegment dst, boolean device) {
        Objects.requireNonNull(dst, "dst");
        while (true) {
            Block b = find(id);
            if (b == null) {
                return -1;
            }
            if (dst.byteSize() < b.length()) {
                throw new IllegalArgumentException("device session cache read of session '" + id + "': dst bytes="
                        + dst.byteSize() + " is smaller than the state's bytes=" + b.length() + " (fix: pass a buffer"
                        + " of maxStateBytes)");
            }
            if (b.length() > 0) {
                if (device) {
                    gpu.copyAsync(dst.asSlice(0, b.length()), b.data());
                    gpu.synchronize(); // the copy completed before the check after use
                } else {
                    gpu.copyToHost(dst.asSlice(0, b.length()), b.data());
                }
            }
            if (b.isValid()) {
                return b.length();
            }
        }
    }

    /** {@return sessions this rank's part holds now} */
    public int sessionsHere() {
        return blocks.ownEntries();
    }

    private static String name(String id) {
        Objects.requireNonNull(id, "session id");
        int n = id.getBytes(StandardCharsets.UTF_8).length;
        if (n < 1 || n > MAX_ID_BYTES) {
            throw new IllegalArgumentException("session id '" + id + "' has UTF-8 bytes=" + n + ", expected 1.."
                    + MAX_ID_BYTES + " (fix: use a shorter id, e.g. a UUID or a hash of it)");
        }
        return PREFIX + id;
    }

    /** Collective: frees the cache's GPU memory once every rank has stopped using it; blocks become unusable. */
    @Override
    public void close() {
        try {
            gpu.freeDevice(deviceStage);
            ledger.close();
            blocks.close();
        } finally {
            arena.close();
        }
    }
}
