package org.symmem4j.parallel;

/**
 * A flat vector of {@code count} elements cut into {@code worldSize} contiguous blocks, one per
 * rank, in rank order: the partition of the in-place reduce-scatter and all-gather
 * ({@link Communicator#reduceScatter(SymmetricMemory, long, long, DType, ReduceOp)},
 * {@link Communicator#allGather(SymmetricMemory, long, long, DType)}) and of ZeRO-style sharding.
 *
 * <p>Every block but the last non-empty one holds {@link #blockElements()} elements: ceil(count /
 * worldSize) rounded up to a multiple of {@link #ALIGN_BYTES} bytes, so every block starts 64 bytes
 * (one cache line, one AVX-512 vector) after the previous one and vector loops start aligned
 * relative to the vector's start. The rounding can leave the last blocks short or empty (count 10,
 * 4 ranks, float32: rank 0 holds all ten elements).
 *
 * <p>A pure function of (count, worldSize, dtype): every rank computes the same partition, so the
 * collectives that use it only need the ranks to agree on those three.
 *
 * @param count         elements of the whole vector
 * @param worldSize     number of ranks (blocks)
 * @param dtype         the element type
 * @param blockElements elements per block (the last non-empty block may hold fewer)
 */
public record ShardPartition(long count, int worldSize, DType dtype, long blockElements) {

    /** Block boundaries are multiples of this many bytes from the vector's start. */
    public static final int ALIGN_BYTES = 64;

    /**
     * Checks the partition; {@link #of} computes a valid one.
     *
     * @throws IllegalArgumentException when the blocks do not cover {@code count} or a value is out of range
     */
    public ShardPartition {
        if (count < 0 || worldSize < 1 || dtype == null || blockElements < 0
                || (count > 0 && blockElements * (long) worldSize < count)) {
            throw new IllegalArgumentException("invalid partition: count=" + count + " worldSize=" + worldSize
                    + " dtype=" + dtype + " blockElements=" + blockElements + " (expected count >= 0, worldSize >= 1,"
                    + " a dtype and blockElements * worldSize >= count; fix: build it with"
                    + " ShardPartition.of(count, worldSize, dtype))");
        }
    }

    /**
     * The partition every rank uses for {@code count} elements of {@code dtype} over {@code worldSize} ranks.
     *
     * @param count     elements of the whole vector, at least 0
     * @param worldSize number of ranks, at least 1
     * @param dtype     the element type
     * @return the partition
     * @throws IllegalArgumentException when an argument is out of range
     */
    public static ShardPartition of(long count, int worldSize, DType dtype) {
        if (count < 0 || worldSize < 1 || dtype == null) {
            throw new IllegalArgumentException("count=" + count + " must be >= 0, worldSize=" + worldSize
                    + " must be >= 1, dtype=" + dtype + " must not be null (fix: pass the vector's element count, the"
                    + " group's worldSize and the element type)");
        }
        long align = ALIGN_BYTES / dtype.byteSize();
        long perRank = (count + worldSize - 1) / worldSize;
        long block = (perRank + align - 1) / align * align;
        return new ShardPartition(count, worldSize, dtype, block);
    }

    /**
     * Elements in one {@link #ALIGN_BYTES}-byte line: {@link #blockElements()} is a multiple of it.
     *
     * @return elements per 64-byte line
     */
    public long alignElements() {
        return ALIGN_BYTES / dtype.byteSize();
    }

    /**
     * First element of rank {@code rank}'s block (count if the block is empty).
     *
     * @param rank a rank, 0..worldSize-1
     * @return the block's first element index
     */
    public long start(int rank) {
        checkRank(rank);
        return Math.min(rank * blockElements, count);
    }

    /**
     * One past the last element of rank {@code rank}'s block.
     *
     * @param rank a rank, 0..worldSize-1
     * @return the block's end element index (exclusive)
     */
    public long end(int rank) {
        checkRank(rank);
        return Math.min((rank + 1) * blockElements, count);
    }

    /**
     * Elements in rank {@code rank}'s block (0 for ranks past the vector's end).
     *
     * @param rank a rank, 0..worldSize-1
     * @return elements in the block
     */
    public long size(int rank) {
        return end(rank) - start(rank);
    }

    private void checkRank(int rank) {
        if (rank < 0 || rank >= worldSize) {
            throw new IndexOutOfBoundsException("rank=" + rank + " is outside [0, worldSize=" + worldSize + ") (fix:"
                    + " pass a rank from 0 to " + (worldSize - 1) + ")");
        }
    }
}
