package org.symmem4j.parallel.cuda;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.time.Duration;
import java.util.List;
import org.symmem4j.parallel.Algorithm;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.DeviceCommunicator;
import org.symmem4j.parallel.DeviceGraph;
import org.symmem4j.parallel.DeviceMemory;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.ReduceOp;
import org.symmem4j.parallel.ShardPartition;
import org.symmem4j.parallel.SignalOp;
import org.symmem4j.parallel.SymmetricMemory;
import org.symmem4j.parallel.group.ProcessGroup;

/**
 * One PE of {@link NvshmemTransportTest}, a process of its own on a GPU of its own: joins a
 * {@link ProcessGroup} on an {@link NvshmemTransport} from torchrun's variables (NVSHMEM started through
 * the group's store exchange) and checks everything one PE allows, and with several PEs what they add:
 * the PE numbering, heap memory (zeroed, every peer mapped for our kernels), put-with-signal to the next
 * PE observed by an on-stream wait (ADD and SET, the consuming wait leaving the slot at zero), the same
 * captured in a CUDA graph and replayed, NVSHMEM's all-reduce and ours on heap memory against the float64
 * reference, reduce-scatter and all-gather on the heap, {@code register} refused, teardown and a second
 * start in the same process, and 20 allocations that leave the GPU's memory where it was. Prints
 * {@code NVSHMEM OK rank=R} and exits 0, or prints what failed and exits 3.
 */
public final class NvshmemWorker {

    private static final Duration WAIT = Duration.ofSeconds(60);

    private NvshmemWorker() {
    }

    public static void main(String[] args) {
        WorkerProcesses.exitWith(() -> {
            try (NvshmemTransport nvshmem = NvshmemTransport.create();
                 ProcessGroup group = ProcessGroup.fromEnvironment(GroupOptions.defaults(), nvshmem)) {
                int rank = group.rank();
                System.out.println("rank=" + rank + " pid=" + ProcessHandle.current().pid() + " on " + nvshmem.describe(group));
                System.out.println(nvshmem.runtimeVersions());
                registerIsRefused(group);
                heapMemoryIsSymmetric(group);
                putWithSignal(group, false);
                putWithSignal(group, true);
                collectives(group, 1000);
                collectives(group, 3_000_001);
                nvshmem.release(group);
                System.out.println("NVSHMEM finalized; starting it again in this process");
                putWithSignal(group, false);
                allocationsLeaveNothingBehind(group, nvshmem);
                nvshmem.release(group);
                return "NVSHMEM OK rank=" + rank;
            }
        });
    }

    private static void registerIsRefused(ProcessGroup group) {
        CudaCrossProcessWorker.registerIsRefused(group, "on NVSHMEM", "symmetric heap");
    }

    private static void heapMemoryIsSymmetric(ProcessGroup group) {
        long bytes = (1L << 20) + 12;
        try (Arena a = Arena.ofConfined(); SymmetricMemory mem = SymmetricMemory.allocate(group, bytes)) {
            check(mem.byteSize() == bytes, "byteSize " + mem.byteSize());
            check(mem.enqueued() && !mem.hostAddressable(), "heap memory must be enqueued device memory");
            MemorySegment host = a.allocate(bytes);
            host.fill((byte) 0x5a);
            mem.copyToHost(0, host);
            for (long i = 0; i < bytes; i++) {
                check(host.get(ValueLayout.JAVA_BYTE, i) == 0, "heap memory not zeroed at byte " + i);
            }
            DeviceMemory device = mem.unwrap(DeviceMemory.class).orElseThrow();
            for (int p = 0; p < group.worldSize(); p++) {
                check(device.bufferPointer(p) != 0 && device.signalPadPointer(p) != 0, "rank " + p + " not mapped");
            }
            for (int s = 0; s < mem.signalSlots(); s++) {
                check(mem.readSignal(s) == 0, "signal slot " + s + " not zero");
            }
            System.out.println("heap memory: zeroed, every rank's buffer and pad mapped here");
        }
    }

    /** A value exactly representable in float32, whose sums over up to 8 ranks are exact too. */
    static float value(int rank, long i) {
        return (float) (((i * 7 + rank * 13L) % 101 - 50) * 0.25);
    }

