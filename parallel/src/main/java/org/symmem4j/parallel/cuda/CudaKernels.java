package org.symmem4j.parallel.cuda;

import java.io.IOException;
import java.io.InputStream;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.HashMap;
import java.util.Map;

/**
 * symmem4j's CUDA kernels: the fatbin that {@code kernels/} builds with nvcc (SASS for sm_80,
 * sm_90, sm_100 and PTX), read from the class path and loaded into one context with
 * {@code cuModuleLoadData}. Without the resource (built on a machine without nvcc),
 * {@link #present()} is false and GPU collectives other than NCCL say so.
 */
public final class CudaKernels {

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
    static final int BLOCK_THREADS = 512;

    private static volatile byte[] image;

    private final Map<String, MemorySegment> functions = new HashMap<>();
    private final MemorySegment module;

    /** Whether the fatbin is on the class path. */
    public static boolean present() {
        return CudaKernels.class.getResource(RESOURCE) != null;
    }

    private static byte[] image() {
        byte[] i = image;
        if (i == null) {
            try (InputStream in = CudaKernels.class.getResourceAsStream(RESOURCE)) {
                if (in == null) {
                    throw new CudaUnavailableException("symmem4j CUDA kernels are absent: " + RESOURCE + " is not on the class"
                            + " path (the kernels module was built without nvcc; build on a machine with CUDA 13's nvcc,"
                            + " or use Algorithm.NCCL)");
                }
                i = in.readAllBytes();
                image = i;
            } catch (IOException e) {
                throw new CudaUnavailableException("cannot read " + RESOURCE + ": " + e);
            }
        }
        return i;
    }

    /** Loads the kernels into the calling thread's current context. */
    CudaKernels(CudaDriver driver) {
        byte[] bytes = image();
        try (Arena a = Arena.ofConfined()) {
            MemorySegment img = a.allocate(bytes.length + 1L, 16);
            MemorySegment.copy(bytes, 0, img, java.lang.foreign.ValueLayout.JAVA_BYTE, 0, bytes.length);
            module = driver.loadModule(img);
        }
        for (String name : new String[] {"symmem_one_shot_f32", "symmem_one_shot_bf16", "symmem_one_shot_ll_f32",
            "symmem_one_shot_ll_bf16", "symmem_two_shot_f32", "symmem_two_shot_bf16", "symmem_two_shot_push_f32",
            "symmem_two_shot_push_bf16", "symmem_reduce_scatter_f32", "symmem_reduce_scatter_bf16", "symmem_all_gather",
            "symmem_put_signal", "symmem_wait_signal", "symmem_wait_signal_consume"}) {
            functions.put(name, driver.function(module, name));
        }
    }

    MemorySegment function(String name) {
        MemorySegment f = functions.get(name);
        if (f == null) {
            throw new IllegalArgumentException("no kernel " + name);
        }
        return f;
    }
}
