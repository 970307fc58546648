package org.symmem4j.examples.bench;

import java.io.IOException;
import java.lang.foreign.MemorySegment;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import org.symmem4j.parallel.CommunicatorOptions;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.InJvmWorld;
import org.symmem4j.parallel.SignalOp;
import org.symmem4j.parallel.cuda.CudaCommunicator;
import org.symmem4j.parallel.cuda.CudaDriver;
import org.symmem4j.parallel.cuda.CudaSymmetricMemory;
import org.symmem4j.parallel.cuda.CudaTransport;
import org.symmem4j.parallel.cuda.Nccl;

/**
 * Pipeline hand-off latency between two GPUs: a microbatch crossing stages as a put into the next
 * stage's symmetric buffer plus a signal, against NCCL send/recv, in the same run. Measured as a
 * ping-pong (GPU 0 hands off to GPU 1, which hands the same size back), one-way = round trip / 2,
 * eager (one launch per op) and graph-captured, 1 KiB … 16 MiB; medians of CUDA-event timings on
 * GPU 0's stream.
 *
 * <p>symmem4j: {@code symmem_put_signal} (copy into the peer's buffer over NVLink, then a
 * system-scope release add on the peer's signal slot) and {@code symmem_wait_signal_consume}
 * (acquire-wait for the slot, then take the count back, so a graph replays). NCCL:
 * {@code ncclSend}/{@code ncclRecv} on plain {@code cuMemAlloc} buffers.
 *
 * <pre>
 *   GpuHandoffBench [--out report.md] [--reps R]
 * </pre>
 */
public final class GpuHandoffBench {

    private static final long[] SIZES = {1L << 10, 4L << 10, 16L << 10, 64L << 10, 256L << 10, 1L << 20, 4L << 20,
        16L << 20};
    private static final String[] VARIANTS = {"symmem put+signal", "NCCL send/recv"};
    /** Signal slots of the ping-pong: slot 0 on GPU 1 says "GPU 0's message is in", slot 1 on GPU 0 the reply. */
    private static final int TO_ONE = 0;
    private static final int TO_ZERO = 1;

    private GpuHandoffBench() {
    }

    record Cell(long bytes, String variant, boolean graph, double oneWayMicros) {
    }

    public static void main(String[] args) throws IOException {
        Path out = null;
        int reps = 7;
        for (int i = 0; i < args.length; i++) {
            switch (args[i]) {
                case "--out" -> out = Path.of(args[++i]);
                case "--reps" -> reps = Integer.parseInt(args[++i]);
                default -> throw new IllegalArgumentException("unknown argument " + args[i]);
            }
        }
        CudaTransport cuda = CudaTransport.create();
        int devices = CudaDriver.get().deviceCount();
        if (devices < 2) {
            throw new IllegalStateException("the hand-off benchmark needs 2 GPUs; found " + devices);
        }
        long maxBytes = SIZES[SIZES.length - 1];
        int repeats = reps;
        String[] deviceName = new String[1];
        List<List<Cell>> perRank = InJvmWorld.runOnEveryRank(2, GroupOptions.defaults().withTimeout(Duration.ofSeconds(300)),
                group -> {
            List<Cell> cells = new ArrayList<>();
            int me = group.rank();
            int peer = 1 - me;
            try (CudaCommunicator comm = (CudaCommunicator) cuda.communicator(group, CommunicatorOptions.defaults());
                 CudaSymmetricMemory inbox = (CudaSymmetricMemory) cuda.allocate(group, maxBytes)) {
                deviceName[0] = comm.deviceName();
                long outbox = comm.deviceMalloc(maxBytes);
                long ncclInbox = comm.deviceMalloc(maxBytes);
                for (long bytes : SIZES) {
                    MemorySegment message = MemorySegment.ofAddress(outbox).reinterpret(bytes);
                    // one round trip: GPU 0 hands off, GPU 1 waits for it and hands the same size back
                    Runnable symmem = me == 0
                            ? () -> {
                                inbox.putWithSignal(peer, message, 0, TO_ONE, 1, SignalOp.ADD);
                                inbox.enqueueWaitSignal(TO_ZERO, 1, true);
                            }
                            : () -> {
                                inbox.enqueueWaitSignal(TO_ONE, 1, true);
                                inbox.putWithSignal(peer, message, 0, TO_ZERO, 1, SignalOp.ADD);
                            };
                    Runnable nccl = me == 0
                            ? () -> {
                                comm.ncclSend(outbox, bytes, peer);
                                comm.ncclRecv(ncclInbox, bytes, peer);
                            }
                            : () -> {
                                comm.ncclRecv(ncclInbox, bytes, peer);
                                comm.ncclSend(outbox, bytes, peer);
                            };
                    for (String variant : VARIANTS) {
                        Runnable roundTrip = variant.startsWith("symmem") ? symmem : nccl;
                        for (boolean graph : new boolean[] {false, true}) {
                            double roundTripMicros = GpuAllReduceBench.time(comm, me, roundTrip, bytes, graph, repeats);
                            cells.add(new Cell(bytes, variant, graph, roundTripMicros / 2));
                        }
                    }
                }
                comm.synchronize();
                comm.free(outbox);
                comm.free(ncclInbox);
            }
            return cells;
        });
        String report = report(perRank.getFirst(), devices, deviceName[0], repeats);
        System.out.print(report);
        if (out != null) {
            Files.writeString(out, report);
        }
    }

