package org.symmem4j.serving.session;

import static org.symmem4j.parallel.layout.SessionCacheLayout.BLOCK_COUNT;
import static org.symmem4j.parallel.layout.SessionCacheLayout.BYTES;
import static org.symmem4j.parallel.layout.SessionCacheLayout.EMPTY;
import static org.symmem4j.parallel.layout.SessionCacheLayout.EXPIRED;
import static org.symmem4j.parallel.layout.SessionCacheLayout.FREE_COUNT;
import static org.symmem4j.parallel.layout.SessionCacheLayout.FREE_STACK;
import static org.symmem4j.parallel.layout.SessionCacheLayout.HASH;
import static org.symmem4j.parallel.layout.SessionCacheLayout.ID;
import static org.symmem4j.parallel.layout.SessionCacheLayout.ID_LENGTH;
import static org.symmem4j.parallel.layout.SessionCacheLayout.LAST_USE;
import static org.symmem4j.parallel.layout.SessionCacheLayout.LIVE;
import static org.symmem4j.parallel.layout.SessionCacheLayout.LOST;
import static org.symmem4j.parallel.layout.SessionCacheLayout.REMOVED;
import static org.symmem4j.parallel.layout.SessionCacheLayout.STATE;
import static org.symmem4j.parallel.layout.SessionCacheLayout.TABLE;
import static org.symmem4j.parallel.layout.SessionCacheLayout.WRITER;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.charset.StandardCharsets;
import java.util.Objects;

import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.PeerTimeoutException;
import org.symmem4j.parallel.SymmetricMemory;
import org.symmem4j.parallel.TransportCapabilities;
import org.symmem4j.parallel.TransportCapabilities.Capability;
import org.symmem4j.parallel.layout.SessionCacheLayout;
import org.symmem4j.parallel.sync.WaitSubject;
import org.symmem4j.parallel.sync.Waiter;

/**
 * Per-session decoding state (an RNN's {@code rnnTimeStep} state, see {@link RnnSessionState}) in fixed-size
 * blocks of symmetric memory, so that any rank of the group (a worker thread, or a worker process of the same
 * machine) continues any session: no sticky routing. The vLLM paged KV cache is the model: a block pool per rank,
 * a block table per session.
 *
 * <pre>{@code
 * try (SessionCache cache = SessionCache.create(group, SessionCache.Settings.of(4096, 64L << 20, 1024, 64 << 10))) {
 *     cache.put("user-17", state);                   // any rank: the session's home part, under its lock
 *     long n = cache.get("user-17", dst);            // any rank: a whole copy, or -1 when unknown
 * }                                                  // SessionExpiredException when evicted
 * }</pre>
 *
 * <ul>
 *   <li><b>Home part</b>: a session lives in rank {@code hash(id) % worldSize}'s part; each part has
 *       {@code budgetBytesPerRank / blockBytes} blocks and {@code sessionsPerRank} slots. A session's state of
 *       {@code n} bytes takes {@code ceil(n / blockBytes)} blocks, at most {@code maxStateBytes}.</li>
 *   <li><b>Writes</b> take the part's lock (a CAS on its lock word), make the session's sequence odd, give back
 *       its old blocks, take new ones from the part's free stack, copy, and make the sequence even (release).
 *       Writes to one part are serialized; keep states small (kilobytes), as RNN states are.</li>
 *   <li><b>Reads</b> take no lock: they copy the state out between two acquire reads of the session's sequence
 *       and retry when it moved, so they never return a torn state.</li>
 *   <li><b>Eviction</b>: a write that finds too few free blocks evicts the part's least recently used sessions
 *       (a read or write is a use); a later get of an evicted session throws {@link SessionExpiredException}
 *       (until its slot is reused by another session, after which the id is unknown: get answers -1).</li>
 *   <li><b>Crashes</b>: a writer that dies mid-write leaves its session's sequence odd and the part locked; readers
 *       that find the lock's holder dead throw {@link SessionExpiredException} ({@code WRITER_DIED}), never the
 *       half-written state; the next writer takes the lock over, marks such sessions lost and rebuilds the free
 *       stack from the live sessions' block tables.</li>
 * </ul>
 *
 * One thread per rank uses an instance. Host memory only: on a group whose memory is GPU memory, or whose ranks
 * are on several machines, creation is refused with the transport's reason (on GPUs use {@link DeviceSessionCache}).
 */