    /**
     * Each PE puts its pattern into the next PE's memory with a signal (ADD) and waits, on its stream, for
     * the previous PE's; then the same with SET on another slot. {@code graph}: the put and the wait captured
     * once and replayed three times, the source changed between replays.
     */
    private static void putWithSignal(ProcessGroup group, boolean graph) {
        int n = group.worldSize();
        int rank = group.rank();
        int next = (rank + 1) % n;
        int prev = (rank + n - 1) % n;
        long count = 65_537;
        long bytes = count * Float.BYTES;
        try (Arena a = Arena.ofConfined();
             SymmetricMemory inbox = SymmetricMemory.allocate(group, bytes);
             SymmetricMemory source = SymmetricMemory.allocate(group, bytes);
             Communicator comm = Communicator.create(group)) {
            DeviceCommunicator device = comm.unwrap(DeviceCommunicator.class).orElseThrow();
            MemorySegment host = a.allocate(bytes, 16);
            Runnable handOff = () -> {
                inbox.putWithSignal(next, source.local(), 0, 0, 1, SignalOp.ADD);
                inbox.orderAfterSignal(0, 1, prev, true);
            };
            DeviceGraph captured = graph ? device.capture(handOff) : null;
            int rounds = graph ? 3 : 1;
            for (int round = 0; round < rounds; round++) {
                for (long i = 0; i < count; i++) {
                    host.setAtIndex(ValueLayout.JAVA_FLOAT, i, value(rank, i) + round);
                }
                source.copyFromHost(host, 0);
                comm.barrier(); // every source written before any put of this round
                if (graph) {
                    captured.replay();
                } else {
                    handOff.run();
                }
                check(inbox.awaitWork(WAIT), "the put-with-signal round " + round + " did not complete in " + WAIT);
                inbox.copyToHost(0, host);
                for (long i = 0; i < count; i++) {
                    float expected = value(prev, i) + round;
                    if (host.getAtIndex(ValueLayout.JAVA_FLOAT, i) != expected) {
                        throw new AssertionError((graph ? "graph" : "eager") + " put from rank " + prev + " round " + round
                                + ": element " + i + " is " + host.getAtIndex(ValueLayout.JAVA_FLOAT, i) + ", expected " + expected);
                    }
                }
                check(inbox.readSignal(0) == 0, "the consuming wait left slot 0 at " + inbox.readSignal(0));
                comm.barrier(); // every rank read its inbox before the next round's puts
            }
            if (captured != null) {
                captured.close();
            }
            inbox.signal(next, 1, 42, SignalOp.SET);
            long seen = inbox.waitSignal(1, 42, prev);
            check(seen == 42, "SET signal from rank " + prev + ": slot 1 holds " + seen);
            System.out.println((graph ? "graph-captured (3 replays)" : "eager") + " put-with-signal from rank " + prev
                    + ": data bitwise, slot consumed; SET signal seen");
        }
    }

    private static void collectives(ProcessGroup group, long count) {
        int n = group.worldSize();
        int rank = group.rank();
        long bytes = count * Double.BYTES;
        try (Arena a = Arena.ofConfined();
             SymmetricMemory mem = SymmetricMemory.allocate(group, bytes);
             Communicator comm = Communicator.create(group)) {
            DeviceCommunicator device = comm.unwrap(DeviceCommunicator.class).orElseThrow();
            MemorySegment host = a.allocate(bytes, 16);
            check(comm.supports(Algorithm.NVSHMEM), "the communicator of an NVSHMEM group must support NVSHMEM");
            check(!comm.supports(Algorithm.NVSHMEM, DType.FLOAT32, ReduceOp.AVG, count), "NVSHMEM has no AVG reduction");
            for (DType dtype : List.of(DType.FLOAT32, DType.FLOAT64, DType.BFLOAT16)) {
                for (ReduceOp op : List.of(ReduceOp.SUM, ReduceOp.MAX)) {
                    for (Algorithm algorithm : List.of(Algorithm.NVSHMEM, Algorithm.ONE_SHOT, Algorithm.TWO_SHOT, Algorithm.NCCL)) {
                        if (!comm.supports(algorithm, dtype, op, count)) {
                            continue; // our kernels: FLOAT32/BFLOAT16 SUM/AVG; ONE_SHOT small; NCCL: a GPU per rank
                        }
                        fill(host, dtype, count, rank);
                        mem.copyFromHost(host.asSlice(0, dtype.bytes(count)), 0);
                        comm.allReduce(mem, 0, count, dtype, op, algorithm);
                        device.synchronize();
                        mem.copyToHost(0, host.asSlice(0, dtype.bytes(count)));
                        checkReduced(host, dtype, op, count, n, algorithm + " in place on the heap");
                    }
                }
            }
            // a plain device buffer, through the communicator's staging on the heap
            MemorySegment plain = device.allocateDevice(DType.FLOAT32.bytes(count));
            fill(host, DType.FLOAT32, count, rank);
            device.copyFromHost(plain, host.asSlice(0, DType.FLOAT32.bytes(count)));
            comm.allReduce(plain, count, DType.FLOAT32, ReduceOp.SUM, Algorithm.NVSHMEM);
            device.synchronize();
            device.copyToHost(host.asSlice(0, DType.FLOAT32.bytes(count)), plain);
            device.freeDevice(plain);
            checkReduced(host, DType.FLOAT32, ReduceOp.SUM, count, n, "NVSHMEM through staging");
            // all-gather with our kernels on the heap: each rank's block from that rank, bitwise
            ShardPartition blocks = ShardPartition.of(count, n, DType.FLOAT32);
            for (long i = 0; i < count; i++) {
                host.setAtIndex(ValueLayout.JAVA_FLOAT, i, value(rank, i) + 1000f * rank);
            }
            mem.copyFromHost(host.asSlice(0, DType.FLOAT32.bytes(count)), 0);
            comm.allGather(mem, 0, count, DType.FLOAT32);
            device.synchronize();
            mem.copyToHost(0, host.asSlice(0, DType.FLOAT32.bytes(count)));
            for (int q = 0; q < n; q++) {
                for (long i = blocks.start(q); i < blocks.end(q); i++) {
                    check(host.getAtIndex(ValueLayout.JAVA_FLOAT, i) == value(q, i) + 1000f * q,
                            "all-gather count=" + count + ": element " + i + " of rank " + q + "'s block");
                }
            }
            System.out.println("count=" + count + " all-gather on the heap: every block bitwise from its rank");
        }
    }

