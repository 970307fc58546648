package org.symmem4j.parallel.mpi;

import static java.lang.foreign.ValueLayout.ADDRESS;
import static java.lang.foreign.ValueLayout.JAVA_INT;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.ReduceOp;

/**
 * An MPI communicator ({@code MPI_Comm}): its rank and size, the collectives the multi-node hierarchy
 * uses on host memory, and {@link #split}. Counts are elements; buffers are native segments (heap
 * arrays cannot be handed to MPI). FLOAT32 and FLOAT64 with SUM, MAX and MIN (MPI has no AVG and, in
 * Open MPI 4, no bfloat16). Every call's return code is checked ({@link MpiException}).
 */
public final class MpiComm implements AutoCloseable {

    private final MemorySegment handle;
    private final boolean owned;
    private final int rank;
    private final int size;
    private boolean closed;

    private MpiComm(MemorySegment handle, boolean owned, int rank, int size) {
        this.handle = handle;
        this.owned = owned;
        this.rank = rank;
        this.size = size;
    }

    static MpiComm wrap(MemorySegment handle, boolean owned) {
        OpenMpi mpi = OpenMpi.get();
        return Mpi.call(() -> {
            try (Arena arena = Arena.ofConfined()) {
                MemorySegment out = arena.allocate(JAVA_INT);
                mpi.check((int) mpi.commRank.invokeExact(handle, out), "MPI_Comm_rank");
                int r = out.get(JAVA_INT, 0);
                mpi.check((int) mpi.commSize.invokeExact(handle, out), "MPI_Comm_size");
                return new MpiComm(handle, owned, r, out.get(JAVA_INT, 0));
            }
        });
    }

    /**
     * This process's rank in the communicator.
     *
     * @return 0 .. size()-1
     */
    public int rank() {
        return rank;
    }

    /**
     * The number of processes in the communicator.
     *
     * @return at least 1
     */
    public int size() {
        return size;
    }

    /**
     * Collective {@code MPI_Comm_split}: processes with the same {@code color} form a new communicator,
     * ranked by {@code key} (ties by rank here). Close it when done.
     *
     * @param color the new communicator's identity, at least 0
     * @param key   this process's order in it
     * @return the new communicator
     */
    public MpiComm split(int color, int key) {
        requireOpen();
        OpenMpi mpi = OpenMpi.get();
        return Mpi.call(() -> {
            try (Arena arena = Arena.ofConfined()) {
                MemorySegment out = arena.allocate(ADDRESS);
                mpi.check((int) mpi.commSplit.invokeExact(handle, color, key, out), "MPI_Comm_split");
                MemorySegment comm = out.get(ADDRESS, 0);
                mpi.check((int) mpi.commSetErrhandler.invokeExact(comm, mpi.errorsReturn), "MPI_Comm_set_errhandler");
                return wrap(comm, true);
            }
        });
    }

    /**
     * {@code MPI_Comm_create_group}: a communicator of the processes of this one at {@code ranks}, ranked in that order.
     * Collective over those processes only (the others take no part, unlike {@link #split}), so a sub-group of a job can
     * make its own while the rest of the job does something else. Close it when done.
     *
     * @param ranks this communicator's ranks of the new one's processes, in their new order; this process among them,
     *              none twice
     * @param tag   tells apart creations that the same processes may run at once (any value from 0)
     * @return the new communicator
     * @throws IllegalArgumentException when a rank is out of range or repeated, or this process is not among them
     */
    public MpiComm subset(int[] ranks, int tag) {
        requireOpen();
        java.util.Set<Integer> seen = new java.util.HashSet<>();
        boolean mine = false;
        for (int r : ranks) {
            if (r < 0 || r >= size || !seen.add(r)) {
                throw new IllegalArgumentException("ranks " + java.util.Arrays.toString(ranks) + ": expected distinct ranks"
                        + " in [0, " + size + ") (fix: list each rank of the new communicator once)");
            }
            mine |= r == rank;
        }
        if (!mine) {
            throw new IllegalArgumentException("ranks " + java.util.Arrays.toString(ranks) + " do not include this process's"
                    + " rank " + rank + ": only the processes of the new communicator create it"
                    + " (fix: call it only on the processes it lists)");
        }
        OpenMpi mpi = OpenMpi.get();
        return Mpi.call(() -> {
            try (Arena arena = Arena.ofConfined()) {
                MemorySegment all = arena.allocate(ADDRESS);
                mpi.check((int) mpi.commGroup.invokeExact(handle, all), "MPI_Comm_group");
                MemorySegment some = arena.allocate(ADDRESS);
                try {
                    mpi.check((int) mpi.groupIncl.invokeExact(all.get(ADDRESS, 0), ranks.length,
                            arena.allocateFrom(JAVA_INT, ranks), some), "MPI_Group_incl");
                    MemorySegment out = arena.allocate(ADDRESS);
                    try {
                        mpi.check((int) mpi.commCreateGroup.invokeExact(handle, some.get(ADDRESS, 0), tag, out),
                                "MPI_Comm_create_group");
                    } finally {
                        mpi.check((int) mpi.groupFree.invokeExact(some), "MPI_Group_free");
                    }
                    MemorySegment comm = out.get(ADDRESS, 0);
                    mpi.check((int) mpi.commSetErrhandler.invokeExact(comm, mpi.errorsReturn), "MPI_Comm_set_errhandler");
                    return wrap(comm, true);
                } finally {
                    mpi.check((int) mpi.groupFree.invokeExact(all), "MPI_Group_free");
                }
            }
        });
    }