public final class SessionCache implements AutoCloseable {

    /**
     * The cache's geometry, the same on every rank.
     *
     * @param blockBytes         bytes per block, a multiple of 64, at least 64
     * @param budgetBytesPerRank block pool bytes per rank (rounded down to whole blocks), at least one block
     * @param sessionsPerRank    session slots per rank, at least 1
     * @param maxStateBytes      the largest state a session may store, at most the per-rank budget
     */
    public record Settings(int blockBytes, long budgetBytesPerRank, int sessionsPerRank, long maxStateBytes) {

        /** Checks the values. */
        public Settings {
            if (blockBytes < 64 || blockBytes % 64 != 0) {
                throw new IllegalArgumentException("session cache blockBytes=" + blockBytes
                        + " expected a multiple of 64, at least 64 (fix: pass e.g. 4096)");
            }
            if (budgetBytesPerRank < blockBytes || budgetBytesPerRank / blockBytes > Integer.MAX_VALUE / 4) {
                throw new IllegalArgumentException("session cache budgetBytesPerRank=" + budgetBytesPerRank
                        + " expected at least blockBytes=" + blockBytes + " and at most " + (Integer.MAX_VALUE / 4)
                        + " blocks (fix: pass a budget of at least one block, e.g. 64 << 20)");
            }
            if (sessionsPerRank < 1) {
                throw new IllegalArgumentException("session cache sessionsPerRank=" + sessionsPerRank + " expected >= 1"
                        + " (fix: pass how many sessions one rank keeps, e.g. 1024)");
            }
            if (maxStateBytes < 1 || maxStateBytes > budgetBytesPerRank / blockBytes * blockBytes) {
                throw new IllegalArgumentException("session cache maxStateBytes=" + maxStateBytes + " expected 1.."
                        + budgetBytesPerRank / blockBytes * blockBytes + " (the per-rank budget in whole"
                        + " blocks; fix: raise the budget or"
                        + " lower maxStateBytes)");
            }
        }

        /**
         * @param blockBytes         bytes per block
         * @param budgetBytesPerRank block pool bytes per rank
         * @param sessionsPerRank    session slots per rank
         * @param maxStateBytes      the largest state
         * @return the settings
         */
        public static Settings of(int blockBytes, long budgetBytesPerRank, int sessionsPerRank, long maxStateBytes) {
            return new Settings(blockBytes, budgetBytesPerRank, sessionsPerRank, maxStateBytes);
        }

        int blocks() {
            return (int) (budgetBytesPerRank / blockBytes);
        }

        int maxBlocksPerSession() {
            return (int) ((maxStateBytes + blockBytes - 1) / blockBytes);
        }
    }

    private static final int LIVENESS_POLLS = 1024;

    private final Group group;
    private final SymmetricMemory memory;
    private final Settings settings;
    private final int blockBytes;
    private final int blocks;
    private final int slots;
    private final int maxBlocks;
    private final long slotBytes;
    private final long pool;
    private final MemorySegment[] parts;
    private final Waiter waiter;
    private final int[] scratchTable;

    private SessionCache(Group group, SymmetricMemory memory, Settings settings) {
        this.group = group;
        this.memory = memory;
        this.settings = settings;
        this.blockBytes = settings.blockBytes();
        this.blocks = settings.blocks();
        this.slots = settings.sessionsPerRank();
        this.maxBlocks = settings.maxBlocksPerSession();
        this.slotBytes = SessionCacheLayout.slotBytes(maxBlocks);
        this.pool = SessionCacheLayout.poolOffset(blocks, slots, maxBlocks);
        this.parts = new MemorySegment[group.worldSize()];
        for (int r = 0; r < parts.length; r++) {
            parts[r] = memory.peer(r);
        }
        this.waiter = new Waiter(group.options().idleStrategy().get(), group.options().timeout());
        this.scratchTable = new int[maxBlocks];
    }

