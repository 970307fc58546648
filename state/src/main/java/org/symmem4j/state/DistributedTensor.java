package org.symmem4j.state;

import java.lang.foreign.MemorySegment;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Objects;

import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.DeviceCommunicator;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.SignalOp;
import org.symmem4j.parallel.SymmetricMemory;

/**
 * A tensor of a global shape whose first two dimensions are sharded over the ranks of a group, by rows or in 2-D
 * blocks ({@link TensorSharding}); the default, {@link TensorSharding#rows()}, gives rank r rows
 * {@code [firstRow(r), firstRow(r) + rows(r))}, as balanced as the row count allows. Every rank sees its own shard
 * ({@link #localShard()}), a zero-copy view of any peer's ({@link #shard(int)}), reads and writes any rectangle of
 * the tensor across shards ({@link #get}, {@link #put}, {@link #getRows}, {@link #putRows}), puts with a signal the
 * owner waits for ({@link #putWithSignal}, {@link #awaitPuts}), re-shards into a new tensor ({@link #redistribute})
 * and gathers the whole tensor to one rank ({@link #gather}).
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
 * <h2>Host and GPU</h2>
 * On a host group (threads of one JVM, processes of one machine) the shards are host memory: segments that Java
 * code reads and writes, and the copies are {@link MemorySegment#copy}. Created with a {@link Communicator} of a GPU
 * group ({@link #create(Communicator, TensorSharding, ElementType, long...)}), every shard is GPU memory: the
 * segments carry device addresses (pass them to kernels and copies, never dereference them), a peer's shard is
 * mapped on this rank's GPU (zero-copy: a kernel reads it over NVLink), and every copy is enqueued on this rank's
 * stream — by the copy engine ({@link Transfer#COPY_ENGINE}, the default) or by a kernel's loads and stores
 * ({@link Transfer#KERNEL}) — in order with the rank's collectives and kernels, so the calls return before the
 * bytes have moved: {@link DeviceCommunicator#synchronize()} (or any later work on the stream) sees them.
 * Buffers passed in are then device buffers of this rank ({@link DeviceCommunicator#allocateDevice}). Groups whose
 * ranks do not map each other's memory (ranks on several machines) are refused.
 *
 * <h2>Memory ordering</h2>
 * {@link #put}, {@link #putRows} and writes into a shard view are plain stores into the owner's memory; other ranks
 * see them after a {@link #barrier()} (collective). {@link #putWithSignal} pairs with the owner's
 * {@link #awaitPuts} instead: the data, then a release add on the owner's signal slot, which the owner's acquire
 * wait pairs with. Elements are stored row-major in native byte order; the element type says how many bytes each
 * takes ({@code bfloat16} is stored as its 16 bits).
 */
public final class DistributedTensor implements AutoCloseable {

    /** How a GPU tensor moves bytes between shards and buffers; host tensors always copy with the CPU. */
    public enum Transfer {
        /** The GPU's copy engine ({@link DeviceCommunicator#copyAsync}), free of the GPU's multiprocessors. */
        COPY_ENGINE,
        /**
         * A kernel's loads and stores ({@link DeviceCommunicator#copyByKernelAsync}): a peer's shard read zero-copy
         * over NVLink by the GPU's own threads.
         */
        KERNEL
    }


    private final Group group;
    private final SymmetricMemory memory;
    /** This rank's GPU operations; null on the host. */
    private final DeviceCommunicator gpu;
    private final ElementType type;
    private final TensorSharding sharding;
    private final long[] shape;
    private final long rows;
    private final long columns;
    /** Bytes of one element of the row x column grid: the element size times every dimension after the second. */
    private final long cellBytes;
    private final int gridRows;
    private final int gridColumns;

    private DistributedTensor(Group group, SymmetricMemory memory, DeviceCommunicator gpu, ElementType type,
                              TensorSharding sharding, long[] shape, long cellBytes) {
        this.group = group;
        this.memory = memory;
        this.gpu = gpu;
        this.type = type;
        this.sharding = sharding;
        this.shape = shape;
        this.rows = shape[0];
        this.columns = shape.length >= 2 ? shape[1] : 1;
        this.cellBytes = cellBytes;
        this.gridRows = sharding.gridRows(group.worldSize());
        this.gridColumns = sharding.gridColumns(group.worldSize());
    }

