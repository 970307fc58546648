package org.symmem4j.serving;

import java.lang.foreign.MemorySegment;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Set;

import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.factory.Nd4j;
import org.nd4j.linalg.indexing.INDArrayIndex;
import org.nd4j.linalg.indexing.NDArrayIndex;

/**
 * One worker thread's batch assembly: instead of {@code Nd4j.concat(0, ...)} (a native op and a new array per
 * batch), the requests' rows are copied into a buffer of {@code maxBatch} rows that the thread keeps per (data type,
 * example shape) and reuses batch after batch; the network then runs on the first {@code rows} rows of it.
 *
 * <p>A request whose features are c-order and contiguous is copied with one bulk memory copy of its bytes; any other
 * layout is copied with {@code assign} into its rows of the buffer. Both are exact copies, so a batch's features are
 * bitwise those {@code concat} would build. A batch whose requests differ in data type or example shape (which
 * {@link ModelRouter#predict} does not let through) falls back to {@code concat}.
 *
 * <p>Because the buffer is reused, an output must never alias it: {@link #detach} copies an output that shares the
 * buffer's memory (a network that returns its input or a view of it; DL4J's networks return fresh arrays).
 *
 * <p>A buffer lives until {@link #retainOnly} drops its shape (the router calls it when the last served version of
 * that data type and example shape is freed), {@link #close}, or more than {@value #MAX_BUFFERS} shapes pile up
 * (then all are dropped); a dropped buffer's memory is freed at once, not left to the garbage collector.
 *
 * <p>Not thread-safe: one instance per worker thread. {@link ModelRouter}'s workers each hold one; it is public so
 * that a benchmark (BatchAssemblyBenchmark) or a caller that batches on its own can use the same assembly.
 */
public final class BatchAssembler implements AutoCloseable {

    /** Beyond this many (data type, example shape) buffers, the thread drops them all and starts over. */
    private static final int MAX_BUFFERS = 16;

    /**
     * What a buffer is for: one data type and example shape (all but the row dimension).
     *
     * @param dataType     the features' data type
     * @param exampleShape one example's shape
     */
    public record Shape(DataType dataType, List<Long> exampleShape) {

        /** Checks and copies the shape. */
        public Shape {
            Objects.requireNonNull(dataType, "dataType");
            exampleShape = List.copyOf(exampleShape);
        }

        /**
         * @param dataType     the features' data type
         * @param exampleShape one example's shape
         * @return the shape
         */
        public static Shape of(DataType dataType, long... exampleShape) {
            return new Shape(dataType, Arrays.stream(exampleShape).boxed().toList());
        }
    }

    private final int maxBatch;
    /** Per key: the buffer of {@code maxBatch} rows at [0], and at [r] its view of the first r rows (made once). */
    private final Map<Shape, INDArray[]> buffers = new HashMap<>();
    /** The buffer the last batch was assembled in, or null after a concat or a single request. */
    private INDArray lastBuffer;

    /** @param maxBatch the most rows a batch has (the buffers' row count) */
    public BatchAssembler(int maxBatch) {
        if (maxBatch < 1) {
            throw new IllegalArgumentException("maxBatch=" + maxBatch + " expected at least 1 (fix: pass the router's"
                    + " RouterOptions.maxBatch, a positive row count)");
        }
        this.maxBatch = maxBatch;
    }

    /**
     * The batch of the requests' features, rows in order.
     *
     * @param features each request's {@code [rows, ...exampleShape]}
     * @param rows     the sum of their rows, at most {@code maxBatch}
     * @return the first {@code rows} rows of this thread's buffer (or a concatenation, see the class)
     */
    public INDArray assemble(List<INDArray> features, long rows) {
        lastBuffer = null;
        if (features.size() == 1) {
            return features.get(0);
        }
        INDArray first = features.get(0);
        long[] shape = first.shape();
        long[] example = Arrays.copyOfRange(shape, 1, shape.length);
        for (INDArray f : features) {
            if (f.dataType() != first.dataType() || f.rank() != shape.length
                    || !Arrays.equals(example, 0, example.length, f.shape(), 1, shape.length)) {
                return Nd4j.concat(0, features.toArray(INDArray[]::new));
            }
        }
        if (rows > maxBatch) {
            return Nd4j.concat(0, features.toArray(INDArray[]::new));
        }
        INDArray[] views = buffer(first.dataType(), example);
        INDArray buffer = views[0];
        long rowElements = buffer.length() / maxBatch;
        long width = first.dataType().width();
        MemorySegment target = segment(buffer, buffer.length() * width);
        long row = 0;
        for (INDArray f : features) {
            long r = f.size(0);
            if (contiguous(f)) {
                MemorySegment.copy(segment(f, r * rowElements * width), 0, target, row * rowElements * width,
                        r * rowElements * width);
            } else {
                rowsOf(buffer, row, row + r).assign(f);
            }
            row += r;
        }
        lastBuffer = buffer;
        int r = (int) row;
        if (views[r] == null) { // ND4J's indexing costs tens of microseconds on 4-D arrays: one view per row count
            views[r] = rowsOf(buffer, 0, row);
        }
        return views[r];
    }

