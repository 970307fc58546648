package org.symmem4j.parallel.cuda;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;
import org.symmem4j.parallel.Algorithm;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.DeviceCommunicator;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.ReduceOp;
import org.symmem4j.parallel.SymmetricMemory;
import org.symmem4j.parallel.TransportCapabilities;
import org.symmem4j.parallel.TransportCapabilities.Capability;
import org.symmem4j.parallel.cuda.ffi.CudaDriver;
import org.symmem4j.parallel.cuda.ffi.Nccl;
import org.symmem4j.parallel.group.InJvmWorld;
import org.symmem4j.parallel.multinode.NodeTopology;

/**
 * A GPU group spanning pretend machines ({@code symmem4j.pretend.ranks.per.node}): one rank per GPU, 2 per machine on 4
 * GPUs or more (1 per machine on 2 or 3), so the CUDA transport gives the hierarchical communicator (our kernels
 * inside a machine, NCCL between). Checks every collective against the float64 reference (values whose sums are
 * exact in float32, so equality means bitwise and the same on every rank), the flat NCCL all-reduce beside the
 * hierarchical one, and that symmetric memory across machines is refused. Needs 2 GPUs (NCCL: a GPU per rank).
 */
@ExtendWith(GpuTestWatchdog.class)
class CudaHierarchicalTest {

    static float value(int rank, long i) {
        return (float) (((i * 7 + rank * 13L) % 101 - 50) * 0.25);
    }