    /**
     * Collective in-place all-reduce of {@code count} elements of {@code buffer}.
     *
     * @param buffer native memory of at least {@code count} elements
     * @param count  elements
     * @param dtype  FLOAT32 or FLOAT64
     * @param op     SUM, MAX or MIN
     * @throws IllegalArgumentException when the type, op or buffer does not fit
     */
    public void allReduce(MemorySegment buffer, long count, DType dtype, ReduceOp op) {
        requireOpen();
        requireFits(buffer, count, dtype, "buffer");
        OpenMpi mpi = OpenMpi.get();
        MemorySegment type = type(mpi, dtype);
        MemorySegment mpiOp = op(mpi, op);
        long done = 0;
        do { // MPI counts are ints: pieces of at most 2^31-1 elements (one call, of 0 elements, for count 0)
            int piece = (int) Math.min(Integer.MAX_VALUE, count - done);
            MemorySegment at = buffer.asSlice(dtype.bytes(done));
            Mpi.call(() -> {
                mpi.check((int) mpi.allreduce.invokeExact(OpenMpi.IN_PLACE, at, piece, type, mpiOp, handle), "MPI_Allreduce");
                return null;
            });
            done += piece;
        } while (done < count);
    }

    /**
     * Collective {@code MPI_Reduce_scatter_block}: {@code send} holds {@code size() x recvCount} elements;
     * rank r receives the reduction of every rank's block r in {@code recv}.
     *
     * @param send      native memory, {@code size() x recvCount} elements
     * @param recv      native memory, {@code recvCount} elements
     * @param recvCount elements per rank, at most 2^31-1
     * @param dtype     FLOAT32 or FLOAT64
     * @param op        SUM, MAX or MIN
     */
    public void reduceScatterBlock(MemorySegment send, MemorySegment recv, long recvCount, DType dtype, ReduceOp op) {
        requireOpen();
        int count = intCount(recvCount, "recvCount");
        requireFits(send, recvCount * size, dtype, "send");
        requireFits(recv, recvCount, dtype, "recv");
        OpenMpi mpi = OpenMpi.get();
        MemorySegment type = type(mpi, dtype);
        MemorySegment mpiOp = op(mpi, op);
        Mpi.call(() -> {
            mpi.check((int) mpi.reduceScatterBlock.invokeExact(send, recv, count, type, mpiOp, handle), "MPI_Reduce_scatter_block");
            return null;
        });
    }

    /**
     * Collective {@code MPI_Allgather}: every rank's {@code sendCount} elements, in rank order, into {@code recv}.
     *
     * @param send      native memory, {@code sendCount} elements
     * @param recv      native memory, {@code size() x sendCount} elements
     * @param sendCount elements per rank, at most 2^31-1
     * @param dtype     FLOAT32 or FLOAT64
     */
    public void allGather(MemorySegment send, MemorySegment recv, long sendCount, DType dtype) {
        requireOpen();
        int count = intCount(sendCount, "sendCount");
        requireFits(send, sendCount, dtype, "send");
        requireFits(recv, sendCount * size, dtype, "recv");
        OpenMpi mpi = OpenMpi.get();
        MemorySegment type = type(mpi, dtype);
        Mpi.call(() -> {
            mpi.check((int) mpi.allgather.invokeExact(send, count, type, recv, count, type, handle), "MPI_Allgather");
            return null;
        });
    }

    /**
     * Collective {@code MPI_Bcast} of {@code count} elements from {@code root}.
     *
     * @param buffer native memory of at least {@code count} elements
     * @param count  elements, at most 2^31-1
     * @param dtype  FLOAT32 or FLOAT64
     * @param root   the rank whose data every rank receives
     */
    public void broadcast(MemorySegment buffer, long count, DType dtype, int root) {
        requireOpen();
        int n = intCount(count, "count");
        requireFits(buffer, count, dtype, "buffer");
        OpenMpi mpi = OpenMpi.get();
        MemorySegment type = type(mpi, dtype);
        Mpi.call(() -> {
            mpi.check((int) mpi.bcast.invokeExact(buffer, n, type, root, handle), "MPI_Bcast");
            return null;
        });
    }

    /**
     * Point-to-point {@code MPI_Send} of {@code message}'s bytes to rank {@code dest} (blocking: returns once the
     * buffer may be reused). Pairs with a {@link #recv} of the same length and tag on {@code dest}.
     *
     * @param message native memory, at most 2^31-1 bytes
     * @param dest    the receiving rank of this communicator
     * @param tag     the message's tag, 0 .. 32767 (the least upper bound MPI guarantees)
     */
    public void send(MemorySegment message, int dest, int tag) {
        requireOpen();
        int bytes = pointToPoint(message, dest, tag, "message", "dest");
        OpenMpi mpi = OpenMpi.get();
        Mpi.call(() -> {
            mpi.check((int) mpi.send.invokeExact(message, bytes, mpi.typeByte, dest, tag, handle), "MPI_Send");
            return null;
        });
    }

