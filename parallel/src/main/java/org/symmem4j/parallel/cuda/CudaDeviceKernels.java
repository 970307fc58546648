package org.symmem4j.parallel.cuda;

import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Objects;
import java.util.function.Supplier;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.DeviceKernels;
import org.symmem4j.parallel.DeviceModule;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.SymmemException;
import org.symmem4j.parallel.cuda.ffi.CudaDriver;
import org.symmem4j.parallel.cuda.ffi.CudaException;

/**
 * {@link DeviceKernels} of one rank of a {@link CudaCommunicator}: users' modules loaded into the
 * rank's context, their kernels launched on the rank's stream (see {@link CudaDeviceFunction}).
 *
 * <p>Loads and unloads are collective and quiesce the group first ({@link Communicator#barrier}: each
 * rank waits for its stream, then for every other rank), because ranks sharing a GPU share its
 * primary context and the driver may wait, while it loads or unloads, for every kernel running in
 * that context — among them a peer's kernel spinning until this rank's kernel arrives.
 * The ranks then agree on the outcome, so a refusal on one rank is an exception on all of them.
 */
final class CudaDeviceKernels implements DeviceKernels {

    /** {@code CUDA_ERROR_NOT_FOUND}: cuModuleGetFunction's answer for a missing symbol. */
    static final int NOT_FOUND = 500;

    private final CudaDriver driver;
    private final CudaRank rank;
    private final Group group;
    private final Communicator control;

    CudaDeviceKernels(CudaDriver driver, CudaRank rank, Group group, Communicator control) {
        this.driver = driver;
        this.rank = rank;
        this.group = group;
        this.control = control;
    }

    @Override
    public int computeCapability() {
        return driver.attribute(rank.device, CudaDriver.ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR) * 10
                + driver.attribute(rank.device, CudaDriver.ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
    }

    @Override
    public DeviceModule load(byte[] image) {
        Objects.requireNonNull(image, "image");
        if (image.length == 0) {
            throw new IllegalArgumentException("module image of 0 bytes (expected PTX text, a cubin or a"
                    + " fatbin; fix: pass nvcc's output)");
        }
        rank.checkOpen("load a module");
        java.lang.foreign.MemorySegment module = collectively("load a module of " + image.length + " bytes", () -> {
            try {
                rank.makeCurrent("load a module");
                return CudaKernels.loadImage(driver, image);
            } catch (CudaException e) {
                throw new SymmemException("module image refused by the driver: bytes=" + image.length + " format="
                        + format(image) + " device=" + rank.deviceName + " sm_" + computeCapability() + " error="
                        + e.getMessage() + " (expected PTX text, a cubin or a fatbin holding SASS for sm_"
                        + computeCapability() + " or PTX of an equal or older compute capability; fix: build it with"
                        + " nvcc -fatbin -gencode arch=compute_" + computeCapability() + ",code=sm_" + computeCapability()
                        + ")", e);
            }
        }, m -> {
            rank.makeCurrent("unload a module");
            driver.unloadModule(m);
        });
        CudaDeviceModule m = new CudaDeviceModule(this, module);
        try {
            rank.track(m);
        } catch (RuntimeException e) {
            m.unload();
            throw e;
        }
        return m;
    }

    /** What an image looks like, for messages: fatbin, ELF cubin, PTX text or unknown. */
    static String format(byte[] image) {
        if (image.length >= 4 && (image[0] & 0xff) == 0x50 && (image[1] & 0xff) == 0xed && (image[2] & 0xff) == 0x55
                && (image[3] & 0xff) == 0xba) {
            return "fatbin";
        }
        if (image.length >= 4 && image[0] == 0x7f && image[1] == 'E' && image[2] == 'L' && image[3] == 'F') {
            return "cubin(ELF)";
        }
        String head = new String(image, 0, Math.min(image.length, 4096), StandardCharsets.ISO_8859_1);
        if (head.contains(".version") && head.contains(".target")) {
            return "PTX";
        }
        return "unknown(first bytes not a fatbin, ELF or PTX header)";
    }

    /** Undoes a step that succeeded on this rank when another rank's failed. */
    interface Undo<T> {
        void undo(T done);
    }

    /**
     * Quiesces the group, runs {@code step} on this rank, and agrees on the outcome: returns its
     * result when every rank succeeded; otherwise undoes it where it succeeded and throws on every
     * rank, naming each failing rank and its reason.
     */
    <T> T collectively(String what, Supplier<T> step, Undo<T> undo) {
        control.barrier(); // every rank's stream has drained: no kernel of the group runs in the context
        T result = null;
        String failure = "";
        RuntimeException local = null;
        try {
            result = step.get();
        } catch (RuntimeException e) {
            local = e;
            failure = e.getMessage() == null ? e.toString() : e.getMessage();
        }
        List<byte[]> all = group.allGatherBytes("cuda-user-kernels", failure.getBytes(StandardCharsets.UTF_8));
        StringBuilder failed = new StringBuilder();
        for (int r = 0; r < all.size(); r++) {
            if (all.get(r).length > 0) {
                failed.append(failed.isEmpty() ? "" : "; ").append("rank=").append(r).append(": ")
                        .append(new String(all.get(r), StandardCharsets.UTF_8));
            }
        }
        if (failed.isEmpty()) {
            return result;
        }
        if (result != null) {
            undo.undo(result);
        }
        SymmemException e = new SymmemException("cannot " + what + " on every rank: " + failed + " (fix: act on"
                    + " the failing ranks' reasons above; every rank must pass the same module image)");
        if (local != null) {
            e.addSuppressed(local);
        }
        throw e;
    }

    CudaDriver driver() {
        return driver;
    }

    CudaRank rank() {
        return rank;
    }

    Communicator control() {
        return control;
    }
}
