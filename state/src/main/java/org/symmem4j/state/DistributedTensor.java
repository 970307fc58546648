package org.symmem4j.state;

import java.lang.foreign.MemorySegment;
import java.util.Arrays;
import java.util.Objects;

import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.SymmetricMemory;

/**
 * A tensor of a global shape whose rows (the first dimension) are sharded over the ranks of a group: rank r holds
 * rows {@code [firstRow(r), firstRow(r) + rows(r))}, as balanced as the row count allows, in its symmetric memory.
 * Every rank sees its own shard ({@link #localShard()}), a zero-copy view of any peer's ({@link #shard(int)}, where
 * the transport maps peers' memory, which every host transport of one machine does), reads and writes any row range
 * across shards ({@link #getRows}, {@link #putRows}), and gathers the whole tensor to one rank ({@link #gather}).
 *
 * <pre>{@code
 * try (DistributedTensor t = DistributedTensor.create(group, ElementType.FLOAT32, 1000, 512)) {   // collective
 *     fill(t.localShard());                       // this rank's rows, row-major
 *     t.barrier();                                // every rank's writes are visible after it
 *     t.getRows(990, 10, dst);                    // any rows, from whichever ranks hold them
 *     t.gather(0, rank0Dst);                      // collective: the whole tensor on rank 0
 * }
 * }</pre>
 *
 * Memory ordering: {@link #putRows} and writes into a shard view are plain stores into the owner's memory; they
 * are visible to other ranks after a {@link #barrier()} (collective), as with any symmetric memory. Elements are
 * stored row-major in native byte order; the element type says how many bytes each takes ({@code bfloat16} is
 * stored as its 16 bits). This is the host part: on GPU groups creation is refused (the GPU form with device
 * pointers and copy engines is not built yet), as on groups whose ranks span machines.
 */
public final class DistributedTensor implements AutoCloseable {

    private final Group group;
    private final SymmetricMemory memory;
    private final ElementType type;
    private final long[] shape;
    private final long rows;
    private final long rowBytes;

    private DistributedTensor(Group group, SymmetricMemory memory, ElementType type, long[] shape, long rowBytes) {
        this.group = group;
        this.memory = memory;
        this.type = type;
        this.shape = shape;
        this.rows = shape[0];
        this.rowBytes = rowBytes;
    }

    /**
     * Collective: a tensor of {@code shape}, rows sharded over the group's ranks, zero-filled.
     *
     * @param group this rank's group
     * @param type  the element type
     * @param shape the global shape: rows first, then any further dimensions (each at least 1; rows at least 0)
     * @return this rank's view; close it collectively
     * @throws IllegalArgumentException for a bad shape (on every rank, before anything is allocated)
     * @throws UnsupportedOperationException where the group's transport cannot carry it
     */
    public static DistributedTensor create(Group group, ElementType type, long... shape) {
        Objects.requireNonNull(group, "group");
        Objects.requireNonNull(type, "type");
        if (shape.length == 0 || shape[0] < 0) {
            throw new IllegalArgumentException("distributed tensor shape=" + Arrays.toString(shape)
                    + " expected at least one dimension, rows >= 0");
        }
        long rowElements = 1;
        for (int d = 1; d < shape.length; d++) {
            if (shape[d] < 1) {
                throw new IllegalArgumentException("distributed tensor shape=" + Arrays.toString(shape) + ": dimension "
                        + d + " is " + shape[d] + ", expected >= 1");
            }
            rowElements = Math.multiplyExact(rowElements, shape[d]);
        }
        long rowBytes = Math.multiplyExact(rowElements, type.byteSize());
        long maxRows = (shape[0] + group.worldSize() - 1) / group.worldSize();
        SymmetricMemory memory = SharedMemories.allocate(group, Math.multiplyExact(maxRows, rowBytes),
                "distributed tensor");
        memory.local().fill((byte) 0);
        memory.barrier(); // zeroed shards, before any rank writes into a peer's
        return new DistributedTensor(group, memory, type, shape.clone(), rowBytes);
    }

    /** {@return the global shape (a copy)} */
    public long[] shape() {
        return shape.clone();
    }

    /** {@return the element type} */
    public ElementType type() {
        return type;
    }

    /** {@return bytes of one row} */
    public long rowBytes() {
        return rowBytes;
    }

    /**
     * The first row rank {@code rank} holds.
     *
     * @param rank a rank of the group
     * @return the row index
     */
    public long firstRow(int rank) {
        Objects.checkIndex(rank, group.worldSize() + 1);
        return rows * rank / group.worldSize();
    }

    /**
     * The rows rank {@code rank} holds.
     *
     * @param rank a rank of the group
     * @return the row count
     */
    public long rows(int rank) {
        return firstRow(rank + 1) - firstRow(rank);
    }

