package org.symmem4j.dl4j;

import java.util.List;
import org.nd4j.linalg.dataset.DataSet;
import org.nd4j.linalg.dataset.api.DataSetPreProcessor;
import org.nd4j.linalg.dataset.api.iterator.DataSetIterator;

/** Returns a fixed list of batches, one per {@code next()}, resettable. */
public final class BatchListIterator implements DataSetIterator {

    private final List<DataSet> batches;
    private final Runnable beforeEachNext;
    private final boolean asyncSupported;
    private int cursor;
    private int resets;

    public BatchListIterator(List<DataSet> batches) {
        this(batches, () -> { });
    }

    /** With {@code beforeEachNext} run at every {@code next()} (tests watch when batches are read). */
    public BatchListIterator(List<DataSet> batches, Runnable beforeEachNext) {
        this(batches, beforeEachNext, false);
    }

    /** With {@code asyncSupported}: whether it may be read from a background thread (prefetching). */
    public BatchListIterator(List<DataSet> batches, Runnable beforeEachNext, boolean asyncSupported) {
        this.batches = List.copyOf(batches);
        this.beforeEachNext = beforeEachNext;
        this.asyncSupported = asyncSupported;
    }

    /** How often {@link #reset()} was called. */
    public int resets() {
        return resets;
    }

    @Override
    public DataSet next(int num) {
        throw new UnsupportedOperationException("next(num) is not used by the wrappers or the pipeline trainer");
    }

    @Override
    public int inputColumns() {
        return (int) batches.getFirst().getFeatures().size(1);
    }

    @Override
    public int totalOutcomes() {
        return (int) batches.getFirst().getLabels().size(1);
    }

    @Override
    public boolean resetSupported() {
        return true;
    }

    @Override
    public boolean asyncSupported() {
        return asyncSupported;
    }

    @Override
    public void reset() {
        cursor = 0;
        resets++;
    }

    @Override
    public int batch() {
        return batches.getFirst().numExamples();
    }

    @Override
    public void setPreProcessor(DataSetPreProcessor preProcessor) {
        throw new UnsupportedOperationException();
    }

    @Override
    public DataSetPreProcessor getPreProcessor() {
        return null;
    }

    @Override
    public List<String> getLabels() {
        return null;
    }

    @Override
    public boolean hasNext() {
        return cursor < batches.size();
    }

    @Override
    public DataSet next() {
        beforeEachNext.run();
        return batches.get(cursor++);
    }
}