    /**
     * Collective: a tensor of {@code shape}, rows sharded over the group's ranks, zero-filled, in host memory.
     *
     * @param group this rank's group
     * @param type  the element type
     * @param shape the global shape: rows first, then any further dimensions (each at least 1; rows at least 0)
     * @return this rank's view; close it collectively
     * @throws IllegalArgumentException for a bad shape (on every rank, before anything is allocated)
     * @throws UnsupportedOperationException where the group's transport cannot carry it
     */
    public static DistributedTensor create(Group group, ElementType type, long... shape) {
        return create(group, TensorSharding.rows(), type, shape);
    }

    /**
     * Collective: a tensor of {@code shape} sharded as {@code sharding} over the group's ranks, zero-filled, in host
     * memory. For a GPU group use {@link #create(Communicator, TensorSharding, ElementType, long...)}.
     *
     * @param group    this rank's group
     * @param sharding rows, or a grid of blocks with one block per rank
     * @param type     the element type
     * @param shape    the global shape (each dimension at least 1, rows at least 0)
     * @return this rank's view; close it collectively
     * @throws IllegalArgumentException for a bad shape or sharding, or when ranks disagree on them (on every rank,
     *         before anything is allocated)
     * @throws UnsupportedOperationException where the group's memory is GPU memory, or peers' memory is not mapped
     */
    public static DistributedTensor create(Group group, TensorSharding sharding, ElementType type, long... shape) {
        Objects.requireNonNull(group, "group");
        if (group.transport().capabilities(group).supports(
                org.symmem4j.parallel.TransportCapabilities.Capability.DEVICE_MEMORY)) {
            throw new UnsupportedOperationException("distributed tensor on transport="
                    + group.transport().capabilities(group).transport() + ": its memory is GPU memory, whose copies run"
                    + " on the rank's stream (fix: create it with DistributedTensor.create(communicator,"
                    + " sharding, type,"
                    + " shape) and a Communicator of this group)");
        }
        return create(group, null, sharding, type, shape);
    }

    /**
     * Collective: a tensor of {@code shape} sharded as {@code sharding} over the ranks of {@code comm}'s group,
     * zero-filled: in GPU memory where the group's transport is a GPU one (copies enqueued on {@code comm}'s stream),
     * else in host memory as {@link #create(Group, TensorSharding, ElementType, long...)}. The tensor does not own
     * the communicator: close the tensor first.
     *
     * @param comm     a communicator of this rank's group
     * @param sharding rows, or a grid of blocks with one block per rank
     * @param type     the element type
     * @param shape    the global shape (each dimension at least 1, rows at least 0)
     * @return this rank's view; close it collectively
     * @throws IllegalArgumentException for a bad shape or sharding, or when ranks disagree on them (on every rank,
     *         before anything is allocated)
     * @throws UnsupportedOperationException where peers' memory is not mapped on this rank
     */
    public static DistributedTensor create(Communicator comm, TensorSharding sharding, ElementType type, long... shape) {
        Objects.requireNonNull(comm, "comm");
        return create(comm.group(), comm.unwrap(DeviceCommunicator.class).orElse(null), sharding, type, shape);
    }

