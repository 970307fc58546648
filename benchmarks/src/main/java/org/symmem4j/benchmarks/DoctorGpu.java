package org.symmem4j.benchmarks;

import java.io.IOException;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.TimeUnit;
import org.symmem4j.benchmarks.GpuAllReduceBench.Cell;
import org.symmem4j.gradsync.ThresholdTable;
import org.symmem4j.parallel.Algorithm;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.DeviceCommunicator;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.ReduceOp;
import org.symmem4j.parallel.SymmetricMemory;
import org.symmem4j.parallel.cuda.CudaTransport;
import org.symmem4j.parallel.cuda.ffi.CudaDriver;
import org.symmem4j.parallel.cuda.ffi.Nccl;
import org.symmem4j.parallel.group.InJvmWorld;

/**
 * The doctor's GPU sections: what the GPUs are and how they are linked ({@link #describe}), and a short
 * graph-captured bf16 all-reduce on every GPU of this machine, symmem4j's kernels against NCCL in the same run,
 * with the algorithm table's choice beside the fastest ({@link #benchmark}); the rows it calibrates can be written
 * to a thresholds file a user ships ({@code -Dsymmem4j.thresholds} or {@code ~/.symmem4j/thresholds.properties}).
 * The timings reuse {@link GpuAllReduceBench}'s (CUDA events around a replayed graph of many calls).
 */
final class DoctorGpu {

    /** {@code CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED} (CUDA 12.1+). */
    static final int ATTRIBUTE_MULTICAST_SUPPORTED = 132;
    /** The candidates timed per size: symmem4j's two kernels and NCCL's ring/tree. */
    private static final Algorithm[] CANDIDATES = {Algorithm.ONE_SHOT, Algorithm.TWO_SHOT, Algorithm.NCCL};
    /** How long {@code nvidia-smi topo -m} may take before the doctor gives up on it. */
    private static final long TOPOLOGY_SECONDS = 10;

    private DoctorGpu() {
    }

    /**
     * Prints the {@code == gpus} section: the CUDA driver's version, NCCL's, each GPU (name, compute
     * capability, SMs, whether it reports NVLink multicast), the peer-access matrix, and {@code nvidia-smi topo -m}
     * (the links: NVLink counts, PCIe paths) when that tool is on the path.
     *
     * @param out where to print
     * @return the number of GPUs (0 without a CUDA driver)
     */
    static int describe(PrintStream out) {
        out.println("== gpus");
        if (!CudaDriver.available()) {
            out.println("none (" + CudaDriver.unavailableReason() + ")");
            return 0;
        }
        CudaDriver driver = CudaDriver.get();
        int count = driver.deviceCount();
        int version = driver.driverVersion();
        out.println(String.format(Locale.ROOT, "count=%d cuda-driver=%d.%d nccl=%s", count, version / 1000,
                (version % 1000) / 10, Nccl.available() ? ncclVersion(Nccl.get().version()) : "absent"));
        int[] devices = new int[count];
        for (int i = 0; i < count; i++) {
            devices[i] = driver.device(i);
            int d = devices[i];
            out.println(String.format(Locale.ROOT, "gpu %d: %s sm_%d%d sms=%d multicast=%s", i, driver.deviceName(d),
                    driver.attribute(d, CudaDriver.ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
                    driver.attribute(d, CudaDriver.ATTRIBUTE_COMPUTE_CAPABILITY_MINOR), driver.multiprocessorCount(d),
                    multicast(driver, d)));
        }
        if (count > 1) {
            out.println("peer access (row reads column's memory directly: the one-shot/two-shot kernels need it):");
            StringBuilder header = new StringBuilder("      ");
            for (int j = 0; j < count; j++) {
                header.append(String.format(Locale.ROOT, " gpu%-2d", j));
            }
            out.println(header);
            for (int i = 0; i < count; i++) {
                StringBuilder row = new StringBuilder(String.format(Locale.ROOT, "gpu%-2d ", i));
                for (int j = 0; j < count; j++) {
                    row.append(String.format(Locale.ROOT, " %-5s", i == j ? "-"
                            : driver.canAccessPeer(devices[i], devices[j]) ? "yes" : "NO"));
                }
                out.println(row);
            }
        }
        out.println("links (nvidia-smi topo -m):");
        for (String line : topology()) {
            out.println("  " + line);
        }
        return count;
    }

    /** Whether the GPU reports NVLink multicast; drivers before CUDA 12.1 do not know the attribute. */
    private static String multicast(CudaDriver driver, int device) {
        try {
            return driver.attribute(device, ATTRIBUTE_MULTICAST_SUPPORTED) == 1
                    ? "reported (symmem4j never uses NVLink multicast)" : "no";
        } catch (RuntimeException e) {
            return "unknown (" + e.getMessage() + ")";
        }
    }

    /** NCCL's version code (e.g. 22803) as major.minor.patch. */
    static String ncclVersion(int code) {
        return code >= 10000 ? code / 10000 + "." + (code / 100) % 100 + "." + code % 100
                : code / 1000 + "." + (code / 100) % 10 + "." + code % 100;
    }

    /** The lines of {@code nvidia-smi topo -m}, or one line saying why there are none. */
    private static List<String> topology() {
        try {
            Process p = new ProcessBuilder("nvidia-smi", "topo", "-m").redirectErrorStream(true).start();
            p.getOutputStream().close();
            if (!p.waitFor(TOPOLOGY_SECONDS, TimeUnit.SECONDS)) {
                p.destroyForcibly();
                return List.of("not shown: nvidia-smi topo -m took over " + TOPOLOGY_SECONDS + " s");
            }
            List<String> lines = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8).lines()
                    .filter(l -> !l.isBlank()).toList();
            return p.exitValue() == 0 ? lines : List.of("not shown: nvidia-smi topo -m exited " + p.exitValue()
                    + (lines.isEmpty() ? "" : ": " + lines.getFirst()));
        } catch (IOException e) {
            return List.of("not shown: nvidia-smi is not on the path (" + e.getMessage() + ")");
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return List.of("not shown: interrupted");
        }
    }

