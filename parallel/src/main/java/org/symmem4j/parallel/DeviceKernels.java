package org.symmem4j.parallel;

/**
 * Kernels of the caller's own, run on this rank's GPU in order with the collectives — what PyTorch's
 * symmetric-memory document shows with {@code buffer_ptrs} and {@code signal_pad_ptrs}. Reached
 * through {@link Communicator#unwrap Communicator.unwrap(DeviceKernels.class)} (empty on host
 * transports).
 *
 * <pre>{@code
 * DeviceKernels kernels = comm.unwrap(DeviceKernels.class).orElseThrow();
 * DeviceMemory peers = memory.unwrap(DeviceMemory.class).orElseThrow();
 * try (DeviceModule module = kernels.load(fatbinBytes)) {            // collective
 *     DeviceFunction allReduce = module.function("my_one_shot_f32");  // collective
 *     allReduce.launch(blocks, 512, new KernelArguments()
 *             .pointer(peers.bufferPointerTable()).pointer(peers.signalPadPointerTable())
 *             .pointer(out).int64(count).int32(group.rank()).int32(group.worldSize()));
 *     comm.allReduce(memory, 0, count, DType.FLOAT32, ReduceOp.SUM, Algorithm.ONE_SHOT); // runs after it
 * }
 * }</pre>
 *
 * <p>A launch is enqueued on this rank's stream ({@link DeviceCommunicator#stream()}): it runs after
 * everything enqueued there before it (collectives, copies, puts) and before everything after it,
 * and inside {@link DeviceCommunicator#capture} it goes into the same graph. A kernel that reads or
 * writes peers' memory synchronizes with them itself, through the signal pads' user bytes
 * ({@link DeviceMemory#userPadOffset()}).
 */
public interface DeviceKernels {

    /**
     * Collective: loads a module image into this rank's GPU context. Every rank calls it with the
     * same image; each first waits for its own stream and for the other ranks (so that no kernel of
     * the group runs while the driver loads: ranks sharing a GPU share its context, and loading may
     * wait for the kernels running there).
     *
     * @param image PTX text, a cubin, or a fatbin (as {@code nvcc -fatbin} writes it) holding code
     *              for this GPU
     * @return the module; close it (collectively) to unload it
     * @throws SymmemException on every rank when any rank's driver refuses the image (says which
     *                         rank, the driver's error and what images fit this GPU)
     * @throws IllegalArgumentException when {@code image} is empty
     */
    DeviceModule load(byte[] image);

    /**
     * This rank's GPU's compute capability, for choosing an image.
     *
     * @return e.g. {@code 90} for sm_90 (H100, H200)
     */
    int computeCapability();
}