    /**
     * Collective: a cache with a part of {@code settings} on every rank.
     *
     * @param group    this rank's group
     * @param settings the geometry, the same on every rank
     * @return this rank's view; close it collectively
     * @throws UnsupportedOperationException where the group's memory is GPU memory or is not mapped in this process
     * @throws IllegalStateException when a rank created it with other settings
     */
    public static SessionCache create(Group group, Settings settings) {
        Objects.requireNonNull(group, "group");
        Objects.requireNonNull(settings, "settings");
        TransportCapabilities caps = group.transport().capabilities(group);
        if (caps.supports(Capability.DEVICE_MEMORY)) {
            throw new UnsupportedOperationException("session cache on transport=" + caps.transport() + ": its memory"
                    + " is GPU memory, which this host cache does not use (fix: DeviceSessionCache.create with a"
                    + " communicator of the group, the GPU form, or create this one on a host group)");
        }
        if (!caps.supports(Capability.PEER_ACCESS)) {
            throw new UnsupportedOperationException("session cache on transport=" + caps.transport() + " needs every"
                    + " rank's memory mapped in this process, which this group refuses: "
                    + caps.get(Capability.PEER_ACCESS).reason() + " (fix: create it on a group of one machine,"
                    + " a Group.split by machine)");
        }
        int blocks = settings.blocks();
        int maxBlocks = settings.maxBlocksPerSession();
        SymmetricMemory memory = SymmetricMemory.allocate(group, SessionCacheLayout.partBytes(settings.blockBytes(),
                blocks, settings.sessionsPerRank(), maxBlocks));
        try {
            SessionCacheLayout.format(memory.local(), group.rank(), settings.blockBytes(), blocks,
                    settings.sessionsPerRank(), maxBlocks);
            memory.barrier(); // every part's format, written before it, is visible to every rank after it
            for (int r = 0; r < group.worldSize(); r++) {
                SessionCacheLayout.verify(memory.peer(r), r, settings.blockBytes(), blocks, settings.sessionsPerRank(),
                        maxBlocks);
            }
            return new SessionCache(group, memory, settings);
        } catch (RuntimeException e) {
            memory.close();
            throw e;
        }
    }

    /** {@return the settings it was created with} */
    public Settings settings() {
        return settings;
    }

    /**
     * The rank whose part holds session {@code id}.
     *
     * @param id the session's id
     * @return its home rank
     */
    public int homeRank(String id) {
        return (int) Long.remainderUnsigned(hash(idBytes(id)), parts.length);
    }

    // ------------------------------------------------------------------------------------------ writes

    /**
     * Stores {@code state} as session {@code id}'s state, replacing what it had (a new session when it had none,
     * or when it had expired). Evicts the home part's least recently used sessions when blocks run short.
     *
     * @param id    the session's id, 1..80 UTF-8 bytes
     * @param state the bytes, 0..maxStateBytes
     * @throws IllegalArgumentException for a bad id or a state larger than {@code maxStateBytes} (before any write)
     */
    public void put(String id, MemorySegment state) {
        byte[] idBytes = idBytes(id);
        long n = state.byteSize();
        if (n > settings.maxStateBytes()) {
            throw new IllegalArgumentException("session '" + id + "' state bytes=" + n + " expected at most maxStateBytes="
                    + settings.maxStateBytes() + " (fix: create the cache with a larger maxStateBytes)");
        }
        long h = hash(idBytes);
        int home = (int) Long.remainderUnsigned(h, parts.length);
        MemorySegment part = parts[home];
        lock(part, home, "session cache put");
        try {
            int slot = claimSlot(part, h, idBytes);
            long s = slotOffset(slot);
            int need = (int) ((n + blockBytes - 1) / blockBytes);
            long odd = SessionCacheLayout.beginWrite(part, s);
            part.set(ValueLayout.JAVA_INT, s + WRITER, group.rank());
            freeBlocks(part, s);
            for (int i = 0; i < need; i++) {
                int b = popBlock(part, slot);
                part.set(ValueLayout.JAVA_INT, s + TABLE + 4L * i, b);
                part.set(ValueLayout.JAVA_INT, s + BLOCK_COUNT, i + 1); // the table grows one block at a time
                long len = Math.min(blockBytes, n - (long) i * blockBytes);
                MemorySegment.copy(state, (long) i * blockBytes, part, blockOffset(b), len);
                if (CRASH_AFTER_BLOCKS.get() == i + 1) {
                    CRASH_HOOK.get().run();
                }
            }
            part.set(ValueLayout.JAVA_LONG, s + BYTES, n);
            part.set(ValueLayout.JAVA_INT, s + STATE, LIVE);
            part.set(ValueLayout.JAVA_LONG, s + LAST_USE, System.nanoTime());
            SessionCacheLayout.endWrite(part, s, odd); // the linearization point of the put
        } finally {
            SessionCacheLayout.unlock(part);
        }
    }

