package org.symmem4j.parallel.cuda;

import java.io.IOException;
import java.io.InputStream;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.HashMap;
import java.util.Map;
import java.util.Optional;
import org.symmem4j.parallel.Invariants;
import org.symmem4j.parallel.cuda.ffi.CudaDriver;
import org.symmem4j.parallel.cuda.ffi.CudaUnavailableException;

/**
 * symmem4j's CUDA kernels: the fatbin that {@code kernels/} builds with nvcc (SASS for sm_80,
 * sm_90, sm_100 and PTX), read from the class path and loaded into one context with
 * {@code cuModuleLoadData}, once per device ({@link #acquire}). Without the resource (built on a machine without nvcc),
 * {@link #present()} is false and GPU collectives other than NCCL say so.
 */
public final class CudaKernels {

    /** Class-path resource holding the kernels' fatbin. */
    public static final String RESOURCE = "/org/symmem4j/kernels/symmem4j.fatbin";

    /** Signal-pad layout on the GPU, mirrored from symmem4j_kernels.cu. */
    static final int MAX_RANKS = 8;
    static final int MAX_BLOCKS = 1024;
    static final long BARRIER_BYTES = (long) MAX_BLOCKS * MAX_RANKS * Integer.BYTES;
    /** Per-block epoch counters follow the barrier slots (EPOCHS in the .cu). */
    static final long EPOCHS_BYTES = (long) MAX_BLOCKS * Integer.BYTES;
    static final int SIGNAL_SLOTS = 64;
    static final long SIGNALS_OFFSET = BARRIER_BYTES + EPOCHS_BYTES;
    static final long DONE_COUNTER_OFFSET = SIGNALS_OFFSET + SIGNAL_SLOTS * Long.BYTES;
    static final long PAD_BYTES = 64 << 10;
    /**
     * Start of the pad's bytes for users' kernels (DeviceMemory.userPadOffset): everything above is
     * never read or written by the kernels of symmem4j_kernels.cu, whose last word is the put
     * kernel's done counter (4 bytes at {@link #DONE_COUNTER_OFFSET}).
     */
    static final long USER_PAD_OFFSET = 40 << 10;
    static final long USER_PAD_BYTES = PAD_BYTES - USER_PAD_OFFSET;

    static {
        if (DONE_COUNTER_OFFSET + Long.BYTES > USER_PAD_OFFSET || USER_PAD_OFFSET % 16 != 0) {
            throw Invariants.violated("GPU signal-pad layout: done counter at " + DONE_COUNTER_OFFSET
                    + " overlaps the user bytes at " + USER_PAD_OFFSET + " (or they are not 16-byte aligned)");
        }
    }
    static final int BLOCK_THREADS = 512;

    private static volatile byte[] image;
    /**
     * The kernels of each device's primary context, by device ordinal: loaded once per process and
     * kept, shared by every rank there (see {@link #release} for why they are never unloaded). Guarded
     * by the class's lock.
     */
    private static final Map<Integer, CudaKernels> BY_DEVICE = new HashMap<>();

    private final int ordinal;
    /** Ranks holding these kernels ({@link #acquire} minus {@link #release}); guarded by the class's lock. */
    private int users;

    private final MemorySegment[] functions = new MemorySegment[Kernel.values().length];
    private final int[] blocksPerMultiprocessor = new int[Kernel.values().length];
    private final MemorySegment module;
    /** Whether the driver loads kernels lazily (empty: cannot tell), for reports. */
    final Optional<Boolean> lazyLoading;

    /**
     * Whether the fatbin is on the class path.
     *
     * @return true if {@link #RESOURCE} exists
     */
    public static boolean present() {
        return CudaKernels.class.getResource(RESOURCE) != null;
    }

    private static byte[] image() {
        byte[] i = image;
        if (i == null) {
            try (InputStream in = CudaKernels.class.getResourceAsStream(RESOURCE)) {
                if (in == null) {
                    throw new CudaUnavailableException("symmem4j CUDA kernels are absent: " + RESOURCE + " is not on the class"
                            + " path (the kernels module was built without nvcc; fix: build on a machine with"
                            + " CUDA 13's nvcc,"
                            + " or use Algorithm.NCCL)");
                }
                i = in.readAllBytes();
                image = i;
            } catch (IOException e) {
                throw new CudaUnavailableException("cannot read " + RESOURCE + ": " + e + " (the symmem4j-parallel jar"
                        + " holds it; fix: the jar on the class path is damaged, rebuild it or fetch it again)");
            }
        }
        return i;
    }

