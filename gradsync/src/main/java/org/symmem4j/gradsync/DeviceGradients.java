package org.symmem4j.gradsync;

import java.lang.foreign.MemorySegment;
import java.util.Objects;
import org.symmem4j.parallel.DType;

/**
 * A flat gradient in a GPU's memory, written by some library on some stream — ND4J's CUDA backend on its execution
 * stream, a framework of the caller's, or device buffers of our own — as {@link DeviceGradientAveraging} reads and
 * writes it: the device address and size, the element type, the stream the gradient's writer uses, and the hooks
 * the owner needs around the sync (a library that keeps host and device copies makes the device copy current before,
 * and marks it written after).
 *
 * <p>Our own device buffers satisfy it with {@link #of}; DL4J's CUDA backend does through ND4J's data-buffer API (the
 * device pointer after making the device copy current, ND4J's execution stream, the device copy marked written): the
 * plugin's {@code org.symmem4j.dl4j.nd4j.Nd4jDeviceGradients}, which needs an Ampere/Ada GPU with DL4J's CUDA backend
 * ({@code nd4j-cuda-11.6} has no code for Hopper) and has not run on a GPU in this project.
 *
 * <p>Order of calls in a sync: {@link #beforeSync} first, then {@link #elements}, {@link #buffer}, {@link #dtype} and
 * {@link #stream} (an owner may give a valid address only once its device copy is current), then the collective is
 * enqueued, then {@link #afterSync}.
 */
public interface DeviceGradients {

    /**
     * The gradient: a device address of this rank's GPU, sized {@code elements × dtype} bytes.
     *
     * @return the device buffer
     */
    MemorySegment buffer();

    /**
     * The element type.
     *
     * @return FLOAT32 or BFLOAT16 for our kernels; NCCL takes FLOAT64 too
     */
    DType dtype();

    /**
     * The stream the gradient's writer enqueues on; the sync runs after what is enqueued there and the writer's later
     * work runs after the sync.
     *
     * @return the {@code CUstream}; {@link MemorySegment#NULL} for the legacy default stream
     */
    MemorySegment stream();

    /** Before the sync reads the buffer or its size (e.g. make the device copy of a host/device pair current). */
    default void beforeSync() {
    }

    /** After the sync was enqueued (e.g. mark the device copy written, so the host copy is refreshed before use). */
    default void afterSync() {
    }

    /**
     * The number of elements.
     *
     * @return {@code buffer().byteSize() / dtype().byteSize()}
     */
    default long elements() {
        return buffer().byteSize() / dtype().byteSize();
    }

    /**
     * Device memory of our own (for example from {@code DeviceCommunicator.allocateDevice}) written on {@code stream}.
     *
     * @param buffer the device buffer, its byte size a multiple of the element size
     * @param dtype  the element type
     * @param stream the stream its writer uses ({@link MemorySegment#NULL}: the legacy default stream)
     * @return the gradients
     * @throws IllegalArgumentException when the size is not a whole number of elements
     */
    static DeviceGradients of(MemorySegment buffer, DType dtype, MemorySegment stream) {
        Objects.requireNonNull(buffer, "buffer");
        Objects.requireNonNull(dtype, "dtype");
        Objects.requireNonNull(stream, "stream");
        if (buffer.byteSize() % dtype.byteSize() != 0) {
            throw new IllegalArgumentException("a gradient of " + buffer.byteSize() + " bytes is not a whole number of " + dtype
                    + " elements (" + dtype.byteSize() + " bytes each); fix: pass the dtype the buffer holds, or a buffer"
                    + " of a multiple of " + dtype.byteSize() + " bytes (e.g. " + buffer.byteSize() / dtype.byteSize()
                    + " elements: " + buffer.byteSize() / dtype.byteSize() * dtype.byteSize() + " bytes)");
        }
        return new DeviceGradients() {
            @Override
            public MemorySegment buffer() {
                return buffer;
            }

            @Override
            public DType dtype() {
                return dtype;
            }

            @Override
            public MemorySegment stream() {
                return stream;
            }
        };
    }
}
