package org.symmem4j.parallel.cuda;

import java.lang.foreign.MemorySegment;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.CommunicatorOptions;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.InJvmGroup;
import org.symmem4j.parallel.SymmemException;
import org.symmem4j.parallel.SymmetricMemory;
import org.symmem4j.parallel.Transport;

/**
 * GPUs of one machine, one per rank, ranks as threads of one JVM ({@link InJvmGroup}): each rank
 * allocates its buffer and signal pad on its device, the ranks swap device pointers, and every
 * context gets peer access to every other device, so kernels read and write peers' memory over
 * NVLink (or PCIe). Rank r uses device r mod deviceCount: on a one-GPU machine the ranks share
 * the device, which is right for testing correctness and meaningless for speed.
 *
 * <pre>{@code
 * CudaTransport cuda = CudaTransport.create();          // throws CudaUnavailableException without a driver
 * InJvmWorld.runOnEveryRank(world, group -> {
 *     try (SymmetricMemory grads = cuda.allocate(group, bytes);
 *          Communicator comm = cuda.communicator(group, CommunicatorOptions.defaults())) {
 *         ((CudaSymmetricMemory) grads).copyFromHost(hostGrads, 0);
 *         comm.allReduce(grads, 0, count, DType.BFLOAT16, ReduceOp.SUM, Algorithm.TWO_SHOT);
 *         ((CudaCommunicator) comm).synchronize();
 *     }
 *     cuda.release(group);                                // this rank's stream, context retain, ...
 * });
 * cuda.close();                                          // whatever ranks were not released
 * }</pre>
 *
 * <h2>Lifecycle</h2>
 * A rank's GPU state (its {@code CudaRank}: stream, primary-context retain, hold on the device's
 * kernels, eager graphs, launch scratch, user graphs and modules) is created at the group's first use
 * of this transport and lives until {@link #release(Group)} for that group or {@link #close()}.
 * Release a rank after closing its memories and communicators: they use the state. After
 * {@link #close()} every method that takes a group throws {@link IllegalStateException}.
 */
public final class CudaTransport implements Transport, AutoCloseable {

    /** The transport's name, the {@code transport} metric tag. */
    public static final String NAME = "cuda";

    private final CudaDriver driver;
    private final Map<Group, CudaRank> ranks = new ConcurrentHashMap<>();
    /** Set once by {@link #close}; checked by every entry point. */
    private volatile boolean closed;

    private CudaTransport(CudaDriver driver) {
        this.driver = driver;
    }

    /**
     * A transport on this machine's GPUs; throws {@link CudaUnavailableException} saying why when there are none.
     *
     * @return the transport
     */
    public static CudaTransport create() {
        return new CudaTransport(CudaDriver.get());
    }

    CudaDriver driver() {
        return driver;
    }

    /**
     * This rank's GPU state, created on first use on the rank's thread (its context becomes current
     * there); refused once the group was released or the transport closed.
     */
    CudaRank rank(Group group) {
        checkOpen(group);
        CudaRank r = ranks.computeIfAbsent(group, g -> new CudaRank(driver, g.rank(), g.worldSize()));
        if (closed) { // close() ran while the rank was being made: it may have missed it
            ranks.remove(group, r);
            r.close();
            checkOpen(group);
        }
        r.makeCurrent("use the cuda transport");
        return r;
    }

    private void checkOpen(Group group) {
        if (closed) {
            throw new IllegalStateException("cuda transport closed: rank=" + (group == null ? "?" : group.rank())
                    + " cannot use it (it released every rank's stream, context and kernels; create a new transport"
                    + " with CudaTransport.create())");
        }
    }

    /**
     * Releases this rank's GPU state for {@code group}: waits for the rank's stream, then destroys
     * its stream and its cached graphs, unloads the user modules still loaded, frees its launch
     * scratch, and gives back its hold on the device's kernels and its retain of the device's primary
     * context (the last rank on a device unloads the kernels and lets the context go). Not
     * collective: each rank releases its own, on its own thread, after closing every memory and
     * communicator of {@code group} on this transport (those become unusable; graphs and user
     * modules still open are destroyed here). A group that never used this transport, or was
     * released already, is a no-op. A later use of the group on this transport creates a fresh state.
     *
     * @param group a rank's group on this transport
     * @throws CudaException when the driver fails to release something (everything else is still released)
     */
    public void release(Group group) {
        CudaRank r = ranks.remove(group);
        if (r != null) {
            r.close();
        }
    }

