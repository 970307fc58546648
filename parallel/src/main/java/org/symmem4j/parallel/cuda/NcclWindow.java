package org.symmem4j.parallel.cuda;

import java.lang.foreign.MemorySegment;
import org.symmem4j.parallel.cuda.ffi.Nccl;

/** A buffer from {@code ncclMemAlloc} registered with {@code ncclCommWindowRegister(..., NCCL_WIN_COLL_SYMMETRIC)}. */
public final class NcclWindow implements AutoCloseable {

    private final Nccl nccl;
    private final MemorySegment comm;
    private final long pointer;
    private final long bytes;
    private final MemorySegment window;

    NcclWindow(Nccl nccl, MemorySegment comm, long pointer, long bytes, MemorySegment window) {
        this.nccl = nccl;
        this.comm = comm;
        this.pointer = pointer;
        this.bytes = bytes;
        this.window = window;
    }

    /** {@return the device address of this rank's buffer} */
    public long pointer() {
        return pointer;
    }

    /** {@return the buffer's size in bytes} */
    public long bytes() {
        return bytes;
    }

    /** Collective: deregisters the window and frees the buffer. */
    @Override
    public void close() {
        nccl.deregisterWindow(comm, window);
        nccl.memFree(pointer);
    }
}