    /**
     * Removes session {@code id}; a later get answers -1.
     *
     * @param id the session's id
     * @return true when it had a state (live)
     */
    public boolean remove(String id) {
        byte[] idBytes = idBytes(id);
        long h = hash(idBytes);
        int home = (int) Long.remainderUnsigned(h, parts.length);
        MemorySegment part = parts[home];
        lock(part, home, "session cache remove");
        try {
            int slot = findSlot(part, h, idBytes);
            if (slot < 0) {
                return false;
            }
            long s = slotOffset(slot);
            boolean live = part.get(ValueLayout.JAVA_INT, s + STATE) == LIVE;
            retire(part, s, REMOVED);
            return live;
        } finally {
            SessionCacheLayout.unlock(part);
        }
    }

    /** A slot for the id under the lock: its own, else a reusable one, else the LRU live one evicted. */
    private int claimSlot(MemorySegment part, long h, byte[] idBytes) {
        int found = findSlot(part, h, idBytes);
        if (found >= 0) {
            return found;
        }
        int reusable = -1;
        int start = (int) Long.remainderUnsigned(Long.rotateLeft(h, 17), slots);
        for (int i = 0; i < slots; i++) {
            int slot = (start + i) % slots;
            int state = part.get(ValueLayout.JAVA_INT, slotOffset(slot) + STATE);
            if (state == EMPTY) {
                reusable = reusable >= 0 ? reusable : slot;
                break; // an empty slot ends every probe: the id is not further on
            }
            if (state != LIVE && reusable < 0) {
                reusable = slot;
            }
        }
        if (reusable < 0) {
            reusable = leastRecentlyUsed(part, -1);
            retire(part, slotOffset(reusable), EXPIRED);
        }
        long s = slotOffset(reusable);
        long odd = SessionCacheLayout.beginWrite(part, s);
        part.set(ValueLayout.JAVA_LONG, s + HASH, h);
        part.set(ValueLayout.JAVA_INT, s + ID_LENGTH, idBytes.length);
        MemorySegment.copy(MemorySegment.ofArray(idBytes), 0, part, s + ID, idBytes.length);
        part.set(ValueLayout.JAVA_INT, s + STATE, REMOVED); // the id, with no state yet: get answers -1
        part.set(ValueLayout.JAVA_INT, s + BLOCK_COUNT, 0);
        SessionCacheLayout.endWrite(part, s, odd);
        return reusable;
    }

    /** The id's slot in any non-empty state, or -1; under the lock. */
    private int findSlot(MemorySegment part, long h, byte[] idBytes) {
        int start = (int) Long.remainderUnsigned(Long.rotateLeft(h, 17), slots);
        for (int i = 0; i < slots; i++) {
            int slot = (start + i) % slots;
            long s = slotOffset(slot);
            int state = part.get(ValueLayout.JAVA_INT, s + STATE);
            if (state == EMPTY) {
                return -1;
            }
            if (part.get(ValueLayout.JAVA_LONG, s + HASH) == h && idMatches(part, s, idBytes)) {
                return slot;
            }
        }
        return -1;
    }

    private int popBlock(MemorySegment part, int writing) {
        while (true) {
            int free = part.get(ValueLayout.JAVA_INT, FREE_COUNT);
            if (free > 0) {
                part.set(ValueLayout.JAVA_INT, FREE_COUNT, free - 1);
                return part.get(ValueLayout.JAVA_INT, FREE_STACK + 4L * (free - 1));
            }
            int victim = leastRecentlyUsed(part, writing);
            if (victim < 0) {
                // unreachable while maxStateBytes <= the budget: the session being written holds every block
                throw org.symmem4j.parallel.Invariants.violated("session cache: no free block in a part of blocks="
                        + blocks + " after evicting every other session");
            }
            retire(part, slotOffset(victim), EXPIRED);
        }
    }