    /**
     * Releases every rank still held (as {@link #release(Group)} does, from the calling thread) and
     * refuses any later use of this transport with {@link IllegalStateException}. Call it after every
     * rank's thread is done with the transport. Idempotent.
     *
     * @throws CudaException when the driver fails to release something (everything else is still released)
     */
    @Override
    public void close() {
        closed = true;
        RuntimeException first = null;
        for (Group g : List.copyOf(ranks.keySet())) {
            try {
                release(g);
            } catch (RuntimeException e) {
                if (first == null) {
                    first = e;
                } else {
                    first.addSuppressed(e);
                }
            }
        }
        if (first != null) {
            throw first;
        }
    }

    /** Ranks this transport holds now (tests: 0 after every group was released). */
    int heldRanks() {
        return ranks.size();
    }

    @Override
    public String name() {
        return NAME;
    }

    /**
     * Device name and ordinal of this rank's GPU, for reports.
     *
     * @param group a rank's group on this transport
     * @return e.g. {@code "NVIDIA H100 80GB HBM3 (device 0, 132 SMs)"}
     */
    public String describe(Group group) {
        CudaRank r = rank(group);
        return r.deviceName + " (device " + r.ordinal + ", " + r.multiprocessors + " SMs)";
    }

    private record Contribution(long data, long pad, int ordinal, MemorySegment context, long bytes, long idProposal) {
    }

    private static final java.util.concurrent.atomic.AtomicLong NEXT_ID = new java.util.concurrent.atomic.AtomicLong();

    @Override
    public SymmetricMemory allocate(Group group, long bytes) {
        if (bytes < 0) {
            throw new IllegalArgumentException("bytes=" + bytes + " must be >= 0");
        }
        CudaRank r = rank(inJvm(group));
        long data = driver.malloc(Math.max(bytes, 16));
        driver.memset(data, (byte) 0, Math.max(bytes, 16));
        return share(inJvm(group), r, data, bytes, true, "allocate");
    }

    /**
     * Registers {@code buffer} — whose address must be a device pointer on this rank's GPU and whose
     * byte size is the buffer's size — so collectives run on it in place.
     */
    @Override
    public SymmetricMemory register(Group group, MemorySegment buffer) {
        CudaRank r = rank(inJvm(group));
        return share(inJvm(group), r, buffer.address(), buffer.byteSize(), false, "register");
    }

    private SymmetricMemory share(InJvmGroup g, CudaRank r, long data, long bytes, boolean ownsData, String what) {
        long pad = driver.malloc(CudaKernels.PAD_BYTES);
        driver.memset(pad, (byte) 0, CudaKernels.PAD_BYTES);
        Object[] all;
        try {
            all = g.allGatherObjects("cuda-" + what, new Contribution(data, pad, r.ordinal, r.context, bytes,
                    g.rank() == 0 ? NEXT_ID.getAndIncrement() : -1));
        } catch (RuntimeException e) {
            driver.free(pad);
            if (ownsData) {
                driver.free(data);
            }
            throw e;
        }
        int n = g.worldSize();
        long[] datas = new long[n];
        long[] pads = new long[n];
        StringBuilder sizes = new StringBuilder();
        boolean same = true;
        for (int p = 0; p < n; p++) {
            Contribution c = (Contribution) all[p];
            datas[p] = c.data();
            pads[p] = c.pad();
            same &= c.bytes() == bytes;
            sizes.append(p == 0 ? "" : ", ").append("rank=").append(p).append(" bytes=").append(c.bytes());
            if (c.ordinal() != r.ordinal) {
                if (!driver.canAccessPeer(r.device, driver.device(c.ordinal()))) {
                    throw new SymmemException("device " + r.ordinal + " cannot access device " + c.ordinal()
                            + " (no peer access between these GPUs; use Algorithm.NCCL)");
                }
                driver.enablePeerAccess(c.context());
            }
        }
        if (!same) {
            driver.free(pad);
            if (ownsData) {
                driver.free(data);
            }
            throw new SymmemException("symmetric memory " + what + ": sizes differ across ranks: " + sizes
                    + " (every rank must " + what + " the same number of bytes)");
        }
        long id = ((Contribution) all[0]).idProposal();
        return new CudaSymmetricMemory(g, this, r, id, bytes, datas, pads, ownsData);
    }

    @Override
    public Communicator communicator(Group group, CommunicatorOptions options) {
        return new CudaCommunicator(this, inJvm(group), options);
    }

    private static InJvmGroup inJvm(Group group) {
        if (group instanceof InJvmGroup g) {
            return g;
        }
        throw new IllegalArgumentException("transport " + NAME + " needs an InJvmGroup (one thread per GPU); found "
                + (group == null ? "null" : group.getClass().getSimpleName())
                + " (cross-process CUDA symmetric memory is not implemented yet)");
    }
}
