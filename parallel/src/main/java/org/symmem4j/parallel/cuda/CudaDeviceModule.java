package org.symmem4j.parallel.cuda;

import java.lang.foreign.MemorySegment;
import java.util.Objects;
import org.symmem4j.parallel.DeviceFunction;
import org.symmem4j.parallel.DeviceModule;
import org.symmem4j.parallel.SymmemException;
import org.symmem4j.parallel.cuda.ffi.CudaDriver;
import org.symmem4j.parallel.cuda.ffi.CudaException;

/**
 * A user's module in one rank's context ({@link CudaDeviceKernels#load}). Unloaded by {@link #close}
 * (collective) or, at the latest, when the rank is closed ({@link CudaRank#close}).
 */
final class CudaDeviceModule implements DeviceModule {

    private final CudaDeviceKernels kernels;
    private final MemorySegment module;
    private final java.util.concurrent.atomic.AtomicBoolean unloaded = new java.util.concurrent.atomic.AtomicBoolean();

    CudaDeviceModule(CudaDeviceKernels kernels, MemorySegment module) {
        this.kernels = kernels;
        this.module = module;
    }

    @Override
    public DeviceFunction function(String symbol) {
        Objects.requireNonNull(symbol, "symbol");
        checkLoaded("look up " + symbol);
        CudaDriver d = kernels.driver();
        MemorySegment f = kernels.collectively("find kernel " + symbol, () -> {
            kernels.rank().makeCurrent("look up " + symbol);
            try {
                return CudaKernels.loadFunctionFully(d, module, symbol);
            } catch (CudaException e) {
                if (e.code() == CudaDeviceKernels.NOT_FOUND) {
                    throw new SymmemException("kernel symbol=" + symbol + " not found in the module (fix: declare it"
                            + " extern \"C\" __global__ so that its name is not mangled; a C++ name is exported mangled,"
                            + " e.g. _Z...)", e);
                }
                throw e;
            }
        }, ignored -> { });
        return new CudaDeviceFunction(this, symbol, f);
    }

    /** Throws unless the module is loaded and its rank open. */
    void checkLoaded(String what) {
        if (unloaded.get()) {
            throw new IllegalStateException(what + ": the module was closed (fix: load it again with"
                    + " DeviceKernels.load)");
        }
        kernels.rank().checkOpen(what);
    }

    CudaDeviceKernels kernels() {
        return kernels;
    }

    @Override
    public void close() {
        if (unloaded.get() || kernels.rank().closed()) {
            return;
        }
        kernels.control().barrier(); // no kernel of the group runs while the module goes (see CudaDeviceKernels)
        unload();
    }

    /** Unloads the module on this rank now (its context made current); not collective. Idempotent. */
    void unload() {
        if (!unloaded.compareAndSet(false, true)) {
            return;
        }
        CudaRank rank = kernels.rank();
        rank.untrack(this);
        kernels.driver().setCurrent(rank.context);
        kernels.driver().unloadModule(module);
    }
}
