package org.symmem4j.parallel.cuda;

import java.lang.foreign.MemorySegment;
import org.symmem4j.parallel.Transport;
import org.symmem4j.parallel.cuda.ffi.CudaDriver;
import org.symmem4j.parallel.cuda.ffi.CudaException;

/**
 * The context current on a thread when it was captured, put back by {@link #close()} ({@link Transport#callerState()}
 * of the CUDA transports): every GPU call of a rank makes that rank's context current, and releasing a rank's state
 * leaves none current (the release may destroy the context), so a caller's own driver calls after, say, closing a model
 * would fail with CUDA_ERROR_INVALID_CONTEXT. A primary context that the release destroyed (its last retain was the
 * released one) is not put back: none stays current then, as before.
 */
final class CallerContext implements Transport.CallerState {

    private final CudaDriver driver;
    /** The context current at capture, or NULL. */
    private final MemorySegment previous;
    /** The CUdevice whose primary context {@code previous} is, or -1 (none current, or a context of the caller's own). */
    private final int primaryOf;

    private CallerContext(CudaDriver driver, MemorySegment previous, int primaryOf) {
        this.driver = driver;
        this.previous = previous;
        this.primaryOf = primaryOf;
    }

    /** Captures the calling thread's current context, and whether it is its device's primary context. */
    static CallerContext capture(CudaDriver driver) {
        MemorySegment previous = driver.currentContext();
        int primaryOf = -1;
        if (!MemorySegment.NULL.equals(previous)) {
            int device;
            try {
                device = driver.currentDevice();
            } catch (CudaException stale) {
                return new CallerContext(driver, MemorySegment.NULL, -1); // a destroyed context: none to put back
            }
            if (driver.primaryContextActive(device)) {
                // a retain of an active primary context only counts up: it returns the handle, given back at once
                MemorySegment primary = driver.retainPrimaryContext(device);
                driver.releasePrimaryContext(device);
                primaryOf = primary.equals(previous) ? device : -1;
            }
        }
        return new CallerContext(driver, previous, primaryOf);
    }

    @Override
    public void close() {
        boolean alive = primaryOf < 0 || driver.primaryContextActive(primaryOf);
        driver.setCurrent(restored(previous, alive));
    }

    /**
     * The context to make current again: the captured one, unless it was a primary context that is gone now.
     *
     * @param previous the context current at capture (NULL: none)
     * @param alive    false when {@code previous} was its device's primary context and no retain holds it any more
     * @return {@code previous}, or NULL
     */
    static MemorySegment restored(MemorySegment previous, boolean alive) {
        return alive ? previous : MemorySegment.NULL;
    }
}