    private static DistributedTensor create(Group group, DeviceCommunicator gpu, TensorSharding sharding,
                                            ElementType type, long[] shape) {
        Objects.requireNonNull(sharding, "sharding");
        Objects.requireNonNull(type, "type");
        Objects.requireNonNull(shape, "shape");
        if (shape.length == 0 || shape[0] < 0) {
            throw new IllegalArgumentException("distributed tensor shape=" + Arrays.toString(shape)
                    + " expected at least one dimension, rows >= 0 (fix: pass e.g. new long[] {rows, columns})");
        }
        long cell = type.byteSize();
        for (int d = 1; d < shape.length; d++) {
            if (shape[d] < 1) {
                throw new IllegalArgumentException("distributed tensor shape=" + Arrays.toString(shape) + ": dimension "
                        + d + " is " + shape[d] + ", expected >= 1 (fix: pass positive sizes after the rows)");
            }
            if (d >= 2) {
                cell = Math.multiplyExact(cell, shape[d]);
            }
        }
        sharding.check(group.worldSize(), shape.length);
        SharedMemories.agree(group, "distributed tensor", "distributed-tensor-create",
                type + " " + Arrays.toString(shape) + " " + sharding,
                "create the tensor on every rank with the same element type, shape and sharding");
        int gr = sharding.gridRows(group.worldSize());
        int gc = sharding.gridColumns(group.worldSize());
        long cols = shape.length >= 2 ? shape[1] : 1;
        long maxRows = (shape[0] + gr - 1) / gr;
        long maxCols = (cols + gc - 1) / gc;
        long bytes = Math.multiplyExact(Math.multiplyExact(maxRows, maxCols), cell);
        SymmetricMemory memory = gpu == null ? SharedMemories.allocate(group, bytes, "distributed tensor")
                : SharedMemories.allocateMapped(group, bytes, "distributed tensor");
        if (memory.hostAddressable()) {
            memory.local().fill((byte) 0);
        } else {
            SharedMemories.zeroOnDevice(memory);
        }
        memory.barrier(); // zeroed shards, before any rank writes into a peer's
        return new DistributedTensor(group, memory, gpu, type, sharding, shape.clone(), cell);
    }

    /** {@return the global shape (a copy)} */
    public long[] shape() {
        return shape.clone();
    }

    /** {@return the element type} */
    public ElementType type() {
        return type;
    }

    /** {@return how the tensor is sharded} */
    public TensorSharding sharding() {
        return sharding;
    }

    /** {@return whether the shards are GPU memory (device addresses; copies enqueued on the rank's stream)} */
    public boolean onDevice() {
        return gpu != null;
    }

    /** {@return bytes of one row of the global tensor} */
    public long rowBytes() {
        return columns * cellBytes;
    }

    /** {@return the columns: dimension 1, or 1 for a vector} */
    public long columns() {
        return columns;
    }

    /**
     * The first row rank {@code rank} holds; {@code firstRow(worldSize)} is the row count.
     *
     * @param rank a rank of the group, or worldSize
     * @return the row index
     */
    public long firstRow(int rank) {
        Objects.checkIndex(rank, group.worldSize() + 1);
        if (rank == group.worldSize()) {
            return rows;
        }
        return rowStart(rank / gridColumns);
    }

    /**
     * The rows rank {@code rank} holds.
     *
     * @param rank a rank of the group
     * @return the row count
     */
    public long rows(int rank) {
        Objects.checkIndex(rank, group.worldSize());
        int r = rank / gridColumns;
        return rowStart(r + 1) - rowStart(r);
    }

    /**
     * The first column rank {@code rank} holds (0 when sharded by rows).
     *
     * @param rank a rank of the group
     * @return the column index
     */
    public long firstColumn(int rank) {
        Objects.checkIndex(rank, group.worldSize());
        return columnStart(rank % gridColumns);
    }

    /**
     * The columns rank {@code rank} holds ({@link #columns()} when sharded by rows).
     *
     * @param rank a rank of the group
     * @return the column count
     */
    public long columns(int rank) {
        Objects.checkIndex(rank, group.worldSize());
        int c = rank % gridColumns;
        return columnStart(c + 1) - columnStart(c);
    }

    /**
     * The rank that holds row {@code row}, where whole rows live on one rank (a grid of one block column).
     *
     * @param row a row, 0..rows-1
     * @return its rank
     * @throws IllegalStateException when the columns are split, so a row spans ranks: use {@link #ownerOf(long, long)}
     */
    public int ownerOf(long row) {
        if (gridColumns != 1) {
            throw new IllegalStateException("distributed tensor sharded " + sharding + ": row " + row + " spans "
                    + gridColumns + " ranks (fix: use ownerOf(row, column))");
        }
        return ownerOf(row, 0);
    }

