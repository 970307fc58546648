package org.symmem4j.parallel.multinode;

import java.lang.foreign.MemorySegment;
import org.symmem4j.parallel.DType;

/**
 * This rank's memory that a {@link HierarchicalSchedule} stages through, of the kind its buffers are: host segments
 * ({@code HostStaging}, copies done when the call returns) or device memory ({@code cuda.DeviceStaging}, copies
 * enqueued on the rank's stream). The schedule is the same for both; what differs is here.
 */
public interface StagingMemory extends AutoCloseable {

    /**
     * Whether an all-reduce goes through the staging buffer even when no padding is needed (host: as it always did;
     * GPU: only when the count needs padding, otherwise in the caller's buffer).
     *
     * @return true on the host
     */
    boolean stagesEveryAllReduce();

    /**
     * A new buffer.
     *
     * @param bytes its size
     * @return at least {@code bytes} bytes, 64-byte aligned
     */
    MemorySegment allocate(long bytes);

    /**
     * Gives back a buffer of {@link #allocate} that the schedule outgrew (after the work that uses it).
     *
     * @param buffer the buffer
     */
    void free(MemorySegment buffer);

    /**
     * Copies all of {@code src} to the start of {@code dst}.
     *
     * @param dst at least {@code src.byteSize()} bytes
     * @param src the bytes
     */
    void copy(MemorySegment dst, MemorySegment src);

    /**
     * Writes zeros over {@code region}.
     *
     * @param region the bytes
     */
    void zero(MemorySegment region);

    /**
     * Divides {@code count} elements by {@code by}, the same division on every rank (the average where the link does
     * not average: {@link InterMachineLink#averages()}).
     *
     * @param buffer the elements
     * @param count  how many
     * @param dtype  their type
     * @param by     the divisor
     */
    void divide(MemorySegment buffer, long count, DType dtype, int by);

    /** Frees every buffer of {@link #allocate} (after the work that uses them). */
    @Override
    void close();
}
