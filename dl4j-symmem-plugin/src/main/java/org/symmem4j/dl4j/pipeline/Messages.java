package org.symmem4j.dl4j.pipeline;

import java.lang.foreign.MemorySegment;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.api.shape.Shape;
import org.nd4j.linalg.factory.Nd4j;

/**
 * The messages stages exchange: one microbatch's activations (forward) or gradient (backward) as a
 * row-major {@code [rows x width]} matrix of the network's data type (FLOAT32 or FLOAT64, native byte
 * order, as ND4J stores them), with no header: the row count follows from the byte size.
 */
final class Messages {

    private Messages() {
    }

    /**
     * Copies a received message into a new array (the message's memory is only valid during the
     * stage call; the array is kept until the microbatch's backward).
     *
     * @throws IllegalStateException when the byte size is not a whole number of rows of {@code width}
     */
    static INDArray read(MemorySegment message, long width, DataType type, String what) {
        long rowBytes = width * type.width();
        long bytes = message.byteSize();
        if (bytes == 0 || bytes % rowBytes != 0) {
            throw new IllegalStateException(what + " has payloadBytes=" + bytes + " expected a positive multiple of"
                    + " width=" + width + " x " + type.width() + " bytes (" + type + "): the stages disagree on the"
                    + " width or data type between them");
        }
        INDArray array = Nd4j.createUninitialized(type, bytes / rowBytes, width);
        MemorySegment.copy(message, 0, segmentOf(array), 0, bytes);
        return array;
    }

    /**
     * {@code array} as a message: itself when it is already row-major, contiguous and of
     * {@code type} (DL4J's input gradients usually are), else a row-major copy. Keep the result
     * reachable while {@link #segmentOf} of it is in use.
     */
    static INDArray rowMajor(INDArray array, DataType type) {
        INDArray typed = array.dataType() == type ? array : array.castTo(type);
        if (typed.ordering() == 'c' && Shape.hasDefaultStridesForShape(typed)) {
            return typed;
        }
        return typed.dup('c');
    }

    /**
     * The off-heap memory of a contiguous row-major array, as a segment. The segment does not keep the
     * array alive: the caller must.
     */
    static MemorySegment segmentOf(INDArray array) {
        long elementBytes = array.dataType().width();
        long address = array.data().address() + array.offset() * elementBytes;
        return MemorySegment.ofAddress(address).reinterpret(array.length() * elementBytes);
    }
}
