package org.symmem4j.parallel.cuda;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;
import java.util.SplittableRandom;
import org.junit.jupiter.api.Test;
import org.symmem4j.parallel.SymmemException;

/**
 * The grid sizing of ranks sharing a GPU, on the CPU: a pure function from multiprocessors, blocks
 * per multiprocessor and ranks per device to grid, checked exhaustively over small cases against its
 * defining inequality, against a block-placement simulation of mixed kernels, and on the H100/H200
 * figures (132 SMs and each kernel's blocks per SM as the occupancy calculator reported them on an
 * H100, bench/results/2026-11-23-gpu-shared-ranks-h100.md).
 */
class LaunchBudgetTest {

    /**
     * Blocks per SM of each kernel as the occupancy calculator reported them on an H100 (sm_90) for
     * the kernels as built, 2026-11-23.
     */
    static int[] hopperOccupancy() {
        int[] occ = new int[Kernel.values().length];
        for (Kernel k : Kernel.values()) {
            occ[k.ordinal()] = switch (k) {
                case ONE_SHOT_F32, ONE_SHOT_LL_F32, ONE_SHOT_LL_BF16, TWO_SHOT_F32, TWO_SHOT_BF16 -> 3;
                case ONE_SHOT_BF16, TWO_SHOT_PUSH_F32, TWO_SHOT_PUSH_BF16, REDUCE_SCATTER_F32, REDUCE_SCATTER_BF16 -> 2;
                case ALL_GATHER, PUT_SIGNAL -> 4;
                // the tensor-parallel GEMMs' local steps (added 2026-11-26; 512 threads, few registers)
                case SUM_SLOTS_F32, SUM_SLOTS_BF16, RELU_F32, RELU_BF16, RELU_BACKWARD_F32, RELU_BACKWARD_BF16 -> 4;
                // the fully sharded step's cast and optimizer (added 2026-11-28; 512 threads, 10 and 28 registers on sm_90)
                case CAST_F32_BF16, ADAM_BF16 -> 4;
                // the copy by loads and stores (added 2026-11-28 for the distributed tensor; 512 threads, 32 registers on sm_90)
                case COPY -> 4;
                case WAIT_SIGNAL, WAIT_SIGNAL_CONSUME -> 32;
                // the ring buffer's append on the producer's stream (added 2026-11-29; one block of 32 threads)
                case RING_PUT -> 32;
                // the hash map's operations on the caller's stream (added 2026-11-29; one block of 32 threads)
                case MAP_OP -> 32;
            };
        }
        return occ;
    }

    @Test
    void ranksAreCountedPerDeviceAsRankModDevices() {
        assertEquals(8, LaunchBudget.ranksOnDevice(8, 1, 0));
        for (int d = 0; d < 4; d++) {
            assertEquals(2, LaunchBudget.ranksOnDevice(8, 4, d));
        }
        assertEquals(2, LaunchBudget.ranksOnDevice(3, 2, 0));
        assertEquals(1, LaunchBudget.ranksOnDevice(3, 2, 1));
        assertEquals(0, LaunchBudget.ranksOnDevice(2, 8, 5));
        // against counting r mod devices directly
        for (int world = 1; world <= 8; world++) {
            for (int devices = 1; devices <= 8; devices++) {
                int[] count = new int[devices];
                for (int r = 0; r < world; r++) {
                    count[r % devices]++;
                }
                for (int d = 0; d < devices; d++) {
                    assertEquals(count[d], LaunchBudget.ranksOnDevice(world, devices, d), world + " ranks on " + devices + " GPUs, device " + d);
                }
            }
        }
        assertThrows(IllegalStateException.class, () -> LaunchBudget.ranksOnDevice(4, 2, 2));
    }

    @Test
    void aRankAloneKeepsTheWholeGpu() {
        assertEquals(396, LaunchBudget.maxBlocks(132, 3, 1, 2), "TWO_SHOT on an H100/H200 as before: 3 per SM");
        assertEquals(264, LaunchBudget.maxBlocks(132, 2, 1, 2), "write-only TWO_SHOT: 2 per SM");
        assertEquals(264, LaunchBudget.maxBlocks(132, 2, 1, 1));
        assertEquals(CudaKernels.MAX_BLOCKS, LaunchBudget.maxBlocks(148, 8, 1, 2), "at most the pad's MAX_BLOCKS");
    }

