package org.symmem4j.parallel;

/**
 * A kernel of a user's {@link DeviceModule}, launched on this rank's stream in order with the
 * collectives (and captured with them by {@link DeviceCommunicator#capture}).
 */
public interface DeviceFunction {

    /**
     * The kernel's symbol.
     *
     * @return the name it was looked up by
     */
    String symbol();

    /**
     * The most threads one block of this kernel may have (its registers and {@code __launch_bounds__}).
     *
     * @return threads per block
     */
    int maxThreadsPerBlock();

    /**
     * The most blocks of this kernel whose grid is guaranteed room on this rank's GPU while the grids
     * of the other ranks sharing the GPU run too — what a kernel that waits on its peers needs (block
     * b spinning for block b of a peer that cannot get a multiprocessor would never end). With one
     * rank per GPU: the multiprocessors times the occupancy calculator's blocks per multiprocessor.
     * With ranks sharing a GPU, the same budget as the collectives' (see the CUDA transport's
     * {@code LaunchBudget}), which launches enforce.
     *
     * @param blockThreads       threads per block
     * @param dynamicSharedBytes dynamic shared memory per block, bytes
     * @return blocks, 0 when not even one fits
     */
    int maxCoResidentBlocks(int blockThreads, int dynamicSharedBytes);

    /**
     * The number of parameters the kernel declares, where the driver can tell (CUDA 12.4+).
     *
     * @return the count, or -1 when the driver cannot say
     */
    int parameterCount();

    /**
     * Enqueues the kernel on this rank's stream with a 1-D grid and block, no dynamic shared memory.
     *
     * @param gridX       blocks
     * @param blockX      threads per block
     * @param arguments   the kernel's arguments in parameter order
     * @throws IllegalArgumentException when the arguments do not match the parameters (count or
     *                                  byte sizes, where the driver can tell), the block is too large,
     *                                  or, with ranks sharing a GPU, the grid exceeds
     *                                  {@link #maxCoResidentBlocks}
     * @throws IllegalStateException    when the module or the rank was closed
     */
    default void launch(int gridX, int blockX, KernelArguments arguments) {
        launch(gridX, 1, 1, blockX, 1, 1, 0, arguments);
    }

    /**
     * Enqueues the kernel on this rank's stream.
     *
     * @param gridX              blocks in x
     * @param gridY              blocks in y
     * @param gridZ              blocks in z
     * @param blockX             threads per block in x
     * @param blockY             threads per block in y
     * @param blockZ             threads per block in z
     * @param dynamicSharedBytes dynamic shared memory per block, bytes
     * @param arguments          the kernel's arguments in parameter order
     * @throws IllegalArgumentException as {@link #launch(int, int, KernelArguments)}
     * @throws IllegalStateException    when the module or the rank was closed
     */
    void launch(int gridX, int gridY, int gridZ, int blockX, int blockY, int blockZ, int dynamicSharedBytes,
                KernelArguments arguments);
}
