package org.symmem4j.parallel.cuda;

import java.lang.foreign.MemorySegment;
import java.util.ArrayList;
import java.util.List;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.Invariants;
import org.symmem4j.parallel.cuda.ffi.CudaDriver;
import org.symmem4j.parallel.multinode.StagingMemory;

/**
 * Device staging of a hierarchical schedule on GPUs: buffers of the machine's communicator, copies and zeros
 * enqueued on its stream. The zeros come from a device buffer of zeros (an all-reduce pads by fewer elements than
 * the ranks per machine), grown where more are asked for.
 */
final class DeviceStaging implements StagingMemory {

    private final CudaCommunicator intra;
    private final CudaDriver driver;
    /** What {@link #allocate} gave and {@link #free} did not take back: freed by {@link #close}. */
    private final List<MemorySegment> live = new ArrayList<>();
    /** Zeros for the padding of an all-reduce whose count is not a multiple of the ranks per machine. */
    private MemorySegment zeros;

    /**
     * @param intra       the machine's communicator (its stream, its device buffers)
     * @param driver      the driver, to zero the zeros
     * @param zeroesBytes the zeros' first size
     */
    DeviceStaging(CudaCommunicator intra, CudaDriver driver, long zeroesBytes) {
        this.intra = intra;
        this.driver = driver;
        this.zeros = zeros(zeroesBytes);
    }

    private MemorySegment zeros(long bytes) {
        MemorySegment z = intra.allocateDevice(bytes);
        driver.memset(z.address(), (byte) 0, z.byteSize());
        return z;
    }

    @Override
    public boolean stagesEveryAllReduce() {
        return false;
    }

    @Override
    public MemorySegment allocate(long bytes) {
        MemorySegment buffer = intra.allocateDevice(bytes);
        live.add(buffer);
        return buffer;
    }

    /** Waits for the stream first ({@link CudaCommunicator#freeDevice}). */
    @Override
    public void free(MemorySegment buffer) {
        live.remove(buffer);
        intra.freeDevice(buffer);
    }

    @Override
    public void copy(MemorySegment dst, MemorySegment src) {
        intra.copyAsync(dst, src);
    }

    @Override
    public void zero(MemorySegment region) {
        if (region.byteSize() > zeros.byteSize()) {
            intra.freeDevice(zeros); // waits for the stream first
            zeros = zeros(region.byteSize());
        }
        intra.copyAsync(region, zeros.asSlice(0, region.byteSize()));
    }

    /** NCCL averages between machines ({@code NcclLink.averages()}): the schedule never divides on a GPU. */
    @Override
    public void divide(MemorySegment buffer, long count, DType dtype, int by) {
        throw Invariants.violated("unreachable: NCCL averages between machines, the schedule does not divide");
    }

    /** Waits for the stream, then frees the staging and the zeros. */
    @Override
    public void close() {
        intra.synchronize();
        for (MemorySegment buffer : live) {
            intra.freeDevice(buffer);
        }
        live.clear();
        intra.freeDevice(zeros);
    }
}
