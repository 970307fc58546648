package org.symmem4j.parallel.cuda;

import org.symmem4j.parallel.Invariants;
import org.symmem4j.parallel.SymmemException;

/**
 * How many blocks one rank may launch per grid, so that the grids of every rank sharing its GPU can
 * be resident at once — or, where even one block per grid cannot be, a refusal before any kernel runs.
 *
 * <h2>Why</h2>
 * Our kernels wait on their peers on the GPU: block b of a rank spins at a barrier until block b of
 * every peer arrives (ONE_SHOT, TWO_SHOT and its write-only variant in every scratch round,
 * reduce-scatter, all-gather), a LL thread spins until each peer's word carries the epoch, a
 * signal wait spins until a peer's put lands. Blocks are never preempted for other blocks, so a peer
 * block that cannot get onto a multiprocessor while ours spin means a hang. With one rank per GPU
 * the partners are on other GPUs and each rank's grid only has to fit its own GPU. Ranks sharing a
 * GPU (threads of one JVM, each with its own stream in the device's primary context) compete for the
 * same multiprocessors, and the grids sized for a whole GPU no longer all fit.
 *
 * <h2>What may hold space at once</h2>
 * A stream holds at most {@code g} grids on the GPU at a time: its running kernel and, with
 * programmatic dependent launch (PDL, sm_90+), the next kernel, launched once every block of the
 * running one has started and parked at {@code griddepcontrol.wait} (g = 2; without PDL g = 1; the
 * grid after that launches only once the first has finished). Take the oldest unfinished collective
 * and a rank X whose grid for it is not yet fully resident: X's next grid is not launched (its
 * trigger needs all of X's blocks started), and every other rank on the GPU may hold its grid for
 * that collective and its next one. X's grid fits if {@code (n - 1) * g + 1} grids fit, n the ranks on
 * the GPU. Grids of different kernels differ in size, so space is counted in slots: a multiprocessor
 * holds {@code k} slots, k the smallest number of blocks per multiprocessor over all our kernels (the
 * CUDA occupancy calculator); any block of ours needs no more of any resource (registers, threads,
 * shared memory, block slots) than the largest, and k blocks of the largest fit, so any k of ours fit,
 * and no multiprocessor is left with room that no block can use. Hence, per grid:
 * {@code blocks <= multiprocessors * k / ((n - 1) * g + 1)}. With n = 1 this is the kernel's own
 * occupancy times the multiprocessors, the grid TWO_SHOT has always used.
 *
 * <h2>What CUDA does not promise, and what we rely on</h2>
 * CUDA guarantees no concurrency between kernels of different streams: the programming guide calls a
 * program that takes concurrent execution as a guarantee incorrect (Lazy Loading, "Concurrent
 * execution"), and cuda.h says even kernels of disjoint green contexts need not run concurrently or
 * make forward progress, because streams share hardware connections ({@code CUDA_DEVICE_MAX_CONNECTIONS},
 * default 8). Only a cooperative launch guarantees co-residency, and only within one grid. What we rely
 * on, and where it is checked:
 * <ul>
 *   <li>the block scheduler places pending blocks of launched grids wherever room is free (this
 *       budget makes room for all of them);</li>
 *   <li>each rank's stream gets a hardware connection of its own — streams are assigned to
 *       connections in turn, and a kernel queued behind a peer's kernel that waits for it would never
 *       start: refused here unless a GPU has fewer ranks than {@code CUDA_DEVICE_MAX_CONNECTIONS}, which
 *       leaves one connection for the copies the host issues on the default stream (an abort's poison
 *       signal among them: queued behind a spinning peer's kernel it never lands, and every rank's next
 *       driver call waits behind it — 8 ranks on one H100 with the default 8 hung that way);</li>
 *   <li>no kernel is loaded while a peer's kernel spins in the same context (a lazy load may
 *       synchronize the context): {@link CudaKernels} loads every function fully, once per device,
 *       before any of our kernels can run there;</li>
 *   <li>nothing else fills the GPU with work that waits on ours (other groups' collectives on the
 *       same GPU at the same time are not counted: one group per GPU at a time).</li>
 * </ul>
 */