    @Test
    void ranksSharingAnH100SplitItsSlots() {
        // 264 slots (2 per SM, the write-only TWO_SHOT's occupancy); with PDL every other rank may
        // hold two grids while one rank's grid still becomes resident: (n - 1) * 2 + 1 grids
        assertEquals(88, LaunchBudget.maxBlocks(132, 2, 2, 2));
        assertEquals(37, LaunchBudget.maxBlocks(132, 2, 4, 2));
        assertEquals(17, LaunchBudget.maxBlocks(132, 2, 8, 2));
        assertEquals(33, LaunchBudget.maxBlocks(132, 2, 8, 1), "without PDL one grid per rank");
        assertEquals(0, LaunchBudget.maxBlocks(4, 2, 8, 2), "15 grids cannot fit in 8 slots");
    }

    /** Every small case against the inequality that defines the result: the largest r with competing * r <= slots. */
    @Test
    void theGridIsTheLargestThatFitsExhaustively() {
        for (int sms = 1; sms <= 160; sms++) {
            for (int perSm = 0; perSm <= 8; perSm++) {
                for (int ranks = 1; ranks <= 8; ranks++) {
                    for (int inFlight = 1; inFlight <= 2; inFlight++) {
                        int r = LaunchBudget.maxBlocks(sms, perSm, ranks, inFlight);
                        long slots = (long) sms * perSm;
                        long competing = (long) (ranks - 1) * inFlight + 1;
                        String c = "sms=" + sms + " perSm=" + perSm + " ranks=" + ranks + " inFlight=" + inFlight + " r=" + r;
                        assertTrue(r >= 0 && r <= CudaKernels.MAX_BLOCKS, c);
                        assertTrue(competing * r <= slots, "fits: " + c);
                        assertTrue(r == CudaKernels.MAX_BLOCKS || competing * (r + 1) > slots, "largest: " + c);
                    }
                }
            }
        }
    }

    /** A kernel in the placement simulation: threads and registers per thread of one block. */
    record SimKernel(int threads, int registers) {
        int perSm() {
            return Math.min(Math.min(SM_THREADS / threads, SM_REGISTERS / (threads * registers)), SM_BLOCKS);
        }
    }

    static final int SM_THREADS = 2048;
    static final int SM_REGISTERS = 65536;
    static final int SM_BLOCKS = 32;

    /**
     * The worst case of the class comment, placed block by block: every other rank holds its grid and
     * its early-launched successor, then the last rank's grid arrives; kernels of different sizes
     * mixed at random and blocks put first-fit onto multiprocessors (threads, registers, block slots).
     * With grids of the budget's size every block finds room — counting slots by the smallest
     * occupancy is safe for mixed kernels — and one block more per grid can fail.
     */
    @Test
    void theWorstCaseMixOfKernelsIsPlacedInFullBySimulation() {
        SplittableRandom rnd = new SplittableRandom(11);
        List<SimKernel> menu = List.of(new SimKernel(512, 32), new SimKernel(512, 56), new SimKernel(512, 64),
                new SimKernel(512, 24), new SimKernel(32, 16), new SimKernel(256, 40), new SimKernel(1024, 32));
        boolean sawTight = false;
        for (int trial = 0; trial < 3000; trial++) {
            int sms = 1 + rnd.nextInt(40);
            int ranks = 1 + rnd.nextInt(8);
            int inFlight = 1 + rnd.nextInt(2);
            List<SimKernel> used = new ArrayList<>(menu.subList(0, 1 + rnd.nextInt(menu.size())));
            Collections.shuffle(used, new java.util.Random(trial));
            int fewest = used.stream().mapToInt(SimKernel::perSm).min().orElseThrow();
            int r = LaunchBudget.maxBlocks(sms, ranks == 1 ? used.getFirst().perSm() : fewest, ranks, inFlight);
            if (r == 0) {
                continue;
            }
            int grids = ranks == 1 ? 1 : (ranks - 1) * inFlight + 1;
            List<SimKernel> blocks = new ArrayList<>();
            for (int g = 0; g < grids; g++) {
                SimKernel k = ranks == 1 ? used.getFirst() : used.get(rnd.nextInt(used.size()));
                blocks.addAll(Collections.nCopies(r, k));
            }
            Collections.shuffle(blocks, new java.util.Random(trial * 31L));
            assertTrue(placeFirstFit(blocks, sms), "trial " + trial + ": " + grids + " grids of " + r + " blocks on " + sms
                    + " SMs, kernels " + used);
            // the bound is tight for a GPU filled with the largest kernel: one block more per grid does not fit
            SimKernel largest = used.stream().min(java.util.Comparator.comparingInt(SimKernel::perSm)).orElseThrow();
            if (r < CudaKernels.MAX_BLOCKS && (long) grids * (r + 1) > (long) sms * largest.perSm()) {
                sawTight |= !placeFirstFit(new ArrayList<>(Collections.nCopies(grids * (r + 1), largest)), sms);
            }
        }
        assertTrue(sawTight, "the simulation must also see the limit: one block more per grid overflowing the GPU");
    }