    @Test
    void collectivesAcrossPretendMachinesMatchTheFloat64Reference() {
        GpuTestSupport.assumeGpuAndKernels();
        Assumptions.assumeTrue(Nccl.available(), "no NCCL: " + Nccl.unavailableReason());
        int gpus = CudaDriver.get().deviceCount();
        Assumptions.assumeTrue(gpus >= 2, "NCCL between pretend machines needs a GPU per rank; this machine has " + gpus);
        int ranks = Math.min(gpus, CudaKernels.MAX_RANKS);
        int perNode = ranks >= 4 && ranks % 2 == 0 ? 2 : 1;
        ranks = ranks / perNode * perNode;
        String before = System.getProperty(NodeTopology.PRETEND_PROPERTY);
        System.setProperty(NodeTopology.PRETEND_PROPERTY, Integer.toString(perNode));
        int world = ranks;
        try (CudaTransport cuda = CudaTransport.create()) {
            List<String> problems = InJvmWorld.runOnEveryRank(world, GroupOptions.defaults().withTimeout(Duration.ofSeconds(120)),
                    cuda, group -> {
                List<String> found = new ArrayList<>();
                UnsupportedOperationException refused = assertThrows(UnsupportedOperationException.class,
                        () -> SymmetricMemory.allocate(group, 4096));
                assertTrue(refused.getMessage().contains("machines"), refused.getMessage());
                // asked before the call, the transport gives the same refusal word for word
                TransportCapabilities caps = group.transport().capabilities(group);
                assertEquals(CudaTransport.capabilities(NodeTopology.of(group), null), caps);
                assertEquals(caps.get(Capability.ALLOCATE).reason(), refused.getMessage());
                try (Communicator comm = Communicator.create(group); Arena arena = Arena.ofConfined()) {
                    assertTrue(comm.transportName().startsWith("hierarchical("), comm.transportName());
                    assertTrue(comm.supports(Algorithm.HIERARCHICAL) && comm.supports(Algorithm.NCCL));
                    DeviceCommunicator device = comm.unwrap(DeviceCommunicator.class).orElseThrow();
                    int me = group.rank();
                    for (Capability inPlace : List.of(Capability.IN_PLACE_REDUCE_SCATTER, Capability.IN_PLACE_ALL_GATHER)) {
                        UnsupportedOperationException shards = assertThrows(UnsupportedOperationException.class,
                                () -> {
                                    if (inPlace == Capability.IN_PLACE_REDUCE_SCATTER) {
                                        comm.reduceScatter((SymmetricMemory) null, 0, 1, DType.FLOAT32, ReduceOp.SUM);
                                    } else {
                                        comm.allGather((SymmetricMemory) null, 0, 1, DType.FLOAT32);
                                    }
                                });
                        assertEquals(caps.get(inPlace).reason(), shards.getMessage());
                    }
                    for (long count : new long[] {1000, 1_000_003, 3_000_000}) {
                        long bytes = count * Float.BYTES;
                        MemorySegment host = arena.allocate(bytes, 16);
                        MemorySegment buffer = device.allocateDevice(bytes);
                        for (Algorithm algorithm : List.of(Algorithm.HIERARCHICAL, Algorithm.NCCL)) {
                            for (long i = 0; i < count; i++) {
                                host.setAtIndex(ValueLayout.JAVA_FLOAT, i, value(me, i));
                            }
                            device.copyFromHost(buffer, host);
                            comm.allReduce(buffer, count, DType.FLOAT32, ReduceOp.SUM, algorithm);
                            device.synchronize();
                            device.copyToHost(host, buffer);
                            for (long i = 0; i < count; i++) {
                                double expected = 0;
                                for (int p = 0; p < world; p++) {
                                    expected += value(p, i);
                                }
                                if (host.getAtIndex(ValueLayout.JAVA_FLOAT, i) != (float) expected) {
                                    found.add(algorithm + " all-reduce count=" + count + " element " + i + ": "
                                            + host.getAtIndex(ValueLayout.JAVA_FLOAT, i) + " expected " + expected);
                                    break;
                                }
                            }
                        }
                        device.freeDevice(buffer);
                    }
                    // reduce-scatter: rank r gets block r summed over every rank
                    long recvCount = 250_001;
                    MemorySegment send = device.allocateDevice(recvCount * world * Float.BYTES);
                    MemorySegment recv = device.allocateDevice(recvCount * Float.BYTES);
                    MemorySegment host = arena.allocate(recvCount * world * Float.BYTES, 16);
                    for (long i = 0; i < recvCount * world; i++) {
                        host.setAtIndex(ValueLayout.JAVA_FLOAT, i, value(me, i));
                    }
                    device.copyFromHost(send, host);
                    comm.reduceScatter(send, recv, recvCount, DType.FLOAT32, ReduceOp.SUM);
                    device.synchronize();
                    device.copyToHost(host.asSlice(0, recvCount * Float.BYTES), recv);
                    for (long j = 0; j < recvCount; j++) {
                        double expected = 0;
                        for (int p = 0; p < world; p++) {
                            expected += value(p, me * recvCount + j);
                        }
                        if (host.getAtIndex(ValueLayout.JAVA_FLOAT, j) != (float) expected) {
                            found.add("reduce-scatter element " + j + " of rank " + me + "'s block: "
                                    + host.getAtIndex(ValueLayout.JAVA_FLOAT, j) + " expected " + expected);
                            break;
                        }
                    }
                    // all-gather: rank q's block bitwise from rank q, in rank order
                    for (long j = 0; j < recvCount; j++) {
                        host.setAtIndex(ValueLayout.JAVA_FLOAT, j, value(me, j) + 1000f * me);
                    }
                    device.copyFromHost(recv, host.asSlice(0, recvCount * Float.BYTES));
                    comm.allGather(recv, send, recvCount, DType.FLOAT32);
                    device.synchronize();
                    device.copyToHost(host, send);
                    for (int q = 0; q < world && found.isEmpty(); q++) {
                        for (long j = 0; j < recvCount; j++) {
                            if (host.getAtIndex(ValueLayout.JAVA_FLOAT, q * recvCount + j) != value(q, j) + 1000f * q) {
                                found.add("all-gather: element " + j + " of rank " + q + "'s block on rank " + me);
                                break;
                            }
                        }
                    }
                    // broadcast from the last rank (another machine than rank 0's)
                    int root = world - 1;
                    for (long j = 0; j < recvCount; j++) {
                        host.setAtIndex(ValueLayout.JAVA_FLOAT, j, me == root ? value(root, j) : -1f);
                    }
                    device.copyFromHost(recv, host.asSlice(0, recvCount * Float.BYTES));
                    comm.broadcast(recv, recvCount, DType.FLOAT32, root);
                    device.synchronize();
                    device.copyToHost(host.asSlice(0, recvCount * Float.BYTES), recv);
                    for (long j = 0; j < recvCount; j++) {
                        if (host.getAtIndex(ValueLayout.JAVA_FLOAT, j) != value(root, j)) {
                            found.add("broadcast from rank " + root + ": element " + j + " on rank " + me);
                            break;
                        }
                    }
                    comm.barrier();
                    device.freeDevice(send);
                    device.freeDevice(recv);
                }
                cuda.release(group);
                return String.join("\n", found);
            });
            for (String p : problems) {
                assertEquals("", p);
            }
        } finally {
            if (before == null) {
                System.clearProperty(NodeTopology.PRETEND_PROPERTY);
            } else {
                System.setProperty(NodeTopology.PRETEND_PROPERTY, before);
            }
        }
    }
}
