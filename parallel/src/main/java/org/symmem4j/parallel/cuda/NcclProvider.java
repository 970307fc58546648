package org.symmem4j.parallel.cuda;

import java.lang.foreign.MemorySegment;
import java.util.Arrays;
import java.util.List;
import org.symmem4j.parallel.Algorithm;
import org.symmem4j.parallel.CommunicatorOptions;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.ReduceOp;
import org.symmem4j.parallel.cuda.ffi.CudaDriver;
import org.symmem4j.parallel.cuda.ffi.CudaUnavailableException;
import org.symmem4j.parallel.cuda.ffi.Nccl;

/**
 * NCCL as a provider of a {@link CudaCommunicator}'s collectives: its communicator (set up
 * collectively, one GPU per rank), {@link Algorithm#NCCL} in place on the caller's buffer,
 * {@link Algorithm#NCCL_SYMMETRIC} through an NCCL symmetric window, point-to-point sends and
 * receives, and its teardown. All calls are enqueued on the rank's stream. Where NCCL cannot run
 * (not loaded, ranks sharing a GPU, an NCCL without windows), the reasons are kept for messages.
 */
final class NcclProvider {

    private static final org.slf4j.Logger LOG = org.slf4j.LoggerFactory.getLogger(NcclProvider.class);

    private final CudaDriver driver;
    private final CudaRank rank;
    private final MemorySegment comm;
    private final String unavailable;
    /**
     * NCCL_SYMMETRIC's window: {@link CommunicatorOptions#stagingBytes()} from {@code ncclMemAlloc},
     * registered with {@code NCCL_WIN_COLL_SYMMETRIC}; messages go through it in pieces. Null where
     * NCCL or its windows are unavailable ({@link #windowUnavailable} says why).
     */
    private final NcclWindow window;
    private final String windowUnavailable;
    /** The transport's communicators across a shrink: this one is parked there instead of destroyed after one. */
    private final NcclShrinks shrinks;
    /** Set once by {@link #abort} (the communicator is freed) or {@link #close}, whichever comes first (any thread). */
    private final java.util.concurrent.atomic.AtomicBoolean ended = new java.util.concurrent.atomic.AtomicBoolean();

    /**
     * Collective: sets up NCCL for {@code group} where it can run: the survivors of an in-place shrink shrink their old
     * communicator ({@code ncclCommShrink}, where every survivor has one parked in {@code shrinks} for this GPU), every
     * other group makes a new one from rank 0's unique id.
     *
     * @param sharing      which ranks share a GPU, or null when every rank has its own
     * @param stagingBytes the size of the NCCL_SYMMETRIC window
     * @param shrinks      the transport's communicators across a shrink
     */
    NcclProvider(Group group, CudaDriver driver, CudaRank rank, String sharing, long stagingBytes, NcclShrinks shrinks) {
        this.driver = driver;
        this.rank = rank;
        this.shrinks = shrinks;
        MemorySegment c = null;
        String why = null;
        if (sharing != null) {
            why = "NCCL needs one GPU per rank; " + sharing;
        } else if (!Nccl.available()) {
            why = Nccl.unavailableReason();
        } else {
            c = open(group);
            shrinks.opened(this, rank.ordinal, group.worldSize());
        }
        this.comm = c;
        this.unavailable = why;
        if (c == null) {
            this.window = null;
            this.windowUnavailable = why;
        } else if (!Nccl.get().hasSymmetricWindows()) {
            this.window = null;
            this.windowUnavailable = "NCCL " + Nccl.get().version() + " has no symmetric windows"
                    + " (ncclCommWindowRegister and ncclMemAlloc need NCCL 2.27 or newer)";
        } else {
            // collective: every rank of the NCCL communicator registers its window here
            Nccl nccl = Nccl.get();
            long ptr = nccl.memAlloc(stagingBytes);
            this.window = new NcclWindow(nccl, c, ptr, stagingBytes,
                    nccl.registerWindow(c, ptr, stagingBytes, Nccl.WIN_COLL_SYMMETRIC));
            this.windowUnavailable = null;
        }
    }

    /**
     * Collective: one exchange of {@code [has a parked parent][rank 0's unique id]}, so every rank decides alike: all
     * have a parent — each shrinks its own; else every parent is aborted and the communicator is made from rank 0's id
     * (a second exchange with a fresh id where rank 0 offered its parent instead of an id). Rank 0 makes an id only where
     * it is used: an unused one would leave NCCL's bootstrap listening.
     */
    private MemorySegment open(Group group) {
        Nccl nccl = Nccl.get();
        NcclShrinks.Parent parent = nccl.hasShrink() ? shrinks.take(group.worldSize(), rank.ordinal) : null;
        byte[] offer = new byte[1 + Nccl.UNIQUE_ID_BYTES];
        offer[0] = (byte) (parent == null ? 0 : 1);
        if (group.rank() == 0 && parent == null) {
            System.arraycopy(nccl.uniqueId(), 0, offer, 1, Nccl.UNIQUE_ID_BYTES);
        }
        List<byte[]> offers = group.allGatherBytes("nccl-unique-id", offer);
        boolean everyRankHasOne = offers.stream().allMatch(o -> o[0] == 1);
        driver.setCurrent(rank.context);
        if (everyRankHasOne) {
            try {
                MemorySegment c = nccl.shrink(parent.comm(), parent.dead());
                LOG.info("rank={}: NCCL communicator of {} ranks made by ncclCommShrink of the old group's {} ranks without"
                        + " {}", group.rank(), group.worldSize(), parent.worldSize(), Arrays.toString(parent.dead()));
                return c;
            } finally {
                NcclShrinks.retire(parent);
            }
        }
        if (parent != null) {
            NcclShrinks.retire(parent);
            LOG.info("rank={}: NCCL communicator of {} ranks made from a new unique id: not every survivor of the shrink"
                    + " kept an old communicator on its GPU", group.rank(), group.worldSize());
        }
        byte[] id;
        if (offers.getFirst()[0] == 1) {
            byte[] fresh = group.rank() == 0 ? nccl.uniqueId() : new byte[Nccl.UNIQUE_ID_BYTES];
            id = group.allGatherBytes("nccl-unique-id-fresh", fresh).getFirst();
        } else {
            id = Arrays.copyOfRange(offers.getFirst(), 1, 1 + Nccl.UNIQUE_ID_BYTES);
        }
        return nccl.initRank(group.worldSize(), id, group.rank());
    }