    /**
     * The rank that holds element {@code (row, column)} of the first two dimensions.
     *
     * @param row    a row, 0..rows-1
     * @param column a column, 0..columns-1
     * @return its rank
     */
    public int ownerOf(long row, long column) {
        Objects.checkIndex(row, rows);
        Objects.checkIndex(column, columns);
        return blockRowOf(row) * gridColumns + blockColumnOf(column);
    }

    private long rowStart(int blockRow) {
        return rows * blockRow / gridRows;
    }

    private long columnStart(int blockColumn) {
        return columns * blockColumn / gridColumns;
    }

    private int blockRowOf(long row) {
        int r = (int) (row * gridRows / Math.max(1, rows));
        while (rowStart(r) > row) {
            r--;
        }
        while (rowStart(r + 1) <= row) {
            r++;
        }
        return r;
    }

    private int blockColumnOf(long column) {
        int c = (int) (column * gridColumns / Math.max(1, columns));
        while (columnStart(c) > column) {
            c--;
        }
        while (columnStart(c + 1) <= column) {
            c++;
        }
        return c;
    }

    /** {@return this rank's shard: its block, row-major (a device buffer on a GPU)} */
    public MemorySegment localShard() {
        return shard(group.rank());
    }

    /**
     * Rank {@code rank}'s shard, zero-copy: reads and writes go to that rank's memory (writes are seen by others
     * after a {@link #barrier()}). On a GPU a device buffer as mapped on this rank's GPU, for kernels and copies.
     *
     * @param rank a rank of the group
     * @return the shard, {@code rows(rank) * columns(rank)} elements of the grid, row-major
     */
    public MemorySegment shard(int rank) {
        return memory.peer(rank).asSlice(0, shardBytes(rank));
    }

    /**
     * Bytes of rank {@code rank}'s shard.
     *
     * @param rank a rank of the group
     * @return {@code rows(rank) * columns(rank)} times the bytes of one element of the row x column grid
     */
    public long shardBytes(int rank) {
        return rows(rank) * columns(rank) * cellBytes;
    }

    /** {@return the signal slots {@link #putWithSignal} and {@link #awaitPuts} may use, 0..signalSlots()-1} */
    public int signalSlots() {
        return memory.signalSlots();
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
        get(firstRow, count, 0, columns, dst, Transfer.COPY_ENGINE);
    }

    /**
     * Copies rows {@code [firstRow, firstRow + count)} into {@code dst}, from whichever ranks hold them, moved as
     * {@code how} says on a GPU.
     *
     * @param firstRow the first row
     * @param count    rows
     * @param dst      at least {@code count * rowBytes()} bytes
     * @param how      the copy engine or a kernel (ignored on the host)
     */
    public void getRows(long firstRow, long count, MemorySegment dst, Transfer how) {
        get(firstRow, count, 0, columns, dst, how);
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
        put(firstRow, count, 0, columns, src, Transfer.COPY_ENGINE);
    }

    /**
     * Copies the rectangle rows {@code [row, row + rowCount)} x columns {@code [column, column + columnCount)} of the
     * tensor into {@code dst}, row-major, from whichever ranks hold it.
     *
     * @param row         the first row
     * @param rowCount    rows
     * @param column      the first column
     * @param columnCount columns
     * @param dst         at least {@code rowCount * columnCount} elements of the grid
     * @param how         the copy engine or a kernel (ignored on the host)
     * @throws IndexOutOfBoundsException when the rectangle is not all in the tensor
     * @throws IllegalArgumentException when {@code dst} is too small, or not a device buffer on a GPU
     */
    public void get(long row, long rowCount, long column, long columnCount, MemorySegment dst, Transfer how) {
        Rect want = checkRect(row, rowCount, column, columnCount, dst, "destination", how);
        for (Piece p : pieces(want)) {
            copy(memory.peer(p.rank), p.shardOffset, dst, p.bufferOffset, p.bytes, how);
        }
    }

