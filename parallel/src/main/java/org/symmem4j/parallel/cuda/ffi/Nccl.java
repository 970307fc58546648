package org.symmem4j.parallel.cuda.ffi;

import static java.lang.foreign.ValueLayout.ADDRESS;
import static java.lang.foreign.ValueLayout.JAVA_BYTE;
import static java.lang.foreign.ValueLayout.JAVA_INT;
import static java.lang.foreign.ValueLayout.JAVA_LONG;

import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.MemoryLayout;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.StructLayout;
import java.lang.invoke.MethodHandle;
import java.util.Optional;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.ReduceOp;

/**
 * NCCL ({@code libnccl.so.2}) through FFM: communicators for in-JVM ranks (one thread per GPU,
 * unique id exchanged through the group), all-reduce, reduce-scatter, all-gather, send/recv,
 * {@code ncclMemAlloc} and symmetric windows ({@code ncclCommWindowRegister} with
 * {@code NCCL_WIN_COLL_SYMMETRIC}, NCCL 2.27+), asynchronous error checks and abort. Every call is
 * checked; errors carry the function, the code and {@code ncclGetErrorString}.
 *
 * <p>Internal: public only so that {@code org.symmem4j.parallel.cuda} can call it; not part of symmem4j's API.
 */
public final class Nccl {

    /** Size of an {@code ncclUniqueId} in bytes. */
    public static final int UNIQUE_ID_BYTES = 128;
    static final StructLayout UNIQUE_ID = MemoryLayout.structLayout(MemoryLayout.sequenceLayout(UNIQUE_ID_BYTES, JAVA_BYTE));
    /**
     * {@code NCCL_WIN_COLL_SYMMETRIC}: window flag for {@link #registerWindow}: a symmetric window.
     */
    public static final int WIN_COLL_SYMMETRIC = 0x01;
    /** {@code NCCL_SHRINK_ABORT}: {@link #shrink}'s parent may have operations that wait for dead ranks: stop them first. */
    static final int SHRINK_ABORT = 0x01;
    /** ncclInProgress: a non-blocking call still running, not an error. */
    static final int IN_PROGRESS = 7;

    private static final Holder HOLDER = new Holder();

    private static final class Holder {
        final Nccl nccl;
        final String reason;

        Holder() {
            String[] why = {null};
            Nccl n = null;
            Optional<NativeLibrary> lib = NativeLibrary.tryLoad("libnccl.so.2", why);
            if (lib.isPresent()) {
                try {
                    n = new Nccl(lib.get());
                } catch (Throwable t) {
                    why[0] = "libnccl.so.2 loaded but binding failed: " + t;
                }
            }
            nccl = n;
            reason = n != null ? null : why[0];
        }
    }

    /**
     * Whether {@code libnccl.so.2} loaded and bound.
     *
     * @return true if {@link #get()} returns NCCL
     */
    public static boolean available() {
        return HOLDER.nccl != null;
    }

    /**
     * Why NCCL is unavailable.
     *
     * @return the reason, or null when NCCL is available
     */
    public static String unavailableReason() {
        return HOLDER.reason;
    }

    /**
     * NCCL, loaded once per JVM.
     *
     * @return the bindings
     * @throws CudaUnavailableException with the reason when NCCL cannot be loaded
     */
    public static Nccl get() {
        if (HOLDER.nccl == null) {
            throw new CudaUnavailableException("NCCL is not available: " + HOLDER.reason
                    + " (fix: install NCCL 2.27+ so libnccl.so.2 is on the library path)");
        }
        return HOLDER.nccl;
    }

    private final MethodHandle ncclGetVersion;
    private final MethodHandle ncclGetErrorString;
    private final MethodHandle ncclGetUniqueId;
    private final MethodHandle ncclCommInitRank;
    private final MethodHandle ncclCommDestroy;
    private final MethodHandle ncclCommAbort;
    private final MethodHandle ncclCommGetAsyncError;
    private final MethodHandle ncclAllReduce;
    private final MethodHandle ncclReduceScatter;
    private final MethodHandle ncclAllGather;
    private final MethodHandle ncclSend;
    private final MethodHandle ncclBroadcast;
    private final MethodHandle ncclRecv;
    private final Optional<MethodHandle> ncclMemAlloc;
    private final Optional<MethodHandle> ncclMemFree;
    private final Optional<MethodHandle> ncclCommWindowRegister;
    private final Optional<MethodHandle> ncclCommWindowDeregister;
    private final Optional<MethodHandle> ncclCommShrink;