    private int leastRecentlyUsed(MemorySegment part, int keep) {
        int victim = -1;
        long oldest = Long.MAX_VALUE;
        for (int slot = 0; slot < slots; slot++) {
            long s = slotOffset(slot);
            if (slot != keep && part.get(ValueLayout.JAVA_INT, s + STATE) == LIVE) {
                long t = part.get(ValueLayout.JAVA_LONG, s + LAST_USE);
                if (victim < 0 || t - oldest < 0) {
                    victim = slot;
                    oldest = t;
                }
            }
        }
        return victim;
    }

    /** Gives a slot's blocks back and marks it {@code state}; under the lock. */
    private void retire(MemorySegment part, long s, int state) {
        long odd = SessionCacheLayout.beginWrite(part, s);
        freeBlocks(part, s);
        part.set(ValueLayout.JAVA_INT, s + STATE, state);
        part.set(ValueLayout.JAVA_LONG, s + BYTES, 0);
        SessionCacheLayout.endWrite(part, s, odd);
    }

    private void freeBlocks(MemorySegment part, long s) {
        int count = part.get(ValueLayout.JAVA_INT, s + BLOCK_COUNT);
        int free = part.get(ValueLayout.JAVA_INT, FREE_COUNT);
        for (int i = 0; i < count; i++) {
            part.set(ValueLayout.JAVA_INT, FREE_STACK + 4L * free++, part.get(ValueLayout.JAVA_INT, s + TABLE + 4L * i));
        }
        part.set(ValueLayout.JAVA_INT, FREE_COUNT, free);
        part.set(ValueLayout.JAVA_INT, s + BLOCK_COUNT, 0);
    }

    // ------------------------------------------------------------------------------------------ the part's lock

    private void lock(MemorySegment part, int home, String operation) {
        long polls = 0;
        waiter.begin();
        while (true) {
            long word = SessionCacheLayout.lockAcquire(part);
            if (word == 0) {
                if (SessionCacheLayout.tryLock(part, 0, group.rank())) {
                    return;
                }
                continue;
            }
            int holder = (int) word - 1;
            if (holder == group.rank()) {
                throw new IllegalStateException(operation + ": rank=" + group.rank() + " already holds the lock of"
                        + " rank=" + home + "'s part (fix: use a SessionCache from one thread per rank)");
            }
            if (++polls % LIVENESS_POLLS == 0 && !group.isAlive(holder)) {
                if (SessionCacheLayout.tryLock(part, word, group.rank())) {
                    recover(part); // the holder died holding the lock: repair what it left, then go on
                    return;
                }
                continue;
            }
            waiter.idle(lockWait(operation, home, holder));
        }
    }

    private WaitSubject lockWait(String operation, int home, int holder) {
        return new WaitSubject() {
            @Override
            public void checkProgressPossible(long waitedNanos) {
                if (group.abortState().isRaised()) {
                    throw new PeerTimeoutException(operation + ": rank=" + group.rank() + " stopped waiting for the"
                            + " lock of rank=" + home + "'s part: the group was aborted (" + group.abortState().cause()
                            + "; fix: act on that cause on the rank that raised it, then create a new group)",
                            group.rank(), java.util.List.of(holder), operation,
                            PeerTimeoutException.Reason.PEER_ABORTED, group.options().timeout());
                }
            }

            @Override
            public RuntimeException deadlinePassed(java.time.Duration timeout) {
                return new PeerTimeoutException(operation + ": rank=" + group.rank() + " waited timeout=" + timeout
                        + " for the lock of rank=" + home + "'s part, held by " + group.describe(holder) + " (a writer"
                        + " holds it this long only when stopped; fix: check that rank, or raise symmem4j.timeout.ms)",
                        group.rank(), java.util.List.of(holder), operation,
                        PeerTimeoutException.Reason.DEADLINE_PASSED, timeout);
            }
        };
    }