    private static String report(List<Cell> cells, int devices, String device, int reps) {
        Map<String, Double> t = new LinkedHashMap<>();
        for (Cell c : cells) {
            t.put(c.bytes() + "|" + c.variant() + "|" + c.graph(), c.oneWayMicros());
        }
        StringBuilder md = new StringBuilder("# GPU pipeline hand-off benchmark\n\n");
        md.append("- date: ").append(Instant.now()).append('\n');
        md.append("- device: 2 of ").append(devices).append(" × ").append(device).append('\n');
        md.append("- CUDA driver ").append(CudaDriver.get().driverVersion());
        if (Nccl.available()) {
            md.append(", NCCL ").append(Nccl.get().version());
        }
        md.append('\n');
        md.append("- method: ping-pong between GPU 0 and GPU 1, one-way = round trip / 2; median of ").append(reps)
                .append(" CUDA-event timings of a batch of round trips (100 up to 1 MiB, 20 above) on GPU 0's stream;")
                .append(" symmem = put into the peer's symmetric buffer + release signal, acquire wait (consuming);")
                .append(" NCCL = ncclSend/ncclRecv on cuMemAlloc buffers; eager = one launch per op, graph = the batch")
                .append(" captured once and replayed.\n\n");
        List<String> misses = new ArrayList<>();
        for (boolean graph : new boolean[] {true, false}) {
            md.append("## ").append(graph ? "graph-captured" : "eager").append("\n\n");
            md.append("| size | symmem put+signal µs | NCCL send/recv µs | speedup | symmem GB/s |\n|---:|---:|---:|---:|---:|\n");
            for (long bytes : SIZES) {
                double ours = t.get(bytes + "|" + VARIANTS[0] + "|" + graph);
                double nccl = t.get(bytes + "|" + VARIANTS[1] + "|" + graph);
                md.append(String.format(Locale.ROOT, "| %s | %.2f | %.2f | %.2f× | %.1f |%n",
                        GpuAllReduceBench.size(bytes), ours, nccl, nccl / ours, bytes / (ours * 1e-6) / 1e9));
                if (graph && bytes == (1L << 10) && ours > 5.0) {
                    misses.add("1 KiB: " + String.format(Locale.ROOT, "%.2f", ours) + " µs (> 5 µs)");
                }
                if (graph && bytes <= (1L << 20) && ours >= nccl) {
                    misses.add(GpuAllReduceBench.size(bytes) + ": " + String.format(Locale.ROOT, "%.2f", ours)
                            + " µs, not faster than NCCL's " + String.format(Locale.ROOT, "%.2f", nccl) + " µs");
                }
            }
            md.append('\n');
        }
        md.append("## Targets (graph-captured): ≤ 5 µs at 1 KiB, faster than NCCL send/recv up to 1 MiB\n\n");
        md.append(misses.isEmpty() ? "All met.\n" : "Not met:\n\n- " + String.join("\n- ", misses) + "\n");
        return md.toString();
    }
}
