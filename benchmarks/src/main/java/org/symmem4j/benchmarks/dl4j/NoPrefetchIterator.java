package org.symmem4j.benchmarks.dl4j;

import java.util.List;
import org.nd4j.linalg.dataset.DataSet;
import org.nd4j.linalg.dataset.api.DataSetPreProcessor;
import org.nd4j.linalg.dataset.api.iterator.DataSetIterator;
import org.symmem4j.examples.ListIterator;

/**
 * A {@link ListIterator} that says it does not support asynchronous prefetching, so that
 * {@code MultiLayerNetwork.fit(iterator)} reads the prepared batches on the calling thread instead
 * of wrapping them in an {@code AsyncDataSetIterator} (a background thread and a copy per batch,
 * which hide nothing when the batches are already in memory). The benchmark gives every mode the
 * batches this way, so no mode pays for a prefetch thread that another one does not.
 */
final class NoPrefetchIterator implements DataSetIterator {

    private final ListIterator batches;

    NoPrefetchIterator(List<DataSet> batches) {
        this.batches = new ListIterator(batches);
    }

    @Override
    public boolean asyncSupported() {
        return false;
    }

    @Override
    public DataSet next(int num) {
        return batches.next(num);
    }

    @Override
    public int inputColumns() {
        return batches.inputColumns();
    }

    @Override
    public int totalOutcomes() {
        return batches.totalOutcomes();
    }

    @Override
    public boolean resetSupported() {
        return batches.resetSupported();
    }

    @Override
    public void reset() {
        batches.reset();
    }

    @Override
    public int batch() {
        return batches.batch();
    }

    @Override
    public void setPreProcessor(DataSetPreProcessor preProcessor) {
        batches.setPreProcessor(preProcessor);
    }

    @Override
    public DataSetPreProcessor getPreProcessor() {
        return batches.getPreProcessor();
    }

    @Override
    public List<String> getLabels() {
        return batches.getLabels();
    }

    @Override
    public boolean hasNext() {
        return batches.hasNext();
    }

    @Override
    public DataSet next() {
        return batches.next();
    }
}
