package org.symmem4j.dl4j;

import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Deque;
import java.util.Iterator;
import java.util.List;
import java.util.function.Supplier;

/**
 * How one {@code fit}'s batches become {@link SymmemParallelWrapper}'s steps: read from the iterator on the caller's
 * thread, or with {@code prefetchBuffer(n)} from a background reader ({@link BatchPrefetcher}, closed with this
 * object, before {@code fit} returns or throws); batches a shrink put back ({@link #redealt()}: a failed step's, and
 * those read ahead) come first; each step takes up to workers × accumulation of them, dealt round-robin
 * ({@link #take()}). The worker count is read at every step: a shrink changes it mid-fit.
 */
final class StepBatches implements AutoCloseable {

    private interface BatchSource {
        Object next();
    }

    /** The wrapper's settings now (a shrink replaces them). */
    private final Supplier<DataParallelSettings> settings;
    /** The background reader, or null without a prefetch buffer. */
    private final BatchPrefetcher prefetcher;
    /** A shrink puts the batches of a failed step (and those read ahead) back in front of the rest. */
    private final ArrayDeque<Object> redealt = new ArrayDeque<>();
    private final BatchSource source;

    /**
     * Starts reading {@code iterator}: with a prefetch buffer the iterator is read on a background thread from here
     * until {@link #close()}.
     */
    StepBatches(Iterator<?> iterator, Supplier<DataParallelSettings> settings) {
        this.settings = settings;
        BatchSource iteratorSource = () -> iterator.hasNext() ? iterator.next() : null;
        DataParallelSettings s = settings.get();
        this.prefetcher = s.prefetchBuffer() == 0 ? null
                : new BatchPrefetcher(iteratorSource::next, s.prefetchBuffer(), s.timeout());
        BatchSource read = prefetcher == null ? iteratorSource : prefetcher::next;
        this.source = () -> redealt.isEmpty() ? read.next() : redealt.poll();
    }

    /** {@return the batches put back in front of the rest, read before the iterator's next (a shrink adds to its front)} */
    Deque<Object> redealt() {
        return redealt;
    }

    /** Puts {@code batches} back in front of the rest, in their order (a shrink's: they are dealt again first). */
    void putBack(List<Object> batches) {
        for (int i = batches.size() - 1; i >= 0; i--) {
            redealt.addFirst(batches.get(i));
        }
    }

    /**
     * The next step's work, one entry per worker that gets any: up to workers × accumulation
     * batches, dealt round-robin (worker i takes batches i, i + workers, ...), so a short last step
     * keeps the workers' shares within one batch of each other; with accumulation each entry is
     * a {@link MicroBatches}. Empty when the source is exhausted.
     */
    List<Object> take() {
        DataParallelSettings now = settings.get();
        int n = now.workers();
        int k = now.accumulation();
        List<Object> taken = new ArrayList<>(n * k);
        Object b;
        while (taken.size() < n * k && (b = source.next()) != null) {
            taken.add(b);
        }
        if (k == 1) {
            return taken;
        }
        List<Object> perWorker = new ArrayList<>(n);
        for (int w = 0; w < n && w < taken.size(); w++) {
            List<Object> mine = new ArrayList<>(k);
            for (int j = w; j < taken.size(); j += n) {
                mine.add(taken.get(j));
            }
            perWorker.add(new MicroBatches(mine));
        }
        return perWorker;
    }

    /** The iterator's examples in a step's work. */
    static long rawExamples(List<Object> work) {
        long n = 0;
        for (Object o : work) {
            n += MicroBatches.examples(o);
        }
        return n;
    }

    /** The iterator's batches in a step's work: one per entry, or a micro-batch list's size. */
    static long rawBatches(List<Object> work) {
        long n = 0;
        for (Object o : work) {
            n += o instanceof MicroBatches m ? m.batches().size() : 1;
        }
        return n;
    }

    /** Stops the background reader and waits for it (no thread but the caller's touches the iterator after it). */
    @Override
    public void close() {
        if (prefetcher != null) {
            prefetcher.close();
        }
    }
}