final class LaunchBudget {

    /** CUDA's default number of hardware connections per device when {@code CUDA_DEVICE_MAX_CONNECTIONS} is unset. */
    static final int DEFAULT_MAX_CONNECTIONS = 8;

    private final String device;
    private final int multiprocessors;
    private final int ranksOnDevice;
    private final int gridsInFlight;
    private final int[] limits = new int[Kernel.values().length];

    /**
     * Pure: how many ranks of a world of {@code worldSize} use device {@code ordinal}, rank r using
     * device r mod deviceCount.
     */
    static int ranksOnDevice(int worldSize, int deviceCount, int ordinal) {
        if (worldSize < 1 || deviceCount < 1 || ordinal < 0 || ordinal >= deviceCount) {
            throw Invariants.violated("worldSize=" + worldSize + " deviceCount=" + deviceCount + " ordinal="
                    + ordinal + " expected worldSize >= 1, deviceCount >= 1, 0 <= ordinal < deviceCount");
        }
        return worldSize / deviceCount + (ordinal < worldSize % deviceCount ? 1 : 0);
    }

    /** Pure: grids one stream may have holding multiprocessor space at once: 2 with programmatic dependent launch, else 1. */
    static int gridsInFlightPerStream(boolean programmaticLaunch) {
        return programmaticLaunch ? 2 : 1;
    }

    /**
     * Pure: grids that may hold space while one rank's grid is still becoming resident: every other
     * rank's {@code gridsInFlightPerStream}, plus that grid.
     */
    static int competingGrids(int ranksOnDevice, int gridsInFlightPerStream) {
        return (ranksOnDevice - 1) * gridsInFlightPerStream + 1;
    }

    /**
     * Pure: the largest grid (blocks, at most {@link CudaKernels#MAX_BLOCKS}) one rank may launch so
     * that {@link #competingGrids} grids of that size fit in {@code multiprocessors *
     * blocksPerMultiprocessor} slots; 0 when not even one block each fits.
     *
     * @param blocksPerMultiprocessor the kernel's own occupancy when the rank is alone on its GPU;
     *        with ranks sharing it, the smallest occupancy over all kernels (see the class comment)
     */
    static int maxBlocks(int multiprocessors, int blocksPerMultiprocessor, int ranksOnDevice, int gridsInFlightPerStream) {
        if (multiprocessors < 1 || blocksPerMultiprocessor < 0 || ranksOnDevice < 1 || gridsInFlightPerStream < 1) {
            throw Invariants.violated("multiprocessors=" + multiprocessors + " blocksPerMultiprocessor="
                    + blocksPerMultiprocessor + " ranksOnDevice=" + ranksOnDevice + " gridsInFlightPerStream="
                    + gridsInFlightPerStream + " expected multiprocessors >= 1, blocksPerMultiprocessor >= 0,"
                    + " ranksOnDevice >= 1, gridsInFlightPerStream >= 1");
        }
        long slots = (long) multiprocessors * blocksPerMultiprocessor;
        return (int) Math.min(CudaKernels.MAX_BLOCKS, slots / competingGrids(ranksOnDevice, gridsInFlightPerStream));
    }

    /**
     * Pure: the hardware connections CUDA gives each device, from the value of
     * {@code CUDA_DEVICE_MAX_CONNECTIONS} (null when unset): 8 by default; values CUDA does not take
     * (not a number in 1..32) count as the default.
     */
    static int maxConnections(String environmentValue) {
        if (environmentValue == null || environmentValue.isBlank()) {
            return DEFAULT_MAX_CONNECTIONS;
        }
        try {
            int n = Integer.parseInt(environmentValue.trim());
            return n >= 1 && n <= 32 ? n : DEFAULT_MAX_CONNECTIONS;
        } catch (NumberFormatException e) {
            return DEFAULT_MAX_CONNECTIONS;
        }
    }

