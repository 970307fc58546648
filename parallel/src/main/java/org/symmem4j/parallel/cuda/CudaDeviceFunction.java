package org.symmem4j.parallel.cuda;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.Arrays;
import java.util.Optional;
import org.symmem4j.parallel.DeviceFunction;
import org.symmem4j.parallel.KernelArguments;
import org.symmem4j.parallel.cuda.ffi.CudaDriver;

/**
 * A user's kernel on one rank ({@link CudaDeviceModule#function}). Launched plainly
 * ({@code cuLaunchKernel}, never with programmatic dependent launch: a user's kernel need not wait
 * for its predecessor itself) on the rank's stream, so it starts after the previous work on the
 * stream has completed and its writes are visible, and the next work starts after it has completed.
 */
final class CudaDeviceFunction implements DeviceFunction {

    private final CudaDeviceModule module;
    private final String symbol;
    private final MemorySegment function;
    private final int maxThreadsPerBlock;
    /** The parameters' byte sizes, or null when the driver cannot say (before CUDA 12.4). */
    private final long[] parameterSizes;

    CudaDeviceFunction(CudaDeviceModule module, String symbol, MemorySegment function) {
        this.module = module;
        this.symbol = symbol;
        this.function = function;
        CudaDriver d = module.kernels().driver();
        this.maxThreadsPerBlock = d.functionAttribute(function, CudaDriver.FUNCTION_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
        Optional<long[]> sizes = d.parameterSizes(function);
        this.parameterSizes = sizes.orElse(null);
    }

    @Override
    public String symbol() {
        return symbol;
    }

    @Override
    public int maxThreadsPerBlock() {
        return maxThreadsPerBlock;
    }

    @Override
    public int parameterCount() {
        return parameterSizes == null ? -1 : parameterSizes.length;
    }

    /**
     * With one rank on the GPU, every multiprocessor's share; with ranks sharing it, the budget of
     * {@link LaunchBudget#maxBlocks}: the same competing grids as the collectives', counted in slots of
     * the larger of this kernel's blocks and the collectives' largest (the smaller occupancy), so a
     * user's grid and the peers' collective grids fit together.
     */
    @Override
    public int maxCoResidentBlocks(int blockThreads, int dynamicSharedBytes) {
        checkBlock(blockThreads, dynamicSharedBytes);
        CudaRank rank = module.kernels().rank();
        int perMultiprocessor = module.kernels().driver().maxActiveBlocksPerMultiprocessor(function, blockThreads,
                dynamicSharedBytes);
        if (rank.ranksOnDevice == 1) {
            return (int) Math.min(Integer.MAX_VALUE, (long) rank.multiprocessors * perMultiprocessor);
        }
        if (rank.kernels != null) {
            perMultiprocessor = Math.min(perMultiprocessor, Arrays.stream(rank.kernels.blocksPerMultiprocessor()).min().orElseThrow());
        }
        return LaunchBudget.maxBlocks(rank.multiprocessors, perMultiprocessor, rank.ranksOnDevice,
                LaunchBudget.gridsInFlightPerStream(rank.programmaticLaunch));
    }

    private void checkBlock(int blockThreads, int dynamicSharedBytes) {
        if (blockThreads < 1 || blockThreads > maxThreadsPerBlock || dynamicSharedBytes < 0) {
            throw new IllegalArgumentException("block of kernel " + symbol + ": blockThreads=" + blockThreads
                    + " dynamicSharedBytes=" + dynamicSharedBytes + " expected 1 <= blockThreads <= " + maxThreadsPerBlock
                    + " (the kernel's maxThreadsPerBlock: its registers and __launch_bounds__) and dynamicSharedBytes >= 0;"
                    + " fix: launch blocks of at most " + maxThreadsPerBlock + " threads)");
        }
    }

    @Override
    public void launch(int gridX, int gridY, int gridZ, int blockX, int blockY, int blockZ, int dynamicSharedBytes,
                       KernelArguments arguments) {
        module.checkLoaded("launch " + symbol);
        if (gridX < 1 || gridY < 1 || gridZ < 1 || blockX < 1 || blockY < 1 || blockZ < 1) {
            throw new IllegalArgumentException("launch of " + symbol + ": grid=" + gridX + "x" + gridY + "x" + gridZ
                    + " block=" + blockX + "x" + blockY + "x" + blockZ + " expected every dimension >= 1 (fix: pass 1"
                    + " for a dimension the kernel does not use)");
        }
        long blockThreads = (long) blockX * blockY * blockZ;
        checkBlock((int) Math.min(Integer.MAX_VALUE, blockThreads), dynamicSharedBytes);
        checkArguments(arguments);
        CudaRank rank = module.kernels().rank();
        long blocks = (long) gridX * gridY * gridZ;
        if (rank.ranksOnDevice > 1) {
            int limit = maxCoResidentBlocks((int) blockThreads, dynamicSharedBytes);
            if (blocks > limit) {
                throw new IllegalArgumentException("grid of " + symbol + " too large for ranks sharing a GPU: blocks="
                        + blocks + " (" + gridX + "x" + gridY + "x" + gridZ + ") at blockThreads=" + blockThreads
                        + " expected <= " + limit + " (ranksOnDevice=" + rank.ranksOnDevice + " on " + rank.deviceName
                        + ": every rank's grids must be resident at once, or a block waiting for a peer's block that"
                        + " cannot start never ends; fix: launch at most maxCoResidentBlocks(" + blockThreads + ", "
                        + dynamicSharedBytes + ") blocks and loop over the data)");
            }
        }
        CudaDriver d = module.kernels().driver();
        rank.makeCurrent("launch " + symbol);
        try (Arena a = Arena.ofConfined()) {
            MemorySegment params = a.allocate(ValueLayout.ADDRESS, Math.max(1, arguments.count()));
            for (int i = 0; i < arguments.count(); i++) {
                byte[] value = arguments.bytes(i);
                MemorySegment slot = a.allocate(value.length, 16);
                MemorySegment.copy(value, 0, slot, ValueLayout.JAVA_BYTE, 0, value.length);
                params.setAtIndex(ValueLayout.ADDRESS, i, slot);
            }
            d.launch(function, gridX, gridY, gridZ, blockX, blockY, blockZ, dynamicSharedBytes, rank.stream, params);
        }
    }

    /** Count and byte sizes against the kernel's parameters, where the driver tells them. */
    private void checkArguments(KernelArguments arguments) {
        if (parameterSizes == null) {
            return; // before CUDA 12.4 the driver cannot say; a mismatch is then the kernel's undefined behaviour
        }
        if (arguments.count() != parameterSizes.length) {
            throw new IllegalArgumentException("arguments of " + symbol + ": count=" + arguments.count() + " expected="
                    + parameterSizes.length + " (the kernel's parameters; found " + arguments + "; fix: pass one"
                        + " argument per kernel parameter, in the kernel's order)");
        }
        for (int i = 0; i < parameterSizes.length; i++) {
            if (arguments.byteSize(i) != parameterSizes[i]) {
                throw new IllegalArgumentException("argument " + i + " of " + symbol + ": " + arguments.kind(i) + " of "
                        + arguments.byteSize(i) + " bytes, expected a parameter of " + parameterSizes[i] + " bytes"
                        + " (pointer/int64 are 8, int32/float32 4; the kernel's parameter sizes are "
                        + Arrays.toString(parameterSizes) + "; fix: pass argument " + i + " with the type the"
                            + " kernel declares)");
            }
        }
    }
}