    /**
     * Copies {@code src}, row-major, into the rectangle rows {@code [row, row + rowCount)} x columns
     * {@code [column, column + columnCount)} of the tensor, in whichever ranks hold it; other ranks see it after a
     * {@link #barrier()}. Nothing is written when the rectangle or the source is wrong.
     *
     * @param row         the first row
     * @param rowCount    rows
     * @param column      the first column
     * @param columnCount columns
     * @param src         at least {@code rowCount * columnCount} elements of the grid
     * @param how         the copy engine or a kernel (ignored on the host)
     */
    public void put(long row, long rowCount, long column, long columnCount, MemorySegment src, Transfer how) {
        Rect want = checkRect(row, rowCount, column, columnCount, src, "source", how);
        for (Piece p : pieces(want)) {
            copy(src, p.bufferOffset, memory.peer(p.rank), p.shardOffset, p.bytes, how);
        }
    }

    /**
     * As {@link #put}, then adds 1 to signal slot {@code slot} of every rank written to (release: the owner's
     * {@link #awaitPuts} that sees it sees the data). Puts into a peer that cannot be reached by loads and stores
     * still reach it where the transport carries put-with-signal. Nothing is written when the arguments are wrong.
     *
     * @param row         the first row
     * @param rowCount    rows
     * @param column      the first column
     * @param columnCount columns
     * @param src         at least {@code rowCount * columnCount} elements of the grid (a device buffer on a GPU)
     * @param slot        the owners' signal slot, 0..signalSlots()-1
     * @return the ranks signalled, ascending (each once)
     */
    public int[] putWithSignal(long row, long rowCount, long column, long columnCount, MemorySegment src, int slot) {
        Objects.checkIndex(slot, memory.signalSlots());
        Rect want = checkRect(row, rowCount, column, columnCount, src, "source", Transfer.COPY_ENGINE);
        List<Piece> pieces = pieces(want);
        List<Integer> owners = new ArrayList<>();
        for (int i = 0; i < pieces.size(); i++) {
            Piece p = pieces.get(i);
            boolean lastOfOwner = i + 1 == pieces.size() || pieces.get(i + 1).rank != p.rank;
            if (lastOfOwner) {
                // release: this owner's data (this piece and its earlier ones) before its signal; pairs with awaitPuts
                memory.putWithSignal(p.rank, src.asSlice(p.bufferOffset, p.bytes), p.shardOffset, slot, 1, SignalOp.ADD);
                owners.add(p.rank);
            } else {
                copy(src, p.bufferOffset, memory.peer(p.rank), p.shardOffset, p.bytes, Transfer.COPY_ENGINE);
            }
        }
        return owners.stream().mapToInt(Integer::intValue).toArray();
    }

    /**
     * Waits until {@code puts} puts with a signal on slot {@code slot} have landed in this rank's shard (acquire:
     * pairs with {@link #putWithSignal}'s release), then takes them off the slot, so the next wait counts afresh.
     * On a host tensor the calling thread waits, bounded by the group's timeout; on a GPU the wait is enqueued on
     * this rank's stream (later work on it sees the data) and the call returns at once.
     *
     * @param slot     this rank's signal slot, 0..signalSlots()-1
     * @param puts     how many signalled puts to wait for
     * @param fromRank the rank expected to put, named in a timeout ({@code -1} if any)
     */
    public void awaitPuts(int slot, long puts, int fromRank) {
        Objects.checkIndex(slot, memory.signalSlots());
        // acquire: pairs with the putters' release adds; the shard's data is visible after it
        memory.orderAfterSignal(slot, puts, fromRank, true);
    }

    /**
     * Collective: a new tensor of the same type and shape sharded as {@code target}, holding this tensor's values;
     * every rank's writes before the call are included. Each rank pulls its new block from the old shards (zero-copy
     * reads on the host; on a GPU with {@code how} from peers' memory, done before the call returns). This tensor is
     * unchanged and stays open: close it when it is no longer needed.
     *
     * @param target the new sharding
     * @param how    the copy engine or a kernel (ignored on the host)
     * @return the new tensor, same group; close it collectively
     * @throws IllegalArgumentException when {@code target} does not fit the group, or ranks disagree on it
     */
    public DistributedTensor redistribute(TensorSharding target, Transfer how) {
        Objects.requireNonNull(target, "target");
        Objects.requireNonNull(how, "how");
        DistributedTensor next = create(group, gpu, target, type, shape);
        try {
            memory.barrier(); // every rank's writes to this tensor are visible before any rank pulls from it
            int me = group.rank();
            Rect block = new Rect(next.firstRow(me), next.rows(me), next.firstColumn(me), next.columns(me));
            MemorySegment dst = next.memory.local();
            for (Piece p : pieces(block)) {
                copy(memory.peer(p.rank), p.shardOffset, dst, p.bufferOffset, p.bytes, how);
            }
            next.barrier(); // every rank's pull is done (a GPU's stream too): the old shards may change, the new be read
            return next;
        } catch (RuntimeException e) {
            next.close();
            throw e;
        }
    }