    /**
     * The kernels of device {@code ordinal}, loaded into its primary context (current on the calling
     * thread) at the first call and shared by every rank, group and communicator on that device after;
     * each call is paired with a {@link #release} when the rank closes.
     *
     * <p>Why once per device and fully: ranks on one GPU share its primary context, and under lazy
     * loading (CUDA's default since 12.2) a function is finished loading at its first launch, which
     * may synchronize the context — wait for every kernel running in it. A rank whose first launch of
     * a kernel came while a peer's kernel spun in that context waiting for this very rank would wait
     * for the peer, and the peer for it: a hang that needs no shortage of multiprocessors (the
     * programming guide's Lazy Loading section describes it). A module per rank per group, as before,
     * also meant a load (and so possibly a context synchronization) with every new group. So the
     * module is loaded once per device, every function is loaded completely (cuFuncLoad) and checked
     * (cuFuncIsLoaded) before any of our kernels can run there, and the occupancy of each is read now.
     */
    static synchronized CudaKernels acquire(CudaDriver driver, int ordinal) {
        CudaKernels k = BY_DEVICE.get(ordinal);
        if (k == null) {
            // the module stays loaded for the process (see release): a retain of the primary context of its
            // own keeps the module's context, and so its handle, alive after the last rank lets go
            int device = driver.device(ordinal);
            driver.retainPrimaryContext(device);
            try {
                k = new CudaKernels(driver, ordinal);
            } catch (RuntimeException e) {
                driver.releasePrimaryContext(device);
                throw e;
            }
            BY_DEVICE.put(ordinal, k);
        }
        k.users++;
        return k;
    }

    /**
     * Gives back one {@link #acquire}. The module stays loaded when the last rank gives it back, and
     * the next group on the device uses it again, as NCCL's and PyTorch's kernels stay loaded for the
     * process: the CUDA 13 driver (580) loses about 45 KiB of device memory each time a module whose
     * functions were loaded (cuFuncLoad, or eager module loading) is unloaded, so unloading at the
     * last release and loading again with the next group leaked 2 MiB every 25 groups (measured on
     * an H100 with a probe: module load + unload alone loses nothing under lazy loading, with
     * {@code CUDA_MODULE_LOADING=EAGER} 22 MiB in 500 cycles, and our acquire + release 24 MiB). The
     * cost is the module's code, under 1 MiB per GPU, and one retain of the device's primary context
     * until the process exits.
     */
    static synchronized void release(CudaDriver driver, CudaKernels kernels) {
        if (kernels.users < 1) {
            throw Invariants.violated("symmem4j kernels of device " + kernels.ordinal + " released more often than"
                    + " acquired: users=" + kernels.users + " expected >= 1");
        }
        kernels.users--;
    }

    /** The kernels loaded on device {@code ordinal}, or null before any rank used it (tests). */
    static synchronized CudaKernels loaded(int ordinal) {
        return BY_DEVICE.get(ordinal);
    }

    /** Ranks holding the kernels of device {@code ordinal} (tests: 0 once every rank there is closed). */
    static synchronized int users(int ordinal) {
        CudaKernels k = BY_DEVICE.get(ordinal);
        return k == null ? 0 : k.users;
    }

    /** Loads the kernels into the calling thread's current context. */
    private CudaKernels(CudaDriver driver, int ordinal) {
        this.ordinal = ordinal;
        module = loadImage(driver, image());
        try {
            lazyLoading = driver.lazyLoading();
            for (Kernel k : Kernel.values()) {
                MemorySegment f = loadFunctionFully(driver, module, k.symbol);
                functions[k.ordinal()] = f;
                blocksPerMultiprocessor[k.ordinal()] = driver.maxActiveBlocksPerMultiprocessor(f, k.blockThreads);
            }
        } catch (RuntimeException e) {
            driver.unloadModule(module);
            throw e;
        }
    }

    /**
     * Loads a module image (fatbin, cubin, or PTX text) into the current context: the bytes are
     * copied into native memory with a terminating NUL, which PTX text needs and binary images ignore.
     */
    static MemorySegment loadImage(CudaDriver driver, byte[] bytes) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment img = a.allocate(bytes.length + 1L, 16);
            MemorySegment.copy(bytes, 0, img, java.lang.foreign.ValueLayout.JAVA_BYTE, 0, bytes.length);
            return driver.loadModule(img);
        }
    }

    /**
     * Looks up {@code symbol} in {@code module} and finishes loading it now (cuFuncLoad), checked
     * with cuFuncIsLoaded: no later launch of it may load it while a peer's kernel spins in the
     * shared context (see {@link #acquire}).
     */
    static MemorySegment loadFunctionFully(CudaDriver driver, MemorySegment module, String symbol) {
        MemorySegment f = driver.function(module, symbol);
        driver.loadFunction(f);
        if (!driver.functionLoaded(f).orElse(true)) {
            throw new CudaUnavailableException("kernel " + symbol + " is not fully loaded after cuFuncLoad:"
                    + " expected=CU_FUNCTION_LOADING_STATE_LOADED found=UNLOADED (its first launch would load it, which"
                    + " may wait for peers' running kernels; fix: run with CUDA_MODULE_LOADING=EAGER)");
        }
        return f;
    }

    MemorySegment function(Kernel kernel) {
        return functions[kernel.ordinal()];
    }

    /** The occupancy calculator's blocks per multiprocessor of each kernel at its block size, by {@link Kernel} ordinal. */
    int[] blocksPerMultiprocessor() {
        return blocksPerMultiprocessor.clone();
    }
}
