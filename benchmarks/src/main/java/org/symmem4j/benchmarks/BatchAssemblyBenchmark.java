package org.symmem4j.benchmarks;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.factory.Nd4j;
import org.nd4j.linalg.indexing.INDArrayIndex;
import org.nd4j.linalg.indexing.NDArrayIndex;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Fork;
import org.openjdk.jmh.annotations.Level;
import org.openjdk.jmh.annotations.Measurement;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Param;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.Warmup;
import org.symmem4j.parallel.Invariants;
import org.symmem4j.serving.BatchAssembler;

/**
 * The serving router's batch assembly ({@link BatchAssembler}: rows copied into a reused per-worker buffer, one bulk
 * copy per request) against what it replaced ({@code Nd4j.concat(0, ...)}, a native op and a new array per batch), and
 * against copying each request with {@code buffer.get(interval).assign(request)} into the same buffer, all in the same
 * run. Inputs are ServingBench's: the MLP's 784 features and the CNN's {@code 1 x 28 x 28}, float, in batches of 32
 * one-row requests or 4 requests of 8 rows (max batch 32). Compare the scores of one run (ratios), not across machines.
 */
@BenchmarkMode(Mode.AverageTime)
@OutputTimeUnit(TimeUnit.MICROSECONDS)
@Warmup(iterations = 3, time = 1)
@Measurement(iterations = 5, time = 1)
@Fork(value = 1, jvmArgsAppend = {"--enable-native-access=ALL-UNNAMED", "--add-modules=jdk.incubator.vector", "-Xmx1g"})
@State(Scope.Thread)
public class BatchAssemblyBenchmark {

    /** ServingBench's models: {@code mlp} (784 features) or {@code cnn} (1 x 28 x 28). */
    @Param({"mlp", "cnn"})
    public String model;

    /** {@code 32x1}: 32 one-row requests; {@code 4x8}: 4 requests of 8 rows. */
    @Param({"32x1", "4x8"})
    public String requests;

    private static final int MAX_BATCH = 32;

    private List<INDArray> features;
    private INDArray[] featureArray;
    private long rows;
    private BatchAssembler assembler;
    private INDArray assignBuffer;

    @Setup(Level.Trial)
    public void setUp() {
        long[] example = switch (model) {
            case "mlp" -> new long[] {784};
            case "cnn" -> new long[] {1, 28, 28};
            default -> throw new IllegalArgumentException("model=" + model + " expected mlp or cnn (fix: -p model=mlp)");
        };
        int count;
        int rowsEach;
        switch (requests) {
            case "32x1" -> {
                count = 32;
                rowsEach = 1;
            }
            case "4x8" -> {
                count = 4;
                rowsEach = 8;
            }
            default -> throw new IllegalArgumentException("requests=" + requests + " expected 32x1 or 4x8 (fix:"
                    + " -p requests=32x1)");
        }
        features = new ArrayList<>();
        for (int i = 0; i < count; i++) {
            long[] shape = new long[example.length + 1];
            shape[0] = rowsEach;
            System.arraycopy(example, 0, shape, 1, example.length);
            features.add(Nd4j.rand(DataType.FLOAT, shape));
        }
        featureArray = features.toArray(INDArray[]::new);
        rows = (long) count * rowsEach;
        assembler = new BatchAssembler(MAX_BATCH);
        long[] full = new long[example.length + 1];
        full[0] = MAX_BATCH;
        System.arraycopy(example, 0, full, 1, example.length);
        assignBuffer = Nd4j.create(DataType.FLOAT, full, 'c');
        INDArray expected = Nd4j.concat(0, featureArray);
        if (!expected.equals(assembler.assemble(features, rows)) || !expected.equals(assignRows())) {
            throw Invariants.violated("BatchAssembler or this benchmark's assign copy differs from Nd4j.concat for"
                    + " model=" + model + " requests=" + requests);
        }
    }

    /** What the router did before: a native concat into a new array per batch. */
    @Benchmark
    public INDArray concat() {
        return Nd4j.concat(0, featureArray);
    }

    /** What the router's workers do now. */
    @Benchmark
    public INDArray assembler() {
        return assembler.assemble(features, rows);
    }

    /** The alternative copy into the same kind of buffer: a view and an assign op per request. */
    @Benchmark
    public INDArray assignRows() {
        long row = 0;
        for (INDArray f : featureArray) {
            long r = f.size(0);
            INDArrayIndex[] idx = new INDArrayIndex[assignBuffer.rank()];
            idx[0] = NDArrayIndex.interval(row, row + r);
            for (int i = 1; i < idx.length; i++) {
                idx[i] = NDArrayIndex.all();
            }
            assignBuffer.get(idx).assign(f);
            row += r;
        }
        return assignBuffer;
    }
}