    /**
     * Collective: {@link #redistribute(TensorSharding, Transfer)} by the copy engine.
     *
     * @param target the new sharding
     * @return the new tensor
     */
    public DistributedTensor redistribute(TensorSharding target) {
        return redistribute(target, Transfer.COPY_ENGINE);
    }

    /**
     * Collective: the whole tensor, row-major, into {@code dst} on rank {@code root} (other ranks pass null or
     * anything); every rank's writes before the call are included.
     *
     * @param root the rank that receives
     * @param dst  on root, at least {@code rows * rowBytes()} bytes (a device buffer on a GPU)
     */
    public void gather(int root, MemorySegment dst) {
        gather(root, dst, Transfer.COPY_ENGINE);
    }

    /**
     * Collective: as {@link #gather(int, MemorySegment)}, moved as {@code how} says on a GPU; on a GPU the bytes
     * are in {@code dst} when the call returns.
     *
     * @param root the rank that receives
     * @param dst  on root, at least {@code rows * rowBytes()} bytes (a device buffer on a GPU)
     * @param how  the copy engine or a kernel (ignored on the host)
     * @throws IllegalArgumentException on every rank when root's destination is wrong, or ranks disagree on root
     */
    public void gather(int root, MemorySegment dst, Transfer how) {
        SharedMemories.checkRank(group, root, "gather root");
        Objects.requireNonNull(how, "how");
        String problem = "";
        if (group.rank() == root) {
            long need = rows * rowBytes();
            if (dst == null || dst.byteSize() < need) {
                problem = " destination bytes=" + (dst == null ? "null" : dst.byteSize()) + " expected at least " + need;
            } else if (gpu != null && !dst.isNative()) {
                problem = " destination is a heap segment, expected a device buffer of rank " + root
                        + " (DeviceCommunicator.allocateDevice)";
            }
        }
        // every rank learns every rank's root and root's problem before any byte moves: all fail together or none
        List<byte[]> all = group.allGatherBytes("distributed-tensor-gather",
                (root + "|" + problem).getBytes(StandardCharsets.UTF_8));
        for (int r = 0; r < all.size(); r++) {
            String said = new String(all.get(r), StandardCharsets.UTF_8);
            int bar = said.indexOf('|');
            if (Integer.parseInt(said.substring(0, bar)) != root) {
                throw new IllegalArgumentException("distributed tensor gather: rank=" + r + " passed root="
                        + said.substring(0, bar) + ", rank=" + group.rank() + " root=" + root
                        + " (fix: every rank must name the same root)");
            }
            if (bar + 1 < said.length()) {
                throw new IllegalArgumentException("distributed tensor gather to root=" + root + ":"
                        + said.substring(bar + 1) + " (fix: on root, pass a destination of at least rows * rowBytes()"
                        + " bytes" + (gpu != null ? ", a device buffer from DeviceCommunicator.allocateDevice" : "") + ")");
            }
        }
        memory.barrier(); // every rank's writes to its shard are visible to the root after it
        if (group.rank() == root) {
            get(0, rows, 0, columns, dst, how);
        }
        memory.barrier(); // the root's copies are done (its stream too on a GPU): ranks may change their shards
    }

    /** Collective: every rank's writes to any shard before it are visible to every rank after it (on a GPU, after
     * this rank's stream has run them). */
    public void barrier() {
        memory.barrier();
    }

    private record Rect(long row, long rows, long column, long columns) {
    }

