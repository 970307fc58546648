package org.symmem4j.state;

/**
 * How a {@link DistributedTensor}'s first two dimensions are split over the ranks of a group: a grid of
 * {@code gridRows x gridColumns} blocks, rank {@code r} holding block {@code (r / gridColumns, r % gridColumns)}.
 * The rows (dimension 0) are cut into {@code gridRows} balanced ranges, the columns (dimension 1) into
 * {@code gridColumns}; further dimensions stay whole inside every element of the grid.
 *
 * <pre>
 *   blocks(2, 2) of a 6 x 8 tensor on 4 ranks         rows() of the same tensor on 4 ranks
 *           cols 0-3   cols 4-7                              cols 0-7
 *   rows 0-2  rank 0     rank 1                     rows 0   rank 0
 *   rows 3-5  rank 2     rank 3                     rows 1-2 rank 1   (6 * r / 4 .. 6 * (r + 1) / 4)
 *                                                   rows 3   rank 2
 *                                                   rows 4-5 rank 3
 * </pre>
 *
 * {@link #rows()} is the grid {@code worldSize x 1} of whichever group the tensor lives on. A rank stores its
 * block row-major: {@code rows(rank)} rows of {@code columns(rank)} columns.
 */
public final class TensorSharding {

    private static final TensorSharding ROWS = new TensorSharding(0, 0);

    private final int gridRows;
    private final int gridColumns;

    private TensorSharding(int gridRows, int gridColumns) {
        this.gridRows = gridRows;
        this.gridColumns = gridColumns;
    }

    /** {@return rows over every rank of the group (the grid {@code worldSize x 1})} */
    public static TensorSharding rows() {
        return ROWS;
    }

    /**
     * A 2-D grid of blocks; its size must be the group's rank count.
     *
     * @param gridRows    blocks down the rows, at least 1
     * @param gridColumns blocks across the columns, at least 1
     * @return the sharding
     * @throws IllegalArgumentException when either is below 1
     */
    public static TensorSharding blocks(int gridRows, int gridColumns) {
        if (gridRows < 1 || gridColumns < 1) {
            throw new IllegalArgumentException("tensor sharding blocks(gridRows=" + gridRows + ", gridColumns="
                    + gridColumns + "): expected both >= 1 (their product is the group's rank count; fix: pass"
                    + " e.g. blocks(2, 2) for 4 ranks)");
        }
        return new TensorSharding(gridRows, gridColumns);
    }

    /**
     * The blocks down the rows on a group of {@code worldSize} ranks.
     *
     * @param worldSize the group's rank count
     * @return {@code worldSize} for {@link #rows()}, else the grid's rows
     */
    public int gridRows(int worldSize) {
        return gridRows == 0 ? worldSize : gridRows;
    }

    /**
     * The blocks across the columns on a group of {@code worldSize} ranks.
     *
     * @param worldSize the group's rank count
     * @return 1 for {@link #rows()}, else the grid's columns
     */
    public int gridColumns(int worldSize) {
        return gridColumns == 0 ? 1 : gridColumns;
    }

    /** {@return whether this is {@link #rows()}} */
    public boolean isRows() {
        return gridRows == 0;
    }

    /**
     * Checks that the grid fits a group and a shape.
     *
     * @param worldSize the group's rank count
     * @param dims      the tensor's dimension count
     * @throws IllegalArgumentException when the grid's size is not {@code worldSize}, or it splits columns of a
     *         tensor that has none
     */
    void check(int worldSize, int dims) {
        if (isRows()) {
            return;
        }
        if ((long) gridRows * gridColumns != worldSize) {
            throw new IllegalArgumentException("tensor sharding " + this + " has " + (long) gridRows * gridColumns
                    + " blocks, expected one per rank of the group: worldSize=" + worldSize
                    + " (fix: choose gridRows * gridColumns == worldSize)");
        }
        if (gridColumns > 1 && dims < 2) {
            throw new IllegalArgumentException("tensor sharding " + this + " splits columns (dimension 1), but the"
                    + " tensor has dims=" + dims + " (fix: use blocks(worldSize, 1) or rows() for a vector)");
        }
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof TensorSharding s && s.gridRows == gridRows && s.gridColumns == gridColumns;
    }

    @Override
    public int hashCode() {
        return 31 * gridRows + gridColumns;
    }

    @Override
    public String toString() {
        return isRows() ? "rows()" : "blocks(" + gridRows + ", " + gridColumns + ")";
    }
}