    /**
     * After taking over a dead holder's lock: sessions it left mid-write (odd sequence) become LOST, and the free
     * stack is rebuilt from the live sessions' block tables (the holder may have died between popping a block
     * and recording it).
     */
    private void recover(MemorySegment part) {
        boolean[] used = new boolean[blocks];
        for (int slot = 0; slot < slots; slot++) {
            long s = slotOffset(slot);
            long seq = SessionCacheLayout.seqAcquire(part, s);
            if ((seq & 1) != 0) {
                part.set(ValueLayout.JAVA_INT, s + STATE, LOST);
                part.set(ValueLayout.JAVA_INT, s + BLOCK_COUNT, 0);
                part.set(ValueLayout.JAVA_LONG, s + BYTES, 0);
                SessionCacheLayout.endWrite(part, s, seq); // even again: LOST, never the half-written state
            } else if (part.get(ValueLayout.JAVA_INT, s + STATE) != EMPTY) {
                int count = part.get(ValueLayout.JAVA_INT, s + BLOCK_COUNT);
                for (int i = 0; i < count; i++) {
                    used[part.get(ValueLayout.JAVA_INT, s + TABLE + 4L * i)] = true;
                }
            }
        }
        int free = 0;
        for (int b = blocks - 1; b >= 0; b--) {
            if (!used[b]) {
                part.set(ValueLayout.JAVA_INT, FREE_STACK + 4L * free++, b);
            }
        }
        part.set(ValueLayout.JAVA_INT, FREE_COUNT, free);
    }

    // ------------------------------------------------------------------------------------------ reads

    /**
     * Copies session {@code id}'s state into {@code dst}, whole (never torn by a concurrent write).
     *
     * @param id  the session's id
     * @param dst at least the state's bytes
     * @return the state's bytes, or -1 when the session is unknown (never put, removed, or its slot reused)
     * @throws SessionExpiredException when it was evicted, or its writer died mid-write
     * @throws IllegalArgumentException when {@code dst} is smaller than the state
     */
    public long get(String id, MemorySegment dst) {
        byte[] idBytes = idBytes(id);
        long h = hash(idBytes);
        int home = (int) Long.remainderUnsigned(h, parts.length);
        MemorySegment part = parts[home];
        int start = (int) Long.remainderUnsigned(Long.rotateLeft(h, 17), slots);
        for (int i = 0; i < slots; i++) {
            long s = slotOffset((start + i) % slots);
            long polls = 0;
            waiter.begin();
            while (true) {
                long seq = SessionCacheLayout.seqAcquire(part, s);
                if ((seq & 1) != 0) {
                    long lock = SessionCacheLayout.lockAcquire(part);
                    if (++polls % LIVENESS_POLLS == 0 && lock != 0 && !group.isAlive((int) lock - 1)
                            && SessionCacheLayout.seqAcquire(part, s) == seq) {
                        if (idMatches(part, s, idBytes)) {
                            throw new SessionExpiredException(id, SessionExpiredException.Reason.WRITER_DIED,
                                    "session '" + id + "' is lost: its writer " + group.describe((int) lock - 1)
                                            + " died while writing it (fix: start the session again)");
                        }
                        break; // another session's slot, left mid-write: not ours, probe on
                    }
                    waiter.idle(lockWait("session cache get", home, lock == 0 ? home : (int) lock - 1));
                    continue;
                }
                int state = part.get(ValueLayout.JAVA_INT, s + STATE);
                boolean match = state != EMPTY && part.get(ValueLayout.JAVA_LONG, s + HASH) == h
                        && idMatches(part, s, idBytes);
                long bytes = part.get(ValueLayout.JAVA_LONG, s + BYTES);
                int count = part.get(ValueLayout.JAVA_INT, s + BLOCK_COUNT);
                long result = -2;
                if (match && state == LIVE) {
                    if (bytes > dst.byteSize() || bytes < 0 || count < 0 || count > maxBlocks
                            || (long) count * blockBytes < bytes) {
                        if (SessionCacheLayout.seqRecheck(part, s) != seq) {
                            continue;
                        }
                        throw new IllegalArgumentException("session '" + id + "' state bytes=" + bytes
                                + " does not fit dst bytes=" + dst.byteSize() + " (fix: size dst with stateBytes(id))");
                    }
                    for (int b = 0; b < count; b++) {
                        scratchTable[b] = part.get(ValueLayout.JAVA_INT, s + TABLE + 4L * b);
                    }
                    for (int b = 0; b < count; b++) {
                        long len = Math.min(blockBytes, bytes - (long) b * blockBytes);
                        if (len > 0 && scratchTable[b] >= 0 && scratchTable[b] < blocks) {
                            MemorySegment.copy(part, blockOffset(scratchTable[b]), dst, (long) b * blockBytes, len);
                        }
                    }
                    result = bytes;
                }
                if (SessionCacheLayout.seqRecheck(part, s) != seq) {
                    continue; // a writer changed the slot while it was read
                }
                if (state == EMPTY) {
                    return -1; // an empty slot ends the probe
                }
                if (!match) {
                    break;
                }
                return switch (state) {
                    case LIVE -> {
                        part.set(ValueLayout.JAVA_LONG, s + LAST_USE, System.nanoTime()); // benign race (LRU hint)
                        yield result;
                    }
                    case EXPIRED -> throw new SessionExpiredException(id, SessionExpiredException.Reason.EVICTED,
                            "session '" + id + "' expired: evicted from rank=" + home + "'s part (budget="
                                    + (long) blocks * blockBytes + " bytes, least recently used first); fix: start the"
                                    + " session again, or give the cache a larger budgetBytesPerRank");
                    case LOST -> throw new SessionExpiredException(id, SessionExpiredException.Reason.WRITER_DIED,
                            "session '" + id + "' is lost: a writer died while writing it (fix: start the session again)");
                    default -> -1L;
                };
            }
        }
        return -1;
    }