    /** A contiguous run of bytes: in rank's shard at shardOffset, in the caller's buffer at bufferOffset. */
    private record Piece(int rank, long shardOffset, long bufferOffset, long bytes) {
    }

    private Rect checkRect(long row, long rowCount, long column, long columnCount, MemorySegment seg, String what,
                           Transfer how) {
        Objects.requireNonNull(seg, what);
        Objects.requireNonNull(how, "how");
        Objects.checkFromIndexSize(row, rowCount, rows);
        Objects.checkFromIndexSize(column, columnCount, columns);
        long need = rowCount * columnCount * cellBytes;
        if (seg.byteSize() < need) {
            throw new IllegalArgumentException("distributed tensor " + what + " bytes=" + seg.byteSize()
                    + " expected at least " + need + " (" + rowCount + " rows x " + columnCount + " columns of "
                    + cellBytes + " bytes; fix: pass a " + what + " of at least " + need + " bytes, or fewer rows or"
                    + " columns)");
        }
        if (gpu != null && !seg.isNative()) {
            throw new IllegalArgumentException("distributed tensor " + what + " is a heap segment, but this tensor's"
                    + " shards are GPU memory: expected a device buffer of rank " + group.rank()
                    + " (fix: DeviceCommunicator.allocateDevice, or a shard)");
        }
        return new Rect(row, rowCount, column, columnCount);
    }

    /**
     * The runs of bytes that move between the shards and a buffer holding rectangle {@code want} row-major, owner by
     * owner (ascending ranks; an owner's runs together). Where the rectangle covers whole rows of a block and of
     * itself, the block's rows are one run.
     */
    private List<Piece> pieces(Rect want) {
        List<Piece> out = new ArrayList<>();
        if (want.rows == 0 || want.columns == 0) {
            return out;
        }
        for (int rank = 0; rank < group.worldSize(); rank++) {
            long r0 = Math.max(want.row, firstRow(rank));
            long r1 = Math.min(want.row + want.rows, firstRow(rank) + rows(rank));
            long c0 = Math.max(want.column, firstColumn(rank));
            long c1 = Math.min(want.column + want.columns, firstColumn(rank) + columns(rank));
            if (r0 >= r1 || c0 >= c1) {
                continue;
            }
            long blockColumns = columns(rank);
            long span = (c1 - c0) * cellBytes;
            long shardAt = ((r0 - firstRow(rank)) * blockColumns + (c0 - firstColumn(rank))) * cellBytes;
            long bufferAt = ((r0 - want.row) * want.columns + (c0 - want.column)) * cellBytes;
            if (c1 - c0 == blockColumns && c1 - c0 == want.columns) {
                out.add(new Piece(rank, shardAt, bufferAt, (r1 - r0) * span));
            } else {
                for (long r = r0; r < r1; r++) {
                    out.add(new Piece(rank, shardAt, bufferAt, span));
                    shardAt += blockColumns * cellBytes;
                    bufferAt += want.columns * cellBytes;
                }
            }
        }
        return out;
    }

    private void copy(MemorySegment src, long srcOffset, MemorySegment dst, long dstOffset, long bytes, Transfer how) {
        if (gpu == null) {
            MemorySegment.copy(src, srcOffset, dst, dstOffset, bytes);
        } else if (how == Transfer.KERNEL) {
            gpu.copyByKernelAsync(dst.asSlice(dstOffset, bytes), src.asSlice(srcOffset, bytes));
        } else {
            gpu.copyAsync(dst.asSlice(dstOffset, bytes), src.asSlice(srcOffset, bytes));
        }
    }

    /** Collective: frees the shards once every rank has stopped using them. */
    @Override
    public void close() {
        memory.close();
    }

    @Override
    public String toString() {
        int me = group.rank();
        return "DistributedTensor[" + type + " " + Arrays.toString(shape) + " " + sharding + (gpu != null ? " on GPU" : "")
                + ", rank=" + me + " rows " + firstRow(me) + ".." + (firstRow(me) + rows(me) - 1) + " columns "
                + firstColumn(me) + ".." + (firstColumn(me) + columns(me) - 1) + "]";
    }
}
