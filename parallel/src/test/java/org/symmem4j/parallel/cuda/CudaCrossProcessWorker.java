package org.symmem4j.parallel.cuda;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.List;
import org.symmem4j.parallel.Algorithm;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.DeviceCommunicator;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.ReduceOp;
import org.symmem4j.parallel.ShardPartition;
import org.symmem4j.parallel.SymmetricMemory;
import org.symmem4j.parallel.TransportCapabilities;
import org.symmem4j.parallel.cuda.ffi.CudaDriver;
import org.symmem4j.parallel.group.ProcessGroup;

/**
 * One rank of {@link CudaCrossProcessTest}, a process of its own: joins a {@link ProcessGroup} on a
 * {@link CudaTransport} from torchrun's variables and checks, against float64 references, that CUDA
 * symmetric memory, our kernels and NCCL (with a GPU per rank) work with every rank in another process. Prints
 * {@code CROSS-PROCESS OK rank=R} and exits 0, or prints what failed and exits 3.
 *
 * <p>Arguments: element counts to all-reduce and all-gather, e.g. {@code 1000 3000001}.
 */
public final class CudaCrossProcessWorker {

    /** Allocations made and closed in a row, then the device's free memory compared. */
    static final int CYCLES = 20;
    /** What those cycles may leave behind on the device (the driver's own bookkeeping), at most. */
    static final long LEAK_TOLERANCE_BYTES = 64L << 20;

    private CudaCrossProcessWorker() {
    }

    public static void main(String[] args) {
        WorkerProcesses.exitWith(() -> {
            try (CudaTransport cuda = CudaTransport.create();
                 ProcessGroup group = ProcessGroup.fromEnvironment(GroupOptions.defaults(), cuda)) {
                int rank = group.rank();
                System.out.println("rank=" + rank + " pid=" + ProcessHandle.current().pid() + " on " + cuda.describe(group));
                registerIsRefused(group);
                for (String a : args) {
                    checkCollectives(group, Long.parseLong(a));
                }
                allocationsLeaveNothingBehind(group, cuda);
                cuda.release(group);
                return "CROSS-PROCESS OK rank=" + rank;
            }
        });
    }

    /** A value exactly representable in float32, whose sums over up to 8 ranks are exact too. */
    static float value(int rank, long i) {
        return (float) (((i * 7 + rank * 13L) % 101 - 50) * 0.25);
    }

    private static void registerIsRefused(ProcessGroup group) {
        registerIsRefused(group, "across processes", "processes of their own");
    }

    /**
     * Registering host memory on {@code group} must be refused with an {@link UnsupportedOperationException} whose message
     * contains {@code reason}; {@code where} names the setting in the failure (shared with {@link NvshmemWorker}).
     */
    static void registerIsRefused(ProcessGroup group, String where, String reason) {
        // asked before the call (collective: every rank asks here), the transport gives the same refusal word for word
        TransportCapabilities caps = group.transport().capabilities(group);
        if (caps.supports(TransportCapabilities.Capability.REGISTER)) {
            throw new AssertionError("capabilities say register " + where + " is supported: " + caps.table());
        }
        String expected = caps.get(TransportCapabilities.Capability.REGISTER).reason();
        try (Arena a = Arena.ofConfined()) {
            MemorySegment host = a.allocate(4096);
            try (SymmetricMemory m = SymmetricMemory.register(group, host)) {
                throw new AssertionError("register " + where + " was accepted: " + m);
            } catch (UnsupportedOperationException e) {
                if (!e.getMessage().contains(reason)) {
                    throw new AssertionError("register refused, but the message does not say why: " + e.getMessage(), e);
                }
                if (!e.getMessage().equals(expected)) {
                    throw new AssertionError("register refused with '" + e.getMessage() + "', but the capabilities said '"
                            + expected + "'", e);
                }
                System.out.println("register refused: " + e.getMessage());
            }
        }
    }

