package org.symmem4j.dl4j;

import java.time.Duration;
import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.function.Supplier;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.symmem4j.parallel.Invariants;
import org.symmem4j.parallel.SymmemException;

/**
 * Reads batches on a background thread, up to {@code capacity} ahead of the thread that takes
 * them: what DL4J's {@code ParallelWrapper} gets from wrapping the iterator in an
 * {@code AsyncDataSetIterator} / {@code AsyncMultiDataSetIterator} with {@code prefetchBuffer(n)}.
 * Unlike those, batches are plain arrays outside any workspace (a step keeps its batches while the
 * next ones are read, and the user's listeners keep them beyond that), and an iterator failure
 * surfaces on the taking thread as the iterator's own exception, where that thread would have read
 * the failing batch (after taking every batch read before it).
 *
 * <p>The reader owns the iterator from construction until {@link #close()} returned: close stops it
 * and waits for it, so after {@code fit()} no thread but the caller's touches the iterator.
 *
 * <p>Publication: every batch, the end marker and a failure go through an {@link ArrayBlockingQueue},
 * whose {@code put} (reader) happens-before the {@code poll} that returns the element (taker), so
 * the arrays the iterator built on the reader thread are fully visible to the workers the taker
 * hands them to.
 */
final class BatchPrefetcher implements AutoCloseable {

    private static final Logger LOG = LoggerFactory.getLogger(BatchPrefetcher.class);

    /** Queued after the last batch. */
    private static final Object END = new Object();

    /** Queued instead of the batch whose read threw. */
    private record Failure(Throwable cause, long batchIndex) {
    }

    private final BlockingQueue<Object> queue;
    private final Supplier<Object> source;
    private final Thread reader;
    private final Duration closeWait;
    /** Set by {@link #close()}; read by the reader before and after each call into the iterator. */
    private volatile boolean stopping;
    /** True while the reader is inside the iterator: close() then waits for it instead of interrupting it. */
    private volatile boolean inIterator;
    private boolean finished;

    /**
     * Starts the reader.
     *
     * @param source    the next batch, or null when there is none (called on the reader thread only)
     * @param capacity  batches read ahead and waiting, at least 1; the reader holds one more while it waits for room
     * @param closeWait how long {@link #close()} waits for a reader that is inside the iterator's {@code next()}
     */
    BatchPrefetcher(Supplier<Object> source, int capacity, Duration closeWait) {
        if (capacity < 1) {
            throw new IllegalArgumentException("prefetch capacity=" + capacity + " must be >= 1 (fix: pass a"
                    + " positive number of batches to read ahead, or leave it unset)");
        }
        this.queue = new ArrayBlockingQueue<>(capacity);
        this.source = source;
        this.closeWait = closeWait;
        this.reader = Thread.ofPlatform().daemon().name("symmem4j-prefetch").unstarted(this::read);
        reader.start();
    }

    private void read() {
        long index = 0;
        try {
            while (true) {
                inIterator = true;
                // Dekker pair with close(): it writes stopping then reads inIterator; this thread writes
                // inIterator then reads stopping (all volatile): either close sees this thread inside the
                // iterator and does not interrupt it, or this thread sees stopping and never enters it
                if (stopping) {
                    return;
                }
                Object batch;
                try {
                    batch = source.get();
                } catch (Throwable t) {
                    if (!stopping) {
                        queue.put(new Failure(t, index)); // after every batch read before it
                    }
                    return;
                } finally {
                    inIterator = false;
                }
                if (stopping) {
                    return;
                }
                queue.put(batch == null ? END : batch); // blocks while the buffer is full; close() interrupts it
                if (batch == null) {
                    return;
                }
                index++;
            }
        } catch (InterruptedException e) {
            // close(): the taker wants no more batches
        }
    }

    /**
     * The next batch, waiting for the reader; null after the last. Rethrows, on this thread, the
     * exception the iterator threw on the reader's (its own type, with a suppressed note naming
     * the batch), once every batch read before it was taken.
     */
    Object next() {
        if (finished) {
            return null;
        }
        Object item;
        try {
            while ((item = queue.poll(100, TimeUnit.MILLISECONDS)) == null) {
                if (!reader.isAlive() && queue.isEmpty()) {
                    finished = true;
                    // error-message: an internal invariant kept a SymmemException (fit's callers catch it); its text ends with Invariants.HOW_TO_REPORT
                    throw new SymmemException("the prefetch thread ended without a batch, an end or an error ("
                            + Invariants.HOW_TO_REPORT + ")");
                }
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new SymmemException("interrupted while waiting for the prefetch thread's next batch: expected the"
                    + " thread that called fit() to run until fit() returns (fix: do not interrupt it; to stop training,"
                    + " let fit() return and call close())", e);
        }
        if (item == END) {
            finished = true;
            return null;
        }
        if (item instanceof Failure f) {
            finished = true;
            Throwable cause = f.cause();
            // error-message: a note on where the iterator's own failure was thrown; that failure says what went wrong
            cause.addSuppressed(new SymmemException("thrown by the iterator on thread symmem4j-prefetch reading batch "
                    + f.batchIndex() + " of this fit() (prefetchBuffer > 0); rethrown on the thread that called fit()"));
            if (cause instanceof RuntimeException r) {
                throw r;
            }
            if (cause instanceof Error e) {
                throw e;
            }
            throw new SymmemException("the iterator failed reading batch " + f.batchIndex() + ": " + cause + " (fix:"
                    + " correct the iterator's failure the cause names; prefetchBuffer(0) reads it on fit()'s own thread)",
                    cause);
        }
        return item;
    }

    /**
     * Stops the reader and waits for it: at once when it waits for room in the buffer or has
     * finished; when it is inside the iterator's {@code next()}, after that call returns (up to
     * the close wait, then a warning says the iterator is still being read). Batches read ahead and
     * not taken are dropped, as DL4J's {@code AsyncDataSetIterator.shutdown()} drops them.
     */
    @Override
    public void close() {
        stopping = true;
        if (!inIterator) {
            // only a wait for room is interrupted: an interrupt inside the iterator could break it
            // for later use (an NIO channel closes on interrupt)
            reader.interrupt();
        }
        queue.clear(); // room for the one put a reader between the iterator and the queue may still make
        try {
            reader.join(closeWait.toMillis());
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        if (reader.isAlive()) {
            LOG.warn("symmem4j: the prefetch thread is still inside the iterator's next() " + closeWait
                    + " after fit() ended; it stops after that call returns (do not use the iterator until then)");
        }
    }
}
