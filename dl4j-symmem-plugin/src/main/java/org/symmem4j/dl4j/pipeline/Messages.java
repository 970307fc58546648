package org.symmem4j.dl4j.pipeline;

import java.lang.foreign.MemorySegment;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.api.shape.Shape;
import org.nd4j.linalg.factory.Nd4j;
import org.symmem4j.dl4j.nd4j.ArrayCollectives;

/**
 * The messages stages exchange: one microbatch's activations (forward) or gradient (backward) as a
 * row-major (C order) array of the network's data type (FLOAT32 or FLOAT64, native byte order, as ND4J
 * stores them), with no header: both ends know its shape, {@code [rows, ...]} with the per-example
 * shape DL4J's input types give for that stage boundary ({@code [width]} between dense layers,
 * {@code [channels, height, width]} after a convolution, {@code [size, time steps]} after a recurrent
 * layer).
 */
final class Messages {

    private Messages() {
    }

    /**
     * Copies a received message into {@code reuse} when it is an array of {@code shape} and {@code type} (one the
     * stage got from an earlier call of this method and no longer reads), else into a new array, and returns that
     * array. The message's
     * memory is only valid during the stage call, so one copy is needed; reusing the array makes it the only cost
     * of a hand-off in steady state (no allocation per message).
     *
     * @throws IllegalStateException when the byte size is not that of {@code shape}
     */
    static INDArray read(MemorySegment message, INDArray reuse, long[] shape, DataType type, String what) {
        long bytes = message.byteSize();
        long expected = type.width();
        for (long d : shape) {
            expected *= d;
        }
        if (bytes != expected) {
            throw new IllegalStateException(what + " has payloadBytes=" + bytes + " expected=" + expected + " for shape "
                    + java.util.Arrays.toString(shape) + " of " + type + ": the stages disagree on the shape or data"
                    + " type between them (fix: build every rank's trainer from the same network configuration, data"
                    + " type and inputType(...))");
        }
        INDArray array = reuse != null && reuse.dataType() == type && java.util.Arrays.equals(reuse.shape(), shape)
                ? reuse : Nd4j.createUninitialized(type, shape, 'c');
        MemorySegment.copy(message, 0, ArrayCollectives.segmentOf(array), 0, bytes);
        return array;
    }

    /**
     * {@code array} as a message: itself when it is already row-major, contiguous and of
     * {@code type} (DL4J's input gradients usually are), else a row-major copy, made into {@code reuse}
     * when that is a row-major array of the same shape and type (the message of an earlier call: the
     * executor has sent it by now), else into a new array. Keep the result reachable while
     * {@link ArrayCollectives#segmentOf} of it is in use.
     */
    static INDArray rowMajor(INDArray array, INDArray reuse, DataType type) {
        INDArray typed = array.dataType() == type ? array : array.castTo(type);
        if (typed.ordering() == 'c' && Shape.hasDefaultStridesForShape(typed)) {
            return typed;
        }
        if (reuse != null && reuse != typed && reuse.dataType() == type
                && java.util.Arrays.equals(reuse.shape(), typed.shape())) {
            return reuse.assign(typed); // an element-wise copy, as dup's: the same values bit for bit
        }
        return typed.dup('c');
    }
}