    /**
     * Prints the {@code == gpu all-reduce} section: on every GPU (one rank each, as threads), bf16 in-place sums
     * graph-captured, the median of {@code reps} timings per candidate and size, the table's choice and the fastest;
     * then the threshold row those timings calibrate, written to {@code thresholds} when given.
     *
     * @param out        where to print
     * @param gpus       the GPUs found (at least 2)
     * @param sizes      message sizes, ascending, bytes
     * @param reps       timings per cell
     * @param table      the table symmem4j uses now
     * @param thresholds the file to write the calibrated row to, or null
     * @throws IOException when the file cannot be written
     */
    static void benchmark(PrintStream out, int gpus, List<Long> sizes, int reps, ThresholdTable table, Path thresholds)
            throws IOException {
        int world = Math.min(8, gpus);
        long maxBytes = sizes.getLast();
        CudaTransport cuda = CudaTransport.create();
        String[] transport = new String[1];
        List<List<Cell>> perRank = InJvmWorld.runOnEveryRank(world, GroupOptions.defaults().withTimeout(Duration.ofSeconds(120)),
                cuda, group -> {
            List<Cell> cells = new ArrayList<>();
            try (Communicator comm = Communicator.create(group);
                 SymmetricMemory mem = SymmetricMemory.allocate(group, maxBytes)) {
                DeviceCommunicator gpu = comm.unwrap(DeviceCommunicator.class).orElseThrow();
                transport[0] = comm.transportName();
                GpuAllReduceBench.fillRandom(mem, maxBytes, group.rank());
                for (long bytes : sizes) {
                    long count = bytes / DType.BFLOAT16.byteSize();
                    for (Algorithm a : CANDIDATES) {
                        if (!comm.supports(a, DType.BFLOAT16, ReduceOp.SUM, count)) {
                            cells.add(Cell.notRun(DType.BFLOAT16, bytes, a.name(), true));
                            continue;
                        }
                        Runnable op = () -> comm.allReduce(mem, 0, count, DType.BFLOAT16, ReduceOp.SUM, a);
                        cells.add(Cell.measured(DType.BFLOAT16, bytes, a.name(), true,
                                GpuAllReduceBench.time(comm, gpu, op, bytes, true, reps)));
                    }
                }
                gpu.synchronize();
            }
            return cells;
        });
        List<Cell> cells = perRank.getFirst();
        out.println("== gpu all-reduce " + transport[0] + ", " + world + " GPUs (one rank each), bf16 sum, graph-captured,"
                + " median of " + reps + " timings, microseconds per call");
        out.println(String.format(Locale.ROOT, "%12s  %10s  %10s  %10s  %-10s  %-10s", "bytes", "ONE_SHOT", "TWO_SHOT",
                "NCCL", "table", "fastest"));
        for (long bytes : sizes) {
            StringBuilder row = new StringBuilder(String.format(Locale.ROOT, "%12d", bytes));
            String fastest = "-";
            double best = Double.MAX_VALUE;
            for (Algorithm a : CANDIDATES) {
                double t = cells.stream().filter(c -> c.bytes() == bytes && c.variant().equals(a.name()))
                        .mapToDouble(Cell::micros).findFirst().orElse(Double.NaN);
                row.append(Double.isNaN(t) ? String.format(Locale.ROOT, "  %10s", "-")
                        : String.format(Locale.ROOT, "  %10.2f", t));
                if (!Double.isNaN(t) && t < best) {
                    best = t;
                    fastest = a.name();
                }
            }
            row.append(String.format(Locale.ROOT, "  %-10s  %-10s", table.lookup(transport[0], world, DType.BFLOAT16, bytes),
                    fastest));
            out.println(row);
        }
        String row = GpuAllReduceBench.calibratedRow(cells, transport[0] + "." + world, DType.BFLOAT16);
        out.println("calibrated row (these sizes only; bench/gpu's GpuAllReduceBench --thresholds measures 1 KiB-256 MiB,"
                + " bf16 and fp32): " + row);
        if (thresholds != null) {
            Path parent = thresholds.toAbsolutePath().getParent();
            if (parent != null) {
                Files.createDirectories(parent);
            }
            Files.writeString(thresholds, "# written by symmem4j-doctor on " + world + " x " + transport[0] + "\n" + row + "\n",
                    StandardCharsets.UTF_8);
            out.println("wrote " + thresholds + " (use it with -D" + ThresholdTable.PROPERTY + "=" + thresholds
                    + ", or copy it to ~/.symmem4j/thresholds.properties)");
        }
    }
}