    /** First-fit placement of blocks onto multiprocessors; false when some block finds no room. */
    static boolean placeFirstFit(List<SimKernel> blocks, int sms) {
        int[] threads = new int[sms];
        int[] registers = new int[sms];
        int[] count = new int[sms];
        for (SimKernel b : blocks) {
            boolean placed = false;
            for (int s = 0; s < sms && !placed; s++) {
                if (threads[s] + b.threads() <= SM_THREADS && registers[s] + b.threads() * b.registers() <= SM_REGISTERS
                        && count[s] + 1 <= SM_BLOCKS) {
                    threads[s] += b.threads();
                    registers[s] += b.threads() * b.registers();
                    count[s]++;
                    placed = true;
                }
            }
            if (!placed) {
                return false;
            }
        }
        return true;
    }

    @Test
    void hopperBudgetsAloneAndShared() {
        LaunchBudget alone = LaunchBudget.of("H100", 132, hopperOccupancy(), 1, 1, true, 8);
        assertEquals(132, alone.limit(Kernel.ONE_SHOT_F32), "one block per SM");
        assertEquals(132, alone.limit(Kernel.ONE_SHOT_LL_BF16));
        assertEquals(396, alone.limit(Kernel.TWO_SHOT_BF16), "every block resident: 3 per SM");
        assertEquals(264, alone.limit(Kernel.TWO_SHOT_PUSH_F32));
        assertEquals(132, alone.limit(Kernel.REDUCE_SCATTER_F32));
        assertEquals(132, alone.limit(Kernel.ALL_GATHER));
        assertEquals(132, alone.limit(Kernel.PUT_SIGNAL));
        assertEquals(1, alone.limit(Kernel.WAIT_SIGNAL));

        LaunchBudget eight = LaunchBudget.of("H100", 132, hopperOccupancy(), 8, 8, true, 32);
        for (Kernel k : Kernel.values()) {
            int expected = k.spread == Kernel.Spread.SINGLE_BLOCK ? 1 : 17;
            assertEquals(expected, eight.limit(k), k.symbol);
        }
        // the worst case in slots (2 per SM): 7 ranks x 2 grids + 1 grid of the largest limit
        assertTrue(15 * 17 <= 132 * 2);
        LaunchBudget eightPlain = LaunchBudget.of("H100", 132, hopperOccupancy(), 8, 8, false, 32);
        assertEquals(33, eightPlain.limit(Kernel.TWO_SHOT_F32));
        LaunchBudget two = LaunchBudget.of("H100", 132, hopperOccupancy(), 2, 2, true, 8);
        assertEquals(88, two.limit(Kernel.TWO_SHOT_F32));
        assertEquals(88, two.limit(Kernel.ONE_SHOT_F32), "below one per SM: min(88, 132)");
    }

    @Test
    void gridsFollowTheWorkUpToTheLimit() {
        LaunchBudget eight = LaunchBudget.of("H100", 132, hopperOccupancy(), 8, 8, true, 32);
        assertEquals(1, eight.grid(Kernel.TWO_SHOT_F32, 0), "at least one block");
        assertEquals(5, eight.grid(Kernel.TWO_SHOT_F32, 5));
        assertEquals(17, eight.grid(Kernel.TWO_SHOT_F32, Long.MAX_VALUE));
        assertEquals(1, eight.grid(Kernel.WAIT_SIGNAL, 7));
    }

