package org.symmem4j.pipeline.schedule;

/**
 * The size of a pipeline that a schedule is written for. Stages are numbered
 * {@code 0 .. ranks * stagesPerRank - 1}, and stage {@code s} lives on rank {@code s % ranks}: with
 * {@code stagesPerRank = v > 1} (interleaving), rank {@code r} holds the virtual stages
 * {@code r, r + ranks, r + 2 * ranks, ...}.
 *
 * @param ranks         pipeline size p, {@code >= 1}
 * @param microbatches  microbatches m per step, {@code >= 1}
 * @param stagesPerRank virtual stages v per rank, {@code >= 1} (1 unless interleaved)
 */
public record PipelineShape(int ranks, int microbatches, int stagesPerRank) {

    /**
     * Checks the shape.
     *
     * @throws IllegalArgumentException when a count is out of range or the schedule would be too large
     */
    public PipelineShape {
        requireAtLeastOne("ranks", ranks);
        requireAtLeastOne("microbatches", microbatches);
        requireAtLeastOne("stagesPerRank", stagesPerRank);
        // every per-action array (2 types x stages x microbatches) must be indexable by int
        long actions = 2L * ranks * stagesPerRank * microbatches;
        if (actions > Integer.MAX_VALUE - 8) {
            throw new IllegalArgumentException("invalid pipeline shape: ranks=" + ranks + " microbatches="
                    + microbatches + " stagesPerRank=" + stagesPerRank + " gives actions=" + actions
                    + " expected=actions <= " + (Integer.MAX_VALUE - 8) + " (fix: use fewer microbatches)");
        }
    }

    /**
     * A non-interleaved pipeline: one stage per rank.
     *
     * @param ranks pipeline size, {@code >= 1}
     * @param microbatches microbatches per step, {@code >= 1}
     * @return the shape
     * @throws IllegalArgumentException if an argument is out of range
     */
    public static PipelineShape of(int ranks, int microbatches) {
        return new PipelineShape(ranks, microbatches, 1);
    }

    /**
     * Number of stages, {@code ranks * stagesPerRank}.
     *
     * @return the stage count
     */
    public int stageCount() {
        return ranks * stagesPerRank;
    }

    /**
     * The rank that runs {@code stage}: {@code stage % ranks}.
     *
     * @param stage a stage in [0, {@link #stageCount()})
     * @return the rank
     */
    public int rankOf(int stage) {
        return stage % ranks;
    }

    /**
     * Number of actions in a complete schedule whose backwards are whole: one forward and one backward
     * per stage and microbatch ({@link Schedule#actionCount()} counts a split backward's two halves).
     *
     * @return the action count
     */
    public int actionCount() {
        return 2 * stageCount() * microbatches;
    }

    @Override
    public String toString() {
        return "ranks=" + ranks + " microbatches=" + microbatches + " stagesPerRank=" + stagesPerRank;
    }

    private static void requireAtLeastOne(String name, int value) {
        if (value < 1) {
            throw new IllegalArgumentException("invalid pipeline shape: " + name + "=" + value
                    + " expected=" + name + " >= 1 (fix: pass a positive count)");
        }
    }
}
