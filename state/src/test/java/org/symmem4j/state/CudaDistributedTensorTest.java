package org.symmem4j.state;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.DeviceCommunicator;
import org.symmem4j.parallel.Transport;
import org.symmem4j.parallel.cuda.CudaThreadRanksTestBase;
import org.symmem4j.parallel.cuda.GpuTestWatchdog;
import org.symmem4j.parallel.group.InJvmWorld;
import org.symmem4j.state.DistributedTensor.Transfer;

/**
 * The distributed tensor on GPUs (two ranks, one GPU each where there are two, else sharing one): device shards,
 * zero-copy reads of a peer's shard by a kernel, rectangles across shards by the copy engine and by a kernel, put
 * with signal, redistribution between rows and column blocks, gather; every value against the reference
 * {@code row * 1000 + column}, read back to the host. Skipped without a GPU.
 */
@ExtendWith(GpuTestWatchdog.class)
class CudaDistributedTensorTest extends CudaThreadRanksTestBase {

    private static final long ROWS = 37;
    private static final long COLS = 11;

    /** Where the GPU memory comes from (every rank of a group must get the same instance). */
    private static double value(long row, long column) {
        return row * 1000.0 + column;
    }

    private static double[] reference(long row, long rows, long column, long columns) {
        double[] out = new double[(int) (rows * columns)];
        int i = 0;
        for (long r = row; r < row + rows; r++) {
            for (long c = column; c < column + columns; c++) {
                out[i++] = value(r, c);
            }
        }
        return out;
    }

    /** Copies a device buffer of this rank to the host (after this rank's stream has run). */
    private static double[] toHost(DeviceCommunicator gpu, MemorySegment device, long doubles) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment host = a.allocate(doubles * Double.BYTES, 16);
            gpu.copyToHost(host, device);
            return host.toArray(ValueLayout.JAVA_DOUBLE);
        }
    }

    private static void fillLocal(DeviceCommunicator gpu, DistributedTensor t, int rank) {
        double[] mine = reference(t.firstRow(rank), t.rows(rank), t.firstColumn(rank), t.columns(rank));
        try (Arena a = Arena.ofConfined()) {
            MemorySegment host = a.allocate(mine.length * (long) Double.BYTES, 16);
            MemorySegment.copy(mine, 0, host, ValueLayout.JAVA_DOUBLE, 0, mine.length);
            gpu.copyFromHost(t.localShard(), host);
        }
    }

    private static void checkLocal(DeviceCommunicator gpu, DistributedTensor t, int rank) {
        assertArrayEquals(reference(t.firstRow(rank), t.rows(rank), t.firstColumn(rank), t.columns(rank)),
                toHost(gpu, t.localShard(), t.rows(rank) * t.columns(rank)), t.toString());
    }

    @Test
    void shardsSlicesPutsRedistributionAndGatherOnGpus() {
        Transport transport = gpuTransport();
        InJvmWorld.runOnEveryRank(2, OPTIONS, transport, group -> {
            int me = group.rank();
            int peer = 1 - me;
            try (Communicator comm = Communicator.create(group)) {
                DeviceCommunicator gpu = comm.unwrap(DeviceCommunicator.class).orElseThrow();
                UnsupportedOperationException onGroup = assertThrows(UnsupportedOperationException.class,
                        () -> DistributedTensor.create(group, ElementType.FLOAT64, ROWS, COLS));
                assertTrue(onGroup.getMessage().contains("Communicator"), onGroup.getMessage());
                MemorySegment scratch = gpu.allocateDevice(ROWS * COLS * Double.BYTES);
                try (DistributedTensor t = DistributedTensor.create(comm, TensorSharding.rows(), ElementType.FLOAT64,
                        ROWS, COLS)) {
                    assertTrue(t.onDevice());
                    fillLocal(gpu, t, me);
                    t.barrier();
                    // the peer's shard, zero-copy: a kernel on this GPU reads it directly
                    gpu.copyByKernelAsync(scratch, t.shard(peer));
                    assertArrayEquals(reference(t.firstRow(peer), t.rows(peer), 0, COLS),
                            toHost(gpu, scratch, t.rows(peer) * COLS), "the peer's shard read by a kernel");
                    // a rectangle across both shards, by the copy engine and by a kernel
                    for (Transfer how : Transfer.values()) {
                        t.get(10, 20, 3, 5, scratch, how);
                        assertArrayEquals(reference(10, 20, 3, 5), toHost(gpu, scratch, 100), how.name());
                        t.getRows(15, 6, scratch, how);
                        assertArrayEquals(reference(15, 6, 0, COLS), toHost(gpu, scratch, 6 * COLS), how.name());
                    }
                    assertThrows(IllegalArgumentException.class,
                            () -> t.getRows(0, 1, MemorySegment.ofArray(new double[(int) COLS]), Transfer.COPY_ENGINE));
                    t.barrier();
                    // rank 0 puts -1 into rows 16..21 (both shards) with a signal; each owner waits on its stream
                    if (me == 0) {
                        double[] neg = new double[(int) (6 * COLS)];
                        java.util.Arrays.fill(neg, -1);
                        try (Arena a = Arena.ofConfined()) {
                            MemorySegment host = a.allocate(neg.length * (long) Double.BYTES, 16);
                            MemorySegment.copy(neg, 0, host, ValueLayout.JAVA_DOUBLE, 0, neg.length);
                            gpu.copyFromHost(scratch, host);
                        }
                        assertArrayEquals(new int[] {0, 1}, t.putWithSignal(16, 6, 0, COLS, scratch.asSlice(0,
                                6 * COLS * Double.BYTES), 2));
                    }
                    t.awaitPuts(2, 1, 0);
                    double[] shard = toHost(gpu, t.localShard(), t.rows(me) * COLS);
                    double[] expected = reference(t.firstRow(me), t.rows(me), 0, COLS);
                    for (int i = 0; i < expected.length; i++) {
                        long row = t.firstRow(me) + i / COLS;
                        if (row >= 16 && row < 22) {
                            expected[i] = -1;
                        }
                    }
                    assertArrayEquals(expected, shard, "after the signalled put");
                    t.barrier();
                    fillLocal(gpu, t, me); // back to the reference
                    t.barrier();
                    for (Transfer how : Transfer.values()) {
                        try (DistributedTensor columns = t.redistribute(TensorSharding.blocks(1, 2), how);
                             DistributedTensor rows = columns.redistribute(TensorSharding.rows(), how)) {
                            checkLocal(gpu, columns, me);
                            checkLocal(gpu, rows, me);
                            columns.gather(1, me == 1 ? scratch : null, how);
                            if (me == 1) {
                                assertArrayEquals(reference(0, ROWS, 0, COLS), toHost(gpu, scratch, ROWS * COLS),
                                        "gather of the column blocks, " + how);
                            }
                        }
                    }
                }
                comm.barrier();
                gpu.freeDevice(scratch);
            }
            return null;
        });
    }
}