    /**
     * A copy of session {@code id}'s state.
     *
     * @param id the session's id
     * @return the bytes, or null when the session is unknown
     * @throws SessionExpiredException when it was evicted, or its writer died mid-write
     */
    public byte[] get(String id) {
        byte[] buf = new byte[(int) settings.maxStateBytes()];
        long n = get(id, MemorySegment.ofArray(buf));
        return n < 0 ? null : java.util.Arrays.copyOf(buf, (int) n);
    }

    /** {@return live sessions in this rank's own part (a racy count, for metrics)} */
    public int liveSessionsHere() {
        MemorySegment part = parts[group.rank()];
        int live = 0;
        for (int slot = 0; slot < slots; slot++) {
            if (part.get(ValueLayout.JAVA_INT, slotOffset(slot) + STATE) == LIVE) {
                live++;
            }
        }
        return live;
    }

    /** {@return free blocks in this rank's own part (a racy count, for metrics)} */
    public int freeBlocksHere() {
        return parts[group.rank()].get(ValueLayout.JAVA_INT, FREE_COUNT);
    }

    // ------------------------------------------------------------------------------------------ helpers

    private long slotOffset(int slot) {
        return SessionCacheLayout.slotsOffset(blocks) + slot * slotBytes;
    }

    private long blockOffset(int block) {
        return pool + (long) block * blockBytes;
    }

    private static boolean idMatches(MemorySegment part, long s, byte[] idBytes) {
        return part.get(ValueLayout.JAVA_INT, s + ID_LENGTH) == idBytes.length
                && MemorySegment.mismatch(part, s + ID, s + ID + idBytes.length, MemorySegment.ofArray(idBytes), 0,
                idBytes.length) == -1;
    }

    private static byte[] idBytes(String id) {
        Objects.requireNonNull(id, "session id");
        byte[] b = id.getBytes(StandardCharsets.UTF_8);
        if (b.length < 1 || b.length > SessionCacheLayout.MAX_ID_BYTES) {
            throw new IllegalArgumentException("session id '" + id + "' has UTF-8 bytes=" + b.length + " expected 1.."
                    + SessionCacheLayout.MAX_ID_BYTES + " (fix: use a shorter id, e.g. a UUID or a hash of it)");
        }
        return b;
    }

    /** FNV-1a over the id's bytes, then a 64-bit finalizer: the same on every rank and process. */
    static long hash(byte[] b) {
        long h = 0xcbf29ce484222325L;
        for (byte x : b) {
            h = (h ^ (x & 0xff)) * 0x100000001b3L;
        }
        h ^= h >>> 33;
        h *= 0xff51afd7ed558ccdL;
        h ^= h >>> 33;
        return h;
    }

    /** Collective: frees the cache's memory once every rank has stopped using it. */
    @Override
    public void close() {
        memory.close();
    }

    // ---- crash injection for the tests: a put calls the hook after writing this many blocks ----
    static final ThreadLocal<Integer> CRASH_AFTER_BLOCKS = ThreadLocal.withInitial(() -> -1);
    static final ThreadLocal<Runnable> CRASH_HOOK = ThreadLocal.withInitial(() -> () -> { });
}