    /**
     * One rank's budget, or a refusal ({@link SymmemException}) saying what does not fit.
     *
     * @param device the GPU, for messages
     * @param blocksPerMultiprocessor the occupancy calculator's blocks per multiprocessor of each
     *        {@link Kernel}, by ordinal, at its {@link Kernel#blockThreads}
     * @param ranksOnDevice ranks of the group on this rank's GPU
     * @param busiestDeviceRanks ranks of the group on its busiest GPU: every rank checks that one, so
     *        all ranks of a machine of equal GPUs refuse together instead of leaving some waiting
     * @param maxConnections {@link #maxConnections} of the environment
     */
    static LaunchBudget of(String device, int multiprocessors, int[] blocksPerMultiprocessor, int ranksOnDevice,
                           int busiestDeviceRanks, boolean programmaticLaunch, int maxConnections) {
        return new LaunchBudget(device, multiprocessors, blocksPerMultiprocessor, ranksOnDevice, busiestDeviceRanks,
                programmaticLaunch, maxConnections);
    }

    private LaunchBudget(String device, int multiprocessors, int[] blocksPerMultiprocessor, int ranksOnDevice,
                         int busiestDeviceRanks, boolean programmaticLaunch, int maxConnections) {
        Kernel[] kernels = Kernel.values();
        if (blocksPerMultiprocessor.length != kernels.length) {
            throw Invariants.violated("blocksPerMultiprocessor has " + blocksPerMultiprocessor.length
                    + " entries, expected one per kernel: " + kernels.length);
        }
        this.device = device;
        this.multiprocessors = multiprocessors;
        this.ranksOnDevice = ranksOnDevice;
        this.gridsInFlight = gridsInFlightPerStream(programmaticLaunch);
        int fewest = Integer.MAX_VALUE;
        Kernel fewestKernel = null;
        for (Kernel k : kernels) {
            if (blocksPerMultiprocessor[k.ordinal()] < fewest) {
                fewest = blocksPerMultiprocessor[k.ordinal()];
                fewestKernel = k;
            }
        }
        if (fewest < 1) {
            throw new SymmemException("kernel " + fewestKernel.symbol + " cannot run on " + device + ": blocksPerMultiprocessor="
                    + fewest + " at blockThreads=" + fewestKernel.blockThreads + " expected >= 1 (the kernels were built"
                    + " for sm_80, sm_90 and sm_100; fix: use Algorithm.NCCL on this GPU)");
        }
        int busiest = Math.max(ranksOnDevice, busiestDeviceRanks);
        if (busiest > 1 && busiest + 1 > maxConnections) {
            throw new SymmemException("ranks sharing a GPU need a hardware work queue each, and the host's copies one"
                    + " more: ranksOnDevice=" + busiest + " CUDA_DEVICE_MAX_CONNECTIONS=" + maxConnections
                    + " expected ranksOnDevice + 1 <= CUDA_DEVICE_MAX_CONNECTIONS (streams beyond it share queues, and"
                    + " work queued behind a peer's kernel that waits for it never starts; fix: set"
                    + " CUDA_DEVICE_MAX_CONNECTIONS=32 in the environment before the JVM starts, or run fewer ranks per GPU)");
        }
        int sharedLimit = maxBlocks(multiprocessors, fewest, busiest, gridsInFlight);
        if (sharedLimit < 1) {
            int needed = competingGrids(busiest, gridsInFlight);
            throw new SymmemException("ranks sharing a GPU cannot all be resident: device=" + device + " multiprocessors="
                    + multiprocessors + " blocksPerMultiprocessor=" + fewest + " (" + fewestKernel.symbol + ") ranksOnDevice="
                    + busiest + " gridsInFlightPerRank=" + gridsInFlight + " expected=" + needed
                    + " grids of one block or more <= " + (long) multiprocessors * fewest + " slots found=" + needed
                    + " grids needed (fix: run fewer ranks per GPU" + (gridsInFlight > 1
                            ? ", or launch without programmatic dependent launch: -Dsymmem4j.cuda.pdl=false keeps one grid"
                            + " per rank in flight instead of two" : "") + ")");
        }
        for (Kernel k : kernels) {
            int perMultiprocessor = ranksOnDevice == 1 ? blocksPerMultiprocessor[k.ordinal()] : fewest;
            int limit = maxBlocks(multiprocessors, perMultiprocessor, ranksOnDevice, gridsInFlight);
            limits[k.ordinal()] = switch (k.spread) {
                case ONE_PER_MULTIPROCESSOR -> Math.min(limit, multiprocessors);
                case ALL_RESIDENT -> limit;
                case SINGLE_BLOCK -> Math.min(limit, 1);
            };
        }
    }

