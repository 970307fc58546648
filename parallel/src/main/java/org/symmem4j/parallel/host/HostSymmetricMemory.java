package org.symmem4j.parallel.host;

import java.lang.foreign.MemorySegment;
import java.util.Objects;
import org.symmem4j.parallel.memory.Pages;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.SignalOp;
import org.symmem4j.parallel.SymmetricMemory;
import org.symmem4j.parallel.control.PadSynchronizer;
import org.symmem4j.parallel.control.SignalPads;

/**
 * Symmetric memory in host RAM: every rank's buffer and signal pad as {@link MemorySegment}s,
 * whether the peers are threads (off-heap segments) or processes ({@code /dev/shm} mappings).
 * Built by {@link InJvmTransport} and {@link SharedMemoryTransport}.
 */
public final class HostSymmetricMemory implements SymmetricMemory, SignalPads {

    private final Group group;
    private final String transportName;
    private final long id;
    private final long byteSize;
    private final int signalSlots;
    private final MemorySegment[] data;
    private final PadSynchronizer sync;
    private final Runnable releaseLocal;
    /** {@code madvise} advice that gives this rank's pages back ({@link Pages}), or -1 where the memory is not ours to give back. */
    private final int decommitAdvice;
    private boolean closed;

    /**
     * @param data         every rank's buffer as mapped here, in rank order
     * @param pads         every rank's signal pad as mapped here, in rank order
     * @param releaseLocal frees or unmaps this rank's own mappings; run once by {@link #close()}
     * @param decommitAdvice how {@link #decommit} gives pages back ({@link Pages#MADV_DONTNEED} for private anonymous
     *                       memory, {@link Pages#MADV_REMOVE} for a shared file), or -1 where it may not (registered
     *                       memory belongs to the caller)
     */
    HostSymmetricMemory(Group group, String transportName, long id, long byteSize, int signalSlots,
                        MemorySegment[] data, MemorySegment[] pads, Runnable releaseLocal, int decommitAdvice) {
        this.group = group;
        this.transportName = transportName;
        this.id = id;
        this.byteSize = byteSize;
        this.signalSlots = signalSlots;
        this.data = data.clone();
        this.sync = new PadSynchronizer(group, pads.clone());
        this.releaseLocal = releaseLocal;
        this.decommitAdvice = decommitAdvice;
    }

    @Override
    public Group group() {
        return group;
    }

    /** {@return the name of the transport this memory was allocated on} */
    public String transportName() {
        return transportName;
    }

    @Override
    public long byteSize() {
        return byteSize;
    }

    @Override
    public long id() {
        return id;
    }

    @Override
    public MemorySegment local() {
        return data[group.rank()];
    }

    @Override
    public MemorySegment peer(int rank) {
        Objects.checkIndex(rank, data.length);
        return data[rank];
    }

    @Override
    public boolean hostAddressable() {
        return true;
    }

    @Override
    public int signalSlots() {
        return signalSlots;
    }

    @Override
    public void decommit(long offsetBytes, long bytes) {
        java.util.Objects.checkFromIndexSize(offsetBytes, bytes, byteSize);
        if (decommitAdvice < 0) {
            SymmetricMemory.super.decommit(offsetBytes, bytes); // throws: registered memory is the caller's
        }
        if (closed) {
            throw new IllegalStateException("decommit on " + this + " after close (expected an open memory; fix: call"
                    + " decommit before close())");
        }
        Pages.advise(local(), offsetBytes, bytes, decommitAdvice, "decommit on " + this);
    }

    @Override
    public long residentBytes(long offsetBytes, long bytes) {
        java.util.Objects.checkFromIndexSize(offsetBytes, bytes, byteSize);
        if (closed) {
            throw new IllegalStateException("residentBytes on " + this + " after close (expected an open memory; fix:"
                    + " call residentBytes before close())");
        }
        return Pages.resident(local(), offsetBytes, bytes);
    }

    /** Whether this rank closed this memory (its part is freed). */
    boolean isClosed() {
        return closed;
    }

    /**
     * {@inheritDoc}
     *
     * <p>Internal: what the host communicator and the control plane run on; not for callers of symmetric memory.
     */
    @Override
    public PadSynchronizer sync() {
        return sync;
    }

    @Override
    public void barrier() {
        sync.beginOp("symmetric-memory", id);
        sync.barrier("barrier");
    }

    @Override
    public void putWithSignal(int peer, MemorySegment src, long dstOffset, int slot, long value, SignalOp op) {
        checkPeer(peer);
        checkSlot(slot);
        Objects.requireNonNull(src, "src");
        if (dstOffset < 0 || dstOffset > byteSize - src.byteSize()) {
            throw new IndexOutOfBoundsException("put of " + src.byteSize() + " bytes at dstOffset=" + dstOffset
                    + " outside symmetric memory of " + byteSize + " bytes (fix: pass 0 <= dstOffset <= "
                    + byteSize + " - src.byteSize())");
        }
        MemorySegment.copy(src, 0, data[peer], dstOffset, src.byteSize());
        sync.signal(peer, slot, value, op); // release: orders the copy above before the signal
    }

    @Override
    public void signal(int peer, int slot, long value, SignalOp op) {
        checkPeer(peer);
        checkSlot(slot);
        sync.signal(peer, slot, value, op);
    }

    @Override
    public long waitSignal(int slot, long atLeast, int fromRank) {
        checkSlot(slot);
        sync.beginOp("symmetric-memory", id);
        return sync.waitSignal(slot, atLeast, fromRank, "wait-signal");
    }

    @Override
    public long readSignal(int slot) {
        checkSlot(slot);
        return sync.readSignal(slot);
    }

    private void checkPeer(int peer) {
        if (peer < 0 || peer >= data.length) {
            throw new IndexOutOfBoundsException("peer=" + peer + " outside [0, " + data.length + ") (fix: pass a rank"
                    + " of the group, 0 .. " + (data.length - 1) + ")");
        }
    }

    private void checkSlot(int slot) {
        if (slot < 0 || slot >= signalSlots) {
            throw new IndexOutOfBoundsException("signal slot=" + slot + " outside [0, " + signalSlots + ") (fix: pass"
                    + " a slot 0 .. " + (signalSlots - 1) + ")");
        }
    }

    /**
     * Leaves the memory: tells every peer this rank is done with it and waits (bounded) until every
     * peer is done too, then frees this rank's part. A peer that still waits for this rank in a
     * collective fails at once instead of waiting out its timeout. If the group was aborted, or a
     * peer is gone, frees without waiting.
     */
    @Override
    public void close() {
        if (closed) {
            return;
        }
        closed = true;
        try {
            if (!group.abortState().isRaised()) {
                sync.beginOp("symmetric-memory", id);
                sync.leaveAndAwaitPeers();
            }
        } finally {
            sync.detach();
            releaseLocal.run();
        }
    }

    @Override
    public String toString() {
        return "HostSymmetricMemory[" + transportName + ", id=" + id + ", rank=" + group.rank() + "/"
                + group.worldSize() + ", bytes=" + byteSize + "]";
    }
}