    /** 3 ranks on 2 GPUs: device 0 carries 2, device 1 one; every rank must launch device 0's grids. */
    @Test
    void theGroupAgreesOnTheSmallestGrids() {
        LaunchBudget busy = LaunchBudget.of("GPU0", 132, hopperOccupancy(), 2, 2, true, 8);
        LaunchBudget idle = LaunchBudget.of("GPU1", 132, hopperOccupancy(), 1, 2, true, 8);
        LaunchBudget common = LaunchBudget.common(List.of(busy, idle, busy));
        for (Kernel k : Kernel.values()) {
            assertEquals(Math.min(busy.limit(k), idle.limit(k)), common.limit(k), k.symbol);
            assertEquals(busy.limit(k), common.limit(k), k.symbol);
        }
    }

    @Test
    void tooManyRanksForTheGpuAreRefusedSayingWhatAndTheFix() {
        int[] occ = new int[Kernel.values().length];
        Arrays.fill(occ, 2);
        SymmemException e = assertThrows(SymmemException.class, () -> LaunchBudget.of("tiny GPU", 4, occ, 8, 8, true, 32));
        String m = e.getMessage();
        assertTrue(m.contains("cannot all be resident"), m);
        assertTrue(m.contains("multiprocessors=4 blocksPerMultiprocessor=2"), m);
        assertTrue(m.contains("ranksOnDevice=8 gridsInFlightPerRank=2 expected=15"), m);
        assertTrue(m.contains("<= 8 slots"), m);
        assertTrue(m.contains("run fewer ranks per GPU") && m.contains("-Dsymmem4j.cuda.pdl=false"), m);
        // without PDL 8 grids fit in 8 slots
        assertEquals(1, LaunchBudget.of("tiny GPU", 4, occ, 8, 8, false, 32).limit(Kernel.TWO_SHOT_F32));
        // a rank alone on the lighter GPU refuses with the busiest one, so no rank is left waiting
        assertThrows(SymmemException.class, () -> LaunchBudget.of("tiny GPU", 4, occ, 1, 8, true, 32));
    }

    @Test
    void moreRanksOnAGpuThanHardwareQueuesAreRefused() {
        SymmemException e = assertThrows(SymmemException.class,
                () -> LaunchBudget.of("H100", 132, hopperOccupancy(), 8, 8, true, 4));
        String m = e.getMessage();
        assertTrue(m.contains("ranksOnDevice=8 CUDA_DEVICE_MAX_CONNECTIONS=4 expected ranksOnDevice + 1 <= CUDA_DEVICE_MAX_CONNECTIONS"), m);
        // CUDA's default of 8 leaves no queue for the host's copies beside 8 ranks (an abort's poison hung there)
        assertThrows(SymmemException.class, () -> LaunchBudget.of("H100", 132, hopperOccupancy(), 8, 8, true, 8));
        assertEquals(37, LaunchBudget.of("H100", 132, hopperOccupancy(), 4, 4, true, 8).limit(Kernel.TWO_SHOT_F32));
        assertTrue(m.contains("set CUDA_DEVICE_MAX_CONNECTIONS=32"), m);
        // one rank per GPU needs one queue: Megatron's CUDA_DEVICE_MAX_CONNECTIONS=1 is fine there
        assertEquals(396, LaunchBudget.of("H100", 132, hopperOccupancy(), 1, 1, true, 1).limit(Kernel.TWO_SHOT_F32));
        assertEquals(17, LaunchBudget.of("H100", 132, hopperOccupancy(), 8, 8, true, 32).limit(Kernel.TWO_SHOT_F32));
    }

    @Test
    void aKernelThatCannotRunAtAllIsRefused() {
        int[] occ = hopperOccupancy();
        occ[Kernel.TWO_SHOT_PUSH_BF16.ordinal()] = 0;
        SymmemException e = assertThrows(SymmemException.class, () -> LaunchBudget.of("old GPU", 80, occ, 1, 1, true, 8));
        assertTrue(e.getMessage().contains("symmem_two_shot_push_bf16") && e.getMessage().contains("use Algorithm.NCCL"),
                e.getMessage());
    }

    @Test
    void hardwareQueuesFromTheEnvironment() {
        assertEquals(8, LaunchBudget.maxConnections(null));
        assertEquals(8, LaunchBudget.maxConnections(""));
        assertEquals(32, LaunchBudget.maxConnections("32"));
        assertEquals(16, LaunchBudget.maxConnections(" 16 "));
        assertEquals(1, LaunchBudget.maxConnections("1"));
        assertEquals(8, LaunchBudget.maxConnections("0"));
        assertEquals(8, LaunchBudget.maxConnections("64"));
        assertEquals(8, LaunchBudget.maxConnections("many"));
    }
}
