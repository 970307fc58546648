package org.symmem4j.examples;

import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.Tag;
import java.util.List;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.dataset.DataSet;
import org.symmem4j.dl4j.SymmemParallelWrapper;
import org.symmem4j.dl4j.pipeline.PipelineParallelTrainer;

/** Small DL4J trainings in this JVM that record their metrics into a given registry. */
final class InProcessTraining {

    static final int FEATURES = 16;
    static final int CLASSES = 4;
    static final int BATCH = 16;

    private InProcessTraining() {
    }

    /** {@code steps} pipeline steps (2 ranks, 4 microbatches, 1F1B) of the example's MLP; returns the examples trained. */
    static long pipeline(MeterRegistry registry, Iterable<Tag> tags, int steps) {
        List<DataSet> data = new SyntheticData(FEATURES, CLASSES, 3).batches(4, steps, BATCH, DataType.FLOAT);
        MultiLayerNetwork net = DataParallelExample.mlp(FEATURES, 32, CLASSES);
        try (PipelineParallelTrainer trainer = PipelineParallelTrainer.builder(net).ranks(2).microbatches(4)
                .ompThreadsPerRank(1).meterRegistry(registry, tags).build()) {
            trainer.fit(new ListIterator(data));
        }
        return (long) steps * BATCH;
    }

    /** {@code steps} data-parallel steps of 2 workers on the example's MLP; returns the examples trained. */
    static long dataParallel(MeterRegistry registry, Iterable<Tag> tags, int steps) {
        List<DataSet> data = new SyntheticData(FEATURES, CLASSES, 5).batches(6, 2 * steps, BATCH, DataType.FLOAT);
        MultiLayerNetwork net = DataParallelExample.mlp(FEATURES, 32, CLASSES);
        try (SymmemParallelWrapper wrapper = SymmemParallelWrapper.builder(net).workers(2).ompThreadsPerWorker(1)
                .meterRegistry(registry, tags).build()) {
            wrapper.fit(new ListIterator(data));
        }
        return 2L * steps * BATCH;
    }
}