    /**
     * The output itself, or a copy of it when it shares memory with the buffer the last batch was assembled in (the
     * next batch overwrites that buffer while this one's answers are still in use).
     */
    public INDArray detach(INDArray output) {
        if (lastBuffer == null || output.isEmpty()) {
            return output;
        }
        long start = lastBuffer.data().address();
        long end = start + lastBuffer.data().length() * lastBuffer.data().getElementSize();
        long outStart = output.data().address();
        long outEnd = outStart + output.data().length() * output.data().getElementSize();
        return outStart < end && start < outEnd ? output.dup() : output;
    }

    private INDArray[] buffer(DataType dataType, long[] example) {
        Shape key = Shape.of(dataType, example);
        INDArray[] b = buffers.get(key);
        if (b == null) {
            if (buffers.size() >= MAX_BUFFERS) {
                retainOnly(Set.of());
            }
            long[] shape = new long[example.length + 1];
            shape[0] = maxBatch;
            System.arraycopy(example, 0, shape, 1, example.length);
            b = new INDArray[maxBatch + 1];
            b[0] = Nd4j.create(dataType, shape, 'c');
            b[maxBatch] = b[0];
            buffers.put(key, b);
        }
        return b;
    }

    /**
     * Frees the buffers of every shape not in {@code live} (a later batch of such a shape makes a new one).
     *
     * @param live the shapes whose buffers stay
     * @return the buffers freed
     */
    public int retainOnly(Set<Shape> live) {
        int freed = 0;
        for (var it = buffers.entrySet().iterator(); it.hasNext(); ) {
            var e = it.next();
            if (!live.contains(e.getKey())) {
                it.remove();
                free(e.getValue()[0]);
                freed++;
            }
        }
        return freed;
    }

    /** {@return the shapes this assembler holds a buffer for} */
    public Set<Shape> shapes() {
        return Set.copyOf(buffers.keySet());
    }

    /** {@return the bytes of the buffers held} */
    public long bufferBytes() {
        long bytes = 0;
        for (INDArray[] b : buffers.values()) {
            bytes += b[0].length() * b[0].dataType().width();
        }
        return bytes;
    }

    /** Frees every buffer. */
    @Override
    public void close() {
        retainOnly(Set.of());
    }

    private void free(INDArray buffer) {
        if (buffer == lastBuffer) {
            lastBuffer = null; // detach() must not read a freed buffer's address
        }
        if (buffer.closeable()) {
            buffer.close(); // its row views go with it: nothing refers to them any more
        }
    }

    /**
     * Whether {@code f}'s elements lie in memory in c order without gaps (one bulk copy moves them): every dimension
     * of more than one element has the c-order stride (ND4J's own check refuses e.g. {@code [8, 1, 28, 28]}).
     */
    private static boolean contiguous(INDArray f) {
        if (f.isEmpty()) {
            return false;
        }
        long[] shape = f.shape();
        long[] stride = f.stride();
        long expected = 1;
        for (int i = shape.length - 1; i >= 0; i--) {
            if (shape[i] != 1 && stride[i] != expected) {
                return false;
            }
            expected *= shape[i];
        }
        return true;
    }

    /** The memory of {@code bytes} bytes where {@code a}'s first element lies. */
    private static MemorySegment segment(INDArray a, long bytes) {
        long address = a.data().address() + a.offset() * a.dataType().width();
        return MemorySegment.ofAddress(address).reinterpret(bytes);
    }

    private static INDArray rowsOf(INDArray a, long from, long to) {
        INDArrayIndex[] idx = new INDArrayIndex[a.rank()];
        idx[0] = NDArrayIndex.interval(from, to);
        for (int i = 1; i < idx.length; i++) {
            idx[i] = NDArrayIndex.all();
        }
        return a.get(idx);
    }
}