    private static void fill(MemorySegment host, DType dtype, long count, int rank) {
        for (long i = 0; i < count; i++) {
            float v = value(rank, i);
            switch (dtype) {
                case FLOAT32 -> host.setAtIndex(ValueLayout.JAVA_FLOAT, i, v);
                case FLOAT64 -> host.setAtIndex(ValueLayout.JAVA_DOUBLE, i, v);
                case BFLOAT16 -> host.setAtIndex(ValueLayout.JAVA_SHORT, i, (short) (Float.floatToIntBits(v) >>> 16));
            }
        }
    }

    /** Compares with the float64 reduction of every rank's values, rounded once to the element type. */
    private static void checkReduced(MemorySegment host, DType dtype, ReduceOp op, long count, int n, String what) {
        long wrong = 0;
        long first = -1;
        for (long i = 0; i < count; i++) {
            double expected = op == ReduceOp.MAX ? Double.NEGATIVE_INFINITY : 0;
            for (int p = 0; p < n; p++) {
                expected = op == ReduceOp.MAX ? Math.max(expected, value(p, i)) : expected + value(p, i);
            }
            double got = switch (dtype) {
                case FLOAT32 -> host.getAtIndex(ValueLayout.JAVA_FLOAT, i);
                case FLOAT64 -> host.getAtIndex(ValueLayout.JAVA_DOUBLE, i);
                case BFLOAT16 -> Float.intBitsToFloat(host.getAtIndex(ValueLayout.JAVA_SHORT, i) << 16);
            };
            // the values are multiples of 0.25 below 64 in magnitude and their sums over 8 ranks below 512: exact in
            // every type but bfloat16, whose 8 significant bits round them once
            double tolerance = dtype == DType.BFLOAT16 ? Math.abs(expected) / 128 : 0;
            if (Math.abs(got - expected) > tolerance) {
                wrong++;
                first = first < 0 ? i : first;
            }
        }
        if (wrong > 0) {
            throw new AssertionError(what + " " + dtype + " " + op + " count=" + count + ": " + wrong
                    + " elements differ from the float64 reference, first at " + first);
        }
        System.out.println("count=" + count + " all-reduce " + what + " " + dtype + " " + op + ": equal to the float64 reference");
    }

    /** Allocates and closes 20 heap memories of 5 MiB: the GPU's free memory must come back (the heap reuses its space). */
    private static void allocationsLeaveNothingBehind(ProcessGroup group, NvshmemTransport nvshmem) {
        CudaCrossProcessWorker.allocationsLeaveNothingBehind(group, nvshmem.cudaTransport().driver(), "nvshmem-leak",
                "heap allocations");
    }

    private static void check(boolean ok, String what) {
        if (!ok) {
            throw new AssertionError(what);
        }
    }
}