    /** {@return whether {@link Algorithm#NCCL} runs here} */
    boolean available() {
        return comm != null;
    }

    /** {@return whether {@link Algorithm#NCCL_SYMMETRIC} runs here} */
    boolean symmetricAvailable() {
        return window != null;
    }

    /** {@return why NCCL is not usable here, or null when it is} */
    String unavailableReason() {
        return unavailable;
    }

    /** {@return why NCCL_SYMMETRIC is not usable here, or null when it is} */
    String symmetricUnavailableReason() {
        return windowUnavailable;
    }

    /** {@link Algorithm#NCCL}: all-reduces {@code count} elements at device address {@code ptr} in place. */
    void allReduce(long ptr, long count, DType dtype, ReduceOp op) {
        Nccl.get().allReduce(ptr, ptr, count, dtype, op, comm, rank.stream);
    }

    /**
     * NCCL_SYMMETRIC: in pieces of the window's size, copies the elements at device address
     * {@code ptr} into this rank's window, all-reduces the window with NCCL and copies the result back,
     * all on this rank's stream (capturable).
     */
    void symmetricAllReduce(long ptr, long count, DType dtype, ReduceOp op) {
        long dsize = dtype.byteSize();
        long piece = Math.max(1, window.bytes() / dsize);
        for (long start = 0; start < count; start += piece) {
            long len = Math.min(piece, count - start);
            driver.copyDeviceToDeviceAsync(window.pointer(), ptr + start * dsize, len * dsize, rank.stream);
            Nccl.get().allReduce(window.pointer(), window.pointer(), len, dtype, op, comm, rank.stream);
            driver.copyDeviceToDeviceAsync(ptr + start * dsize, window.pointer(), len * dsize, rank.stream);
        }
    }

    /**
     * NCCL point-to-point on this rank's stream: sends {@code bytes} at device address {@code ptr} to
     * {@code peer}, which must post the matching {@link #recv}.
     *
     * @param ptr device address of the data
     * @param bytes bytes to send, a multiple of 4
     * @param peer the receiving rank
     * @throws IllegalArgumentException if {@code bytes} is not a multiple of 4
     * @throws CudaUnavailableException if NCCL is unavailable
     */
    void send(long ptr, long bytes, int peer) {
        Nccl.get().send(ptr, p2pCount(bytes), DType.FLOAT32, peer, require(), rank.stream);
    }

    /**
     * Receives {@code bytes} from {@code peer} into device address {@code ptr}; see {@link #send}.
     *
     * @param ptr device address to receive into
     * @param bytes bytes to receive, a multiple of 4
     * @param peer the sending rank
     * @throws IllegalArgumentException if {@code bytes} is not a multiple of 4
     * @throws CudaUnavailableException if NCCL is unavailable
     */
    void recv(long ptr, long bytes, int peer) {
        Nccl.get().recv(ptr, p2pCount(bytes), DType.FLOAT32, peer, require(), rank.stream);
    }

    /**
     * The NCCL communicator, with the rank's context made current.
     *
     * @return the communicator
     * @throws CudaUnavailableException if NCCL is unavailable
     */
    MemorySegment require() {
        if (comm == null) {
            throw new CudaUnavailableException("NCCL unavailable: " + unavailable + " (fix: check"
                    + " Communicator.supports(Algorithm.NCCL) first and use another algorithm, or run one GPU per rank"
                    + " with NCCL 2.x's libnccl.so.2 on the library path)");
        }
        driver.setCurrent(rank.context);
        return comm;
    }

    static long p2pCount(long bytes) {
        if (bytes % 4 != 0) {
            throw new IllegalArgumentException("NCCL send/recv here moves whole 4-byte words: bytes=" + bytes
                    + " expected a multiple of 4 (fix: pad the message)");
        }
        return bytes / 4;
    }

    /** Throws NCCL's asynchronous error, if it has one (after the stream was synchronized). */
    void checkAsyncError() {
        if (comm != null) {
            Nccl.get().checkAsyncError(comm);
        }
    }

    /** Aborts the NCCL communicator: its kernels stop waiting for peers; it is freed (a later {@link #close} does nothing). */
    void abort() {
        if (comm != null && ended.compareAndSet(false, true)) {
            shrinks.aborted(this);
            try {
                Nccl.get().abort(comm);
            } finally {
                if (window != null) {
                    Nccl.get().memFree(window.pointer()); // its registration went with the communicator
                }
            }
        }
    }

    /**
     * Collective: deregisters and frees the window, then destroys the NCCL communicator; after its group shrank in place
     * (marked in {@link NcclShrinks}) it is parked for the survivors' {@code ncclCommShrink} instead, since destroying it
     * would wait for the dead ranks.
     */
    void close() {
        if (comm == null || !ended.compareAndSet(false, true)) {
            return;
        }
        if (shrinks.close(this, comm, window == null ? 0 : window.pointer()) != null) {
            return;
        }
        if (window != null) {
            window.close();
        }
        Nccl.get().destroy(comm);
    }
}