    /**
     * Point-to-point {@code MPI_Recv} of exactly {@code into}'s length in bytes from rank {@code source} (blocking).
     *
     * @param into   native memory, at most 2^31-1 bytes, filled with the message
     * @param source the sending rank of this communicator
     * @param tag    the message's tag, 0 .. 32767
     */
    public void recv(MemorySegment into, int source, int tag) {
        requireOpen();
        int bytes = pointToPoint(into, source, tag, "into", "source");
        OpenMpi mpi = OpenMpi.get();
        Mpi.call(() -> {
            // MPI_STATUS_IGNORE is ((MPI_Status *) 0) in Open MPI's mpi.h
            mpi.check((int) mpi.recv.invokeExact(into, bytes, mpi.typeByte, source, tag, handle, MemorySegment.NULL),
                    "MPI_Recv");
            return null;
        });
    }

    /** Checks a send's or receive's arguments; returns the buffer's length as MPI's int count of bytes. */
    private int pointToPoint(MemorySegment buffer, int peer, int tag, String what, String peerName) {
        requireFits(buffer, 0, DType.FLOAT32, what);
        int bytes = intCount(buffer.byteSize(), what + " bytes");
        if (peer < 0 || peer >= size || peer == rank) {
            throw new IllegalArgumentException(peerName + "=" + peer + " expected another rank of this communicator,"
                    + " 0 .. " + (size - 1) + " except " + rank + " (fix: pass the peer's rank in this communicator)");
        }
        if (tag < 0 || tag > 32767) {
            throw new IllegalArgumentException("tag=" + tag + " expected 0 .. 32767 (MPI_TAG_UB is at least 32767;"
                    + " fix: use a smaller tag)");
        }
        return bytes;
    }

    /** Collective {@code MPI_Barrier}. */
    public void barrier() {
        requireOpen();
        OpenMpi mpi = OpenMpi.get();
        Mpi.call(() -> {
            mpi.check((int) mpi.barrier.invokeExact(handle), "MPI_Barrier");
            return null;
        });
    }

    /** Frees a communicator made by {@link #split} or {@link #subset} (collective); {@code MPI_COMM_WORLD} stays. Idempotent. */
    @Override
    public void close() {
        if (!owned || closed) {
            return; // MPI_COMM_WORLD is MPI's to free, at MPI_Finalize
        }
        closed = true;
        OpenMpi mpi = OpenMpi.get();
        Mpi.call(() -> {
            try (Arena arena = Arena.ofConfined()) {
                MemorySegment ref = arena.allocate(ADDRESS);
                ref.set(ADDRESS, 0, handle);
                mpi.check((int) mpi.commFree.invokeExact(ref), "MPI_Comm_free");
            }
            return null;
        });
    }

    private void requireOpen() {
        if (closed) {
            throw new IllegalStateException("the MPI communicator is closed (fix: call it before close(), or create a"
                    + " new one)");
        }
    }

    private static int intCount(long count, String what) {
        if (count < 0 || count > Integer.MAX_VALUE) {
            throw new IllegalArgumentException(what + "=" + count + " expected 0 .. 2^31-1 elements (MPI counts"
                    + " are ints; fix: split the call into pieces below 2^31)");
        }
        return (int) count;
    }

    private static void requireFits(MemorySegment buffer, long count, DType dtype, String what) {
        if (buffer == null || !buffer.isNative()) {
            throw new IllegalArgumentException(what + " must be native memory (got " + buffer + "): MPI cannot read the"
                    + " Java heap (fix: allocate it with an Arena)");
        }
        if (count < 0 || buffer.byteSize() < dtype.bytes(count)) {
            throw new IllegalArgumentException(what + " holds " + buffer.byteSize() + " bytes, expected at least "
                    + dtype.bytes(Math.max(0, count)) + " for " + count + " " + dtype + " elements"
                    + " (fix: pass a buffer of at least that size, or a smaller count)");
        }
    }

    private static MemorySegment type(OpenMpi mpi, DType dtype) {
        return switch (dtype) {
            case FLOAT32 -> mpi.typeFloat;
            case FLOAT64 -> mpi.typeDouble;
            case BFLOAT16 -> throw new IllegalArgumentException("dtype=BFLOAT16: Open MPI has no bfloat16 type; expected"
                    + " FLOAT32 or FLOAT64 (fix: widen to FLOAT32 before the MPI step)");
        };
    }

    private static MemorySegment op(OpenMpi mpi, ReduceOp op) {
        return switch (op) {
            case SUM -> mpi.opSum;
            case MAX -> mpi.opMax;
            case MIN -> mpi.opMin;
            case AVG -> throw new IllegalArgumentException("op=AVG: MPI has no average; expected SUM, MAX or"
                    + " MIN (fix: sum,"
                    + " then divide by the size)");
        };
    }
}
