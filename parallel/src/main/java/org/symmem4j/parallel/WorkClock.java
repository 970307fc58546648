package org.symmem4j.parallel;

/**
 * Time marks in the order of one rank's work on a {@link SymmetricMemory}, for timelines: where the
 * memory's operations are done at once (host), a mark is the host clock now; where they are enqueued
 * (a GPU stream), a mark is recorded in the queue and holds the time that work reached it, known
 * only once it has run ({@link SymmetricMemory#awaitWork}). Either way {@link #nanos} gives
 * {@link System#nanoTime()} nanoseconds.
 *
 * <p>Get one from {@link SymmetricMemory#clock(int)} before the work it times starts on any rank (on
 * a GPU the marks are created there, and creating driver objects while a peer's kernel spins in a
 * device-side wait can block), reuse it round after round, and close it once no rank's work runs.
 * One thread per rank uses it.
 */
public interface WorkClock extends AutoCloseable {

    /**
     * Starts a round (e.g. a training step): forgets the previous round's marks and takes the round's
     * origin, the host time at which the round's first enqueued mark is placed.
     */
    void restart();

    /**
     * Marks this point of the rank's work.
     *
     * @return the mark, to pass to {@link #nanos} (an opaque value; on the host it is the time itself)
     * @throws IllegalStateException when the round has used up the marks the clock was made with
     */
    long mark();

    /**
     * Marks this point of the work enqueued on {@code stream}, another stream of the same GPU and context as the clock's
     * own: the marks of one round then lie on one time line across the two streams (a two-stream step's timeline). A
     * clock whose operations are done at once has no streams and marks now.
     *
     * @param stream a stream of the clock's GPU ({@code CUstream}), e.g. {@link DeviceCommunicator#stream()} of another
     *               communicator of this rank
     * @return the mark, to pass to {@link #nanos}
     * @throws IllegalStateException when the round has used up the marks the clock was made with
     */
    default long mark(java.lang.foreign.MemorySegment stream) {
        return mark();
    }

    /**
     * The time of {@code mark}, taken this round.
     *
     * @param mark a value {@link #mark()} returned since the last {@link #restart()}
     * @return {@link System#nanoTime()} nanoseconds; for enqueued marks the round's origin plus the time
     *         the work took from the round's start to the mark (call it after {@link SymmetricMemory#awaitWork}
     *         returned true)
     */
    long nanos(long mark);

    /** Releases the marks (on a GPU, its events); once no work that records them is running. */
    @Override
    void close();

    /**
     * The clock of memory whose operations are done at once: a mark is {@link System#nanoTime()}.
     *
     * @return a clock holding nothing to release
     */
    static WorkClock host() {
        return HostClock.INSTANCE;
    }
}