    private static void checkCollectives(ProcessGroup group, long count) {
        int n = group.worldSize();
        int rank = group.rank();
        long bytes = count * Float.BYTES;
        try (Arena a = Arena.ofConfined();
             SymmetricMemory mem = SymmetricMemory.allocate(group, bytes);
             Communicator comm = Communicator.create(group)) {
            DeviceCommunicator device = comm.unwrap(DeviceCommunicator.class).orElseThrow();
            MemorySegment host = a.allocate(bytes, 16);
            for (Algorithm algorithm : List.of(Algorithm.ONE_SHOT, Algorithm.TWO_SHOT, Algorithm.NCCL)) {
                if (!comm.supports(algorithm, DType.FLOAT32, ReduceOp.SUM, count)) {
                    // ONE_SHOT: larger than its landing slot; NCCL: ranks sharing a GPU, or no NCCL
                    System.out.println("count=" + count + " " + algorithm + ": not for this size or machine, skipped");
                    continue;
                }
                for (long i = 0; i < count; i++) {
                    host.setAtIndex(ValueLayout.JAVA_FLOAT, i, value(rank, i));
                }
                mem.copyFromHost(host, 0);
                comm.allReduce(mem, 0, count, DType.FLOAT32, ReduceOp.SUM, algorithm);
                device.synchronize();
                mem.copyToHost(0, host);
                long wrong = 0;
                long first = -1;
                for (long i = 0; i < count; i++) {
                    double expected = 0;
                    for (int p = 0; p < n; p++) {
                        expected += value(p, i);
                    }
                    if (host.getAtIndex(ValueLayout.JAVA_FLOAT, i) != (float) expected) {
                        wrong++;
                        first = first < 0 ? i : first;
                    }
                }
                if (wrong > 0) {
                    throw new AssertionError("all-reduce " + algorithm + " count=" + count + ": " + wrong + " elements differ"
                            + " from the float64 reference, first at " + first + ": "
                            + host.getAtIndex(ValueLayout.JAVA_FLOAT, first));
                }
                System.out.println("count=" + count + " all-reduce " + algorithm + ": equal to the float64 reference");
            }
            // all-gather: each rank's block comes from that rank's memory, bitwise
            ShardPartition blocks = ShardPartition.of(count, n, DType.FLOAT32);
            for (long i = 0; i < count; i++) {
                host.setAtIndex(ValueLayout.JAVA_FLOAT, i, value(rank, i) + 1000f * rank);
            }
            mem.copyFromHost(host, 0);
            comm.allGather(mem, 0, count, DType.FLOAT32);
            device.synchronize();
            mem.copyToHost(0, host);
            for (int q = 0; q < n; q++) {
                for (long i = blocks.start(q); i < blocks.end(q); i++) {
                    float expected = value(q, i) + 1000f * q;
                    if (host.getAtIndex(ValueLayout.JAVA_FLOAT, i) != expected) {
                        throw new AssertionError("all-gather count=" + count + ": element " + i + " of rank " + q
                                + "'s block is " + host.getAtIndex(ValueLayout.JAVA_FLOAT, i) + ", expected " + expected);
                    }
                }
            }
            System.out.println("count=" + count + " all-gather: every block bitwise from its rank");
        }
    }

    private static void allocationsLeaveNothingBehind(ProcessGroup group, CudaTransport cuda) {
        allocationsLeaveNothingBehind(group, cuda.driver(), "leak", "allocations");
    }

    /**
     * Allocates and closes {@link #CYCLES} memories of 5 MiB (not a multiple of the 2 MiB granularity)
     * and checks that the device's free memory came back, within {@link #LEAK_TOLERANCE_BYTES}: every
     * mapping of every peer was unmapped and every handle released (or, on NVSHMEM, the heap reused its space).
     * {@code key} prefixes the group's exchanges, {@code what} names the allocations in the output (shared with
     * {@link NvshmemWorker}).
     */
    static void allocationsLeaveNothingBehind(ProcessGroup group, CudaDriver driver, String key, String what) {
        byte[] none = new byte[0];
        // warm: the first allocation binds the descriptor channel and loads what the driver loads once
        SymmetricMemory.allocate(group, 5L << 20).close();
        group.allGatherBytes(key + "-before", none);
        long before = driver.memoryInfo()[0];
        for (int c = 0; c < CYCLES; c++) {
            try (SymmetricMemory m = SymmetricMemory.allocate(group, (5L << 20) + 12)) {
                if (m.byteSize() != (5L << 20) + 12) {
                    throw new AssertionError("byteSize " + m.byteSize());
                }
            }
        }
        group.allGatherBytes(key + "-after", none); // every rank closed every memory
        long after = driver.memoryInfo()[0];
        System.out.println("free device memory before " + CYCLES + " " + what + " " + (before >> 20) + " MiB, after "
                + (after >> 20) + " MiB");
        if (before - after > LEAK_TOLERANCE_BYTES) {
            throw new AssertionError(CYCLES + " " + what + " and closes left " + ((before - after) >> 20) + " MiB of device"
                    + " memory taken (tolerance " + (LEAK_TOLERANCE_BYTES >> 20) + " MiB)");
        }
    }
}