    private LaunchBudget(LaunchBudget first, int[] limits) {
        this.device = first.device;
        this.multiprocessors = first.multiprocessors;
        this.ranksOnDevice = first.ranksOnDevice;
        this.gridsInFlight = first.gridsInFlight;
        System.arraycopy(limits, 0, this.limits, 0, limits.length);
    }

    /**
     * The budget every rank of a group launches its collectives with: each kernel's smallest limit
     * over the ranks' own budgets. A kernel that meets its peers block by block needs the same grid
     * on every rank (block b waits for block b of each peer), and GPUs of one machine may differ in
     * size or in how many ranks they carry.
     */
    static LaunchBudget common(java.util.List<LaunchBudget> budgets) {
        int[] min = budgets.getFirst().limits.clone();
        for (LaunchBudget b : budgets) {
            for (int k = 0; k < min.length; k++) {
                min[k] = Math.min(min[k], b.limits[k]);
            }
        }
        return new LaunchBudget(budgets.getFirst(), min);
    }

    /**
     * The same as {@link #common(java.util.List)}, from each rank's limits as numbers (what ranks
     * exchange through {@link org.symmem4j.parallel.Group#allGatherBytes}): each kernel's smallest
     * limit over {@code allLimits}, with this rank's device description.
     */
    static LaunchBudget common(LaunchBudget own, java.util.List<int[]> allLimits) {
        int[] min = own.limits.clone();
        for (int[] l : allLimits) {
            if (l.length != min.length) {
                throw new IllegalArgumentException("a rank's launch limits have " + l.length + " entries, expected one per"
                        + " kernel: " + min.length + " (fix: run the same symmem4j version on every rank)");
            }
            for (int k = 0; k < min.length; k++) {
                min[k] = Math.min(min[k], l[k]);
            }
        }
        return new LaunchBudget(own, min);
    }

    /** This rank's limit of every kernel, by {@link Kernel} ordinal. */
    int[] limits() {
        return limits.clone();
    }

    /** The grid to launch for {@code wantedBlocks} blocks of work: at least 1, at most {@link #limit}. */
    int grid(Kernel kernel, long wantedBlocks) {
        return (int) Math.max(1, Math.min(wantedBlocks, limits[kernel.ordinal()]));
    }

    /** The largest grid of {@code kernel} this rank launches. */
    int limit(Kernel kernel) {
        return limits[kernel.ordinal()];
    }

    int ranksOnDevice() {
        return ranksOnDevice;
    }

    int gridsInFlight() {
        return gridsInFlight;
    }

    @Override
    public String toString() {
        StringBuilder s = new StringBuilder("LaunchBudget[device=").append(device).append(" multiprocessors=")
                .append(multiprocessors).append(" ranksOnDevice=").append(ranksOnDevice).append(" gridsInFlightPerRank=")
                .append(gridsInFlight);
        for (Kernel k : Kernel.values()) {
            s.append(' ').append(k.symbol).append('=').append(limits[k.ordinal()]);
        }
        return s.append(']').toString();
    }
}