    private Nccl(NativeLibrary lib) {
        ncclGetVersion = lib.function("ncclGetVersion", FunctionDescriptor.of(JAVA_INT, ADDRESS));
        ncclGetErrorString = lib.function("ncclGetErrorString", FunctionDescriptor.of(ADDRESS, JAVA_INT));
        ncclGetUniqueId = lib.function("ncclGetUniqueId", FunctionDescriptor.of(JAVA_INT, ADDRESS));
        ncclCommInitRank = lib.function("ncclCommInitRank", FunctionDescriptor.of(JAVA_INT, ADDRESS, JAVA_INT, UNIQUE_ID, JAVA_INT));
        ncclCommDestroy = lib.function("ncclCommDestroy", FunctionDescriptor.of(JAVA_INT, ADDRESS));
        ncclCommAbort = lib.function("ncclCommAbort", FunctionDescriptor.of(JAVA_INT, ADDRESS));
        ncclCommGetAsyncError = lib.function("ncclCommGetAsyncError", FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS));
        FunctionDescriptor collective = FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS, JAVA_LONG, JAVA_INT, JAVA_INT, ADDRESS, ADDRESS);
        ncclAllReduce = lib.function("ncclAllReduce", collective);
        ncclReduceScatter = lib.function("ncclReduceScatter", collective);
        ncclAllGather = lib.function("ncclAllGather", FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS, JAVA_LONG, JAVA_INT, ADDRESS, ADDRESS));
        FunctionDescriptor p2p = FunctionDescriptor.of(JAVA_INT, ADDRESS, JAVA_LONG, JAVA_INT, JAVA_INT, ADDRESS, ADDRESS);
        ncclSend = lib.function("ncclSend", p2p);
        ncclBroadcast = lib.function("ncclBroadcast",
                FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS, JAVA_LONG, JAVA_INT, JAVA_INT, ADDRESS, ADDRESS));
        ncclRecv = lib.function("ncclRecv", p2p);
        ncclMemAlloc = lib.optionalFunction("ncclMemAlloc", FunctionDescriptor.of(JAVA_INT, ADDRESS, JAVA_LONG));
        ncclMemFree = lib.optionalFunction("ncclMemFree", FunctionDescriptor.of(JAVA_INT, ADDRESS));
        ncclCommWindowRegister = lib.optionalFunction("ncclCommWindowRegister",
                FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS, JAVA_LONG, ADDRESS, JAVA_INT));
        ncclCommWindowDeregister = lib.optionalFunction("ncclCommWindowDeregister", FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS));
        // ncclResult_t ncclCommShrink(ncclComm_t comm, int* excludeRanksList, int excludeRanksCount,
        //                             ncclComm_t* newcomm, ncclConfig_t* config, int shrinkFlags)   (NCCL 2.27+)
        ncclCommShrink = lib.optionalFunction("ncclCommShrink",
                FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS, JAVA_INT, ADDRESS, ADDRESS, JAVA_INT));
    }

    void check(String function, int code) {
        if (code != 0 && code != IN_PROGRESS) {
            throw new CudaException("NCCL", function, code, "ncclResult " + code,
                    NativeLibrary.statusText(ncclGetErrorString, code, 4096) + " (fix: act on NCCL's text; NCCL_DEBUG=INFO"
                    + " says more, and bin/symmem4j-doctor checks the driver, the GPUs and the libraries)");
        }
    }


    /**
     * NCCL's version code.
     *
     * @return for example 22809 for 2.28.9
     */
    public int version() {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment v = a.allocate(JAVA_INT);
            check("ncclGetVersion", (int) ncclGetVersion.invokeExact(v));
            return v.get(JAVA_INT, 0);
        } catch (Throwable t) {
            throw NativeLibrary.unchecked(t);
        }
    }

    /**
     * Creates a new unique id (ncclGetUniqueId); one rank makes it and shares it with the group.
     *
     * @return the id's {@link #UNIQUE_ID_BYTES} bytes
     */
    public byte[] uniqueId() {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment id = a.allocate(UNIQUE_ID);
            check("ncclGetUniqueId", (int) ncclGetUniqueId.invokeExact(id));
            return id.toArray(JAVA_BYTE);
        } catch (Throwable t) {
            throw NativeLibrary.unchecked(t);
        }
    }

    /**
     * Collective across the ranks sharing {@code uniqueId}; the calling thread's current context picks the GPU.
     *
     * @param worldSize ranks in the communicator
     * @param uniqueId the shared id from {@link #uniqueId()}
     * @param rank this rank, in [0, worldSize)
     * @return the ncclComm_t
     */
    public MemorySegment initRank(int worldSize, byte[] uniqueId, int rank) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment comm = a.allocate(ADDRESS);
            MemorySegment id = a.allocate(UNIQUE_ID);
            MemorySegment.copy(uniqueId, 0, id, JAVA_BYTE, 0, UNIQUE_ID_BYTES);
            check("ncclCommInitRank(rank=" + rank + ", nranks=" + worldSize + ")",
                    (int) ncclCommInitRank.invokeExact(comm, worldSize, id, rank));
            return comm.get(ADDRESS, 0);
        } catch (Throwable t) {
            throw NativeLibrary.unchecked(t);
        }
    }

    /**
     * Destroys a communicator and frees its resources (ncclCommDestroy).
     *
     * @param comm the ncclComm_t
     */
    public void destroy(MemorySegment comm) {
        try {
            check("ncclCommDestroy", (int) ncclCommDestroy.invokeExact(comm));
        } catch (Throwable t) {
            throw NativeLibrary.unchecked(t);
        }
    }

    /**
     * Aborts a communicator whose peers will not arrive: pending operations return and the comm is freed.
     *
     * @param comm the ncclComm_t
     */
    public void abort(MemorySegment comm) {
        try {
            check("ncclCommAbort", (int) ncclCommAbort.invokeExact(comm));
        } catch (Throwable t) {
            throw NativeLibrary.unchecked(t);
        }
    }

    /**
     * Throws if the communicator has recorded an asynchronous error (for example a failed peer).
     *
     * @param comm the ncclComm_t
     * @throws CudaException if an asynchronous error was recorded
     */
    public void checkAsyncError(MemorySegment comm) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment err = a.allocate(JAVA_INT);
            check("ncclCommGetAsyncError", (int) ncclCommGetAsyncError.invokeExact(comm, err));
            check("ncclCommGetAsyncError (asynchronous error)", err.get(JAVA_INT, 0));
        } catch (Throwable t) {
            throw NativeLibrary.unchecked(t);
        }
    }

    static int dataType(DType dtype) {
        return switch (dtype) {
            case FLOAT32 -> 7;   // ncclFloat32
            case FLOAT64 -> 8;   // ncclFloat64
            case BFLOAT16 -> 9;  // ncclBfloat16
        };
    }

    static int redOp(ReduceOp op) {
        return switch (op) {
            case SUM -> 0;  // ncclSum
            case MAX -> 2;  // ncclMax
            case MIN -> 3;  // ncclMin
            case AVG -> 4;  // ncclAvg
        };
    }

    /**
     * Enqueues an all-reduce.
     *
     * @param send device pointer of the input
     * @param recv device pointer of the output (may equal {@code send})
     * @param count elements per rank
     * @param dtype element type
     * @param op reduction
     * @param comm the ncclComm_t
     * @param stream the CUstream the operation is enqueued on
     */
    public void allReduce(long send, long recv, long count, DType dtype, ReduceOp op, MemorySegment comm, MemorySegment stream) {
        try {
            check("ncclAllReduce", (int) ncclAllReduce.invokeExact(MemorySegment.ofAddress(send), MemorySegment.ofAddress(recv),
                    count, dataType(dtype), redOp(op), comm, stream));
        } catch (Throwable t) {
            throw NativeLibrary.unchecked(t);
        }
    }

    /**
     * Enqueues a reduce-scatter.
     *
     * @param send device pointer of the input ({@code worldSize * recvCount} elements)
     * @param recv device pointer of the output
     * @param recvCount elements each rank receives
     * @param dtype element type
     * @param op reduction
     * @param comm the ncclComm_t
     * @param stream the CUstream the operation is enqueued on
     */
    public void reduceScatter(long send, long recv, long recvCount, DType dtype, ReduceOp op, MemorySegment comm,
                              MemorySegment stream) {
        try {
            check("ncclReduceScatter", (int) ncclReduceScatter.invokeExact(MemorySegment.ofAddress(send),
                    MemorySegment.ofAddress(recv), recvCount, dataType(dtype), redOp(op), comm, stream));
        } catch (Throwable t) {
            throw NativeLibrary.unchecked(t);
        }
    }

    /**
     * Enqueues an all-gather.
     *
     * @param send device pointer of the input
     * @param recv device pointer of the output ({@code worldSize * sendCount} elements)
     * @param sendCount elements each rank contributes
     * @param dtype element type
     * @param comm the ncclComm_t
     * @param stream the CUstream the operation is enqueued on
     */
    public void allGather(long send, long recv, long sendCount, DType dtype, MemorySegment comm, MemorySegment stream) {
        try {
            check("ncclAllGather", (int) ncclAllGather.invokeExact(MemorySegment.ofAddress(send), MemorySegment.ofAddress(recv),
                    sendCount, dataType(dtype), comm, stream));
        } catch (Throwable t) {
            throw NativeLibrary.unchecked(t);
        }
    }

    /**
     * Enqueues a broadcast: {@code root}'s {@code send} into every rank's {@code recv} (in place where they are equal).
     *
     * @param send device pointer of the root's data (read on the root only)
     * @param recv device pointer of the output
     * @param count elements
     * @param dtype element type
     * @param root the rank whose data every rank receives
     * @param comm the ncclComm_t
     * @param stream the CUstream the operation is enqueued on
     */
    public void broadcast(long send, long recv, long count, DType dtype, int root, MemorySegment comm, MemorySegment stream) {
        try {
            check("ncclBroadcast", (int) ncclBroadcast.invokeExact(MemorySegment.ofAddress(send), MemorySegment.ofAddress(recv),
                    count, dataType(dtype), root, comm, stream));
        } catch (Throwable t) {
            throw NativeLibrary.unchecked(t);
        }
    }

    /**
     * Enqueues a point-to-point send.
     *
     * @param buf device pointer of the data
     * @param count elements to send
     * @param dtype element type
     * @param peer the receiving rank
     * @param comm the ncclComm_t
     * @param stream the CUstream the operation is enqueued on
     */
    public void send(long buf, long count, DType dtype, int peer, MemorySegment comm, MemorySegment stream) {
        try {
            check("ncclSend", (int) ncclSend.invokeExact(MemorySegment.ofAddress(buf), count, dataType(dtype), peer, comm, stream));
        } catch (Throwable t) {
            throw NativeLibrary.unchecked(t);
        }
    }

    /**
     * Enqueues a point-to-point receive.
     *
     * @param buf device pointer to receive into
     * @param count elements to receive
     * @param dtype element type
     * @param peer the sending rank
     * @param comm the ncclComm_t
     * @param stream the CUstream the operation is enqueued on
     */
    public void recv(long buf, long count, DType dtype, int peer, MemorySegment comm, MemorySegment stream) {
        try {
            check("ncclRecv", (int) ncclRecv.invokeExact(MemorySegment.ofAddress(buf), count, dataType(dtype), peer, comm, stream));
        } catch (Throwable t) {
            throw NativeLibrary.unchecked(t);
        }
    }

    /**
     * Whether this NCCL has ncclMemAlloc and symmetric windows (2.27+).
     *
     * @return true if {@link #memAlloc} and {@link #registerWindow} work
     */
    public boolean hasSymmetricWindows() {
        return ncclMemAlloc.isPresent() && ncclCommWindowRegister.isPresent();
    }

    private MethodHandle required(Optional<MethodHandle> h, String name) {
        return h.orElseThrow(() -> new CudaUnavailableException("this NCCL (version " + version() + ") has no " + name
                + "; symmetric windows need NCCL 2.27 or newer; fix: install NCCL 2.27+ so libnccl.so.2 is on the"
                + " library path, or use Algorithm.NCCL without symmetric windows"));
    }

    /**
     * Device memory from NCCL's allocator (CUDA VMM), required for symmetric windows.
     *
     * @param bytes size in bytes
     * @return the device pointer
     * @throws CudaUnavailableException if this NCCL has no ncclMemAlloc
     */
    public long memAlloc(long bytes) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment p = a.allocate(ADDRESS);
            check("ncclMemAlloc(" + bytes + " bytes)", (int) required(ncclMemAlloc, "ncclMemAlloc").invokeExact(p, bytes));
            return p.get(ADDRESS, 0).address();
        } catch (Throwable t) {
            throw NativeLibrary.unchecked(t);
        }
    }

    /**
     * Frees memory from {@link #memAlloc}.
     *
     * @param ptr the device pointer
     */
    public void memFree(long ptr) {
        try {
            check("ncclMemFree", (int) required(ncclMemFree, "ncclMemFree").invokeExact(MemorySegment.ofAddress(ptr)));
        } catch (Throwable t) {
            throw NativeLibrary.unchecked(t);
        }
    }

    /**
     * Collective: registers {@code bytes} at {@code ptr} as a window with {@code flags}.
     *
     * @param comm the ncclComm_t
     * @param ptr device pointer from {@link #memAlloc}
     * @param bytes size in bytes
     * @param flags window flags, e.g. {@link #WIN_COLL_SYMMETRIC}
     * @return the window handle
     * @throws CudaUnavailableException if this NCCL has no windows
     */
    public MemorySegment registerWindow(MemorySegment comm, long ptr, long bytes, int flags) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment win = a.allocate(ADDRESS);
            check("ncclCommWindowRegister", (int) required(ncclCommWindowRegister, "ncclCommWindowRegister")
                    .invokeExact(comm, MemorySegment.ofAddress(ptr), bytes, win, flags));
            return win.get(ADDRESS, 0);
        } catch (Throwable t) {
            throw NativeLibrary.unchecked(t);
        }
    }

    /**
     * Collective: deregisters a window from {@link #registerWindow}.
     *
     * @param comm the ncclComm_t
     * @param window the window handle
     */
    public void deregisterWindow(MemorySegment comm, MemorySegment window) {
        try {
            check("ncclCommWindowDeregister", (int) required(ncclCommWindowDeregister, "ncclCommWindowDeregister")
                    .invokeExact(comm, window));
        } catch (Throwable t) {
            throw NativeLibrary.unchecked(t);
        }
    }

    /**
     * Whether this NCCL has {@code ncclCommShrink} (2.27+).
     *
     * @return true if {@link #shrink} works
     */
    public boolean hasShrink() {
        return ncclCommShrink.isPresent();
    }

    /**
     * Collective over the surviving ranks of {@code comm}: a new communicator without {@code exclude}, its ranks the
     * survivors' in their order (ncclCommShrink with {@code NCCL_SHRINK_ABORT}: the parent's operations that wait for the
     * excluded ranks are stopped first; the configuration is the parent's). The parent stays the caller's to abort.
     *
     * @param comm    the parent ncclComm_t
     * @param exclude the parent's ranks that are gone
     * @return the new ncclComm_t
     * @throws CudaUnavailableException if this NCCL has no ncclCommShrink
     */
    public MemorySegment shrink(MemorySegment comm, int[] exclude) {
        MethodHandle h = ncclCommShrink.orElseThrow(() -> new CudaUnavailableException("this NCCL (version " + version()
                + ") has no ncclCommShrink (NCCL 2.27 or newer has it; fix: make a new communicator from a new unique id"
                + " instead, or install NCCL 2.27+)"));
        try (Arena a = Arena.ofConfined()) {
            MemorySegment list = a.allocateFrom(JAVA_INT, exclude);
            MemorySegment out = a.allocate(ADDRESS);
            check("ncclCommShrink(exclude=" + java.util.Arrays.toString(exclude) + ")",
                    (int) h.invokeExact(comm, list, exclude.length, out, MemorySegment.NULL, SHRINK_ABORT));
            return out.get(ADDRESS, 0);
        } catch (Throwable t) {
            throw NativeLibrary.unchecked(t);
        }
    }
}
