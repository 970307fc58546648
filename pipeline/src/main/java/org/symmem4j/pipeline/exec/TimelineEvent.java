package org.symmem4j.pipeline.exec;

/**
 * One interval on one rank's timeline, in {@link System#nanoTime()} nanoseconds (one clock for all
 * threads and processes of a machine).
 *
 * @param rank       the rank
 * @param kind       what the rank was doing
 * @param stage      the stage it was for (for a hand-off: the stage that sends or receives)
 * @param peerStage  for hand-offs, the stage at the other end of the link; otherwise -1
 * @param microbatch the microbatch, or -1 for an optimizer step
 * @param startNanos start
 * @param endNanos   end, {@code >= startNanos}
 */
public record TimelineEvent(int rank, Kind kind, int stage, int peerStage, int microbatch, long startNanos,
                            long endNanos) {

    /** What an interval was spent on. */
    public enum Kind {
        /** A stage's forward pass (compute). */
        FORWARD,
        /** A stage's backward pass (compute). */
        BACKWARD,
        /** The input-gradient half of a split backward (compute). */
        INPUT_GRADIENT,
        /** The weight-gradient half of a split backward (compute). */
        WEIGHT_GRADIENT,
        /** Waiting for a message from another stage (idle unless the message was already there). */
        RECEIVE,
        /** Posting a message to another stage, including any wait for a free slot (back-pressure). */
        SEND,
        /** The optimizer update at the end of a step. */
        OPTIMIZER_STEP;

        /**
         * Whether the kind is model compute: what the simulator's action durations stand for.
         *
         * @return true for FORWARD, BACKWARD and a split backward's halves
         */
        public boolean isCompute() {
            return this == FORWARD || this == BACKWARD || this == INPUT_GRADIENT || this == WEIGHT_GRADIENT;
        }
    }

    /**
     * How long the event took.
     *
     * @return end minus start, in nanoseconds
     */
    public long durationNanos() {
        return endNanos - startNanos;
    }
}