    /**
     * The rank that holds row {@code row}.
     *
     * @param row a row, 0..rows-1
     * @return its rank
     */
    public int ownerOf(long row) {
        Objects.checkIndex(row, rows);
        int r = (int) (row * group.worldSize() / Math.max(1, rows));
        while (firstRow(r) > row) {
            r--;
        }
        while (firstRow(r + 1) <= row) {
            r++;
        }
        return r;
    }

    /** {@return this rank's shard: its rows, row-major} */
    public MemorySegment localShard() {
        return shard(group.rank());
    }

    /**
     * Rank {@code rank}'s shard, zero-copy: reads and writes go to that rank's memory (writes are seen by others
     * after a {@link #barrier()}).
     *
     * @param rank a rank of the group
     * @return the shard, {@code rows(rank) * rowBytes()} bytes
     */
    public MemorySegment shard(int rank) {
        return memory.peer(rank).asSlice(0, rows(rank) * rowBytes);
    }

    /**
     * Copies rows {@code [firstRow, firstRow + count)} into {@code dst}, from whichever ranks hold them.
     *
     * @param firstRow the first row
     * @param count    rows
     * @param dst      at least {@code count * rowBytes()} bytes
     * @throws IndexOutOfBoundsException when the rows are not all in the tensor
     * @throws IllegalArgumentException when {@code dst} is too small
     */
    public void getRows(long firstRow, long count, MemorySegment dst) {
        checkRange(firstRow, count, dst, "destination");
        forEachPiece(firstRow, count, (rank, offset, dstOffset, bytes) ->
                MemorySegment.copy(memory.peer(rank), offset, dst, dstOffset, bytes));
    }

    /**
     * Copies {@code src} into rows {@code [firstRow, firstRow + count)}, in whichever ranks hold them; other ranks see
     * the rows after a {@link #barrier()}. Nothing is written when the range or the source is wrong.
     *
     * @param firstRow the first row
     * @param count    rows
     * @param src      at least {@code count * rowBytes()} bytes
     */
    public void putRows(long firstRow, long count, MemorySegment src) {
        checkRange(firstRow, count, src, "source");
        forEachPiece(firstRow, count, (rank, offset, srcOffset, bytes) ->
                MemorySegment.copy(src, srcOffset, memory.peer(rank), offset, bytes));
    }

    /**
     * Collective: the whole tensor, row-major, into {@code dst} on rank {@code root} (other ranks pass null or
     * anything); every rank's writes before the call are included.
     *
     * @param root the rank that receives
     * @param dst  on root, at least {@code rows * rowBytes()} bytes
     */
    public void gather(int root, MemorySegment dst) {
        SharedMemories.checkRank(group, root, "gather root");
        boolean ok = group.rank() != root || (dst != null && dst.byteSize() >= rows * rowBytes);
        memory.barrier(); // every rank's writes to its shard are visible to the root after it
        if (group.rank() == root) {
            if (!ok) {
                memory.barrier(); // keep the others' count of barriers before failing
                throw new IllegalArgumentException("distributed tensor gather: destination bytes="
                        + (dst == null ? "null" : dst.byteSize()) + " expected at least " + rows * rowBytes);
            }
            getRows(0, rows, dst);
        }
        memory.barrier(); // no rank changes its shard while the root copies it
    }

    /** Collective: every rank's writes to any shard before it are visible to every rank after it. */
    public void barrier() {
        memory.barrier();
    }

    private void checkRange(long firstRow, long count, MemorySegment seg, String what) {
        Objects.checkFromIndexSize(firstRow, count, rows);
        if (seg.byteSize() < count * rowBytes) {
            throw new IllegalArgumentException("distributed tensor " + what + " bytes=" + seg.byteSize()
                    + " expected at least " + count * rowBytes + " (" + count + " rows of " + rowBytes + " bytes)");
        }
    }

    private interface Piece {
        void copy(int rank, long offsetInShard, long offsetInBuffer, long bytes);
    }

    private void forEachPiece(long firstRow, long count, Piece piece) {
        long row = firstRow;
        long end = firstRow + count;
        while (row < end) {
            int rank = ownerOf(row);
            long upTo = Math.min(end, firstRow(rank + 1));
            piece.copy(rank, (row - firstRow(rank)) * rowBytes, (row - firstRow) * rowBytes, (upTo - row) * rowBytes);
            row = upTo;
        }
    }

    /** Collective: frees the shards once every rank has stopped using them. */
    @Override
    public void close() {
        memory.close();
    }

    @Override
    public String toString() {
        return "DistributedTensor[" + type + " " + Arrays.toString(shape) + ", rank=" + group.rank() + " rows "
                + firstRow(group.rank()) + ".." + (firstRow(group.rank() + 1) - 1) + "]";
    }
}
