package org.symmem4j.benchmarks;

import java.io.IOException;
import java.io.PrintStream;
import java.lang.management.ManagementFactory;
import java.nio.file.FileStore;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.Callable;
import java.util.stream.Stream;
import org.symmem4j.gradsync.ThresholdTable;
import org.symmem4j.parallel.Algorithm;
import org.symmem4j.parallel.BuildInfo;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.KnownSettings;
import org.symmem4j.parallel.Transport;
import org.symmem4j.parallel.cuda.ffi.CudaDriver;
import org.symmem4j.parallel.cuda.ffi.Nccl;
import org.symmem4j.parallel.cuda.ffi.Nvshmem;
import org.symmem4j.parallel.group.InJvmWorld;
import org.symmem4j.parallel.host.SharedMemoryTransport;
import org.symmem4j.parallel.mpi.Mpi;
import picocli.CommandLine;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;
import picocli.CommandLine.Spec;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.ParameterException;

/**
 * {@code symmem4j-doctor}: what symmem4j will choose on this machine, and how fast it is here. Prints,
 * in sections that start with {@code == }: the build; the JVM and the flags symmem4j needs (present or
 * missing, with the fix), and the {@code symmem4j.*} / {@code SYMMEM4J_*} names set that symmem4j does not know; cores, NUMA nodes and {@code /dev/shm}; which native libraries load (CUDA
 * driver, NCCL, NVSHMEM, Open MPI); the GPUs, their peer access and links ({@link DoctorGpu#describe});
 * every host transport's capabilities; the threshold table's algorithm per message size; a short all-reduce
 * benchmark on threads (every candidate algorithm per size, median microseconds, with the table's choice beside
 * the fastest) and Open MPI's MPI_Allreduce between processes beside it ({@link DoctorMpi}); the all-gather and
 * the pipeline hand-off beside Open MPI's ({@link DoctorPatterns#host}); with 2 GPUs or more, the all-reduce on the
 * GPUs against NCCL ({@link DoctorGpu#benchmark}), whose calibrated row {@code --write-thresholds} writes, and the
 * hand-off and tensor-parallel activations against NCCL ({@link DoctorPatterns#gpu}). It ends with what it did not
 * measure.
 */
@Command(name = "symmem4j-doctor", mixinStandardHelpOptions = true,
        description = "Prints what symmem4j will choose on this machine (transports, capabilities, algorithm table,"
                + " JVM flags, /dev/shm, native libraries, GPUs and their links) and times a short host all-reduce at a"
                + " few sizes, the all-gather and pipeline hand-off against Open MPI, and on 2 GPUs or more the all-reduce,"
                + " the hand-off and the tensor-parallel activations against NCCL.")
public final class Doctor implements Callable<Integer> {

    private static final long KIB = 1024;
    /** The sizes of the decision table printed (the benchmark's come from --sizes). */
    private static final long[] TABLE_SIZES = {KIB, 16 * KIB, 256 * KIB, 4 * KIB * KIB, 64 * KIB * KIB, 256 * KIB * KIB};
    private static final Algorithm[] CANDIDATES = {Algorithm.ONE_SHOT, Algorithm.TWO_SHOT, Algorithm.RING};

    @Spec
    private CommandSpec spec;

    @Option(names = "--ranks", paramLabel = "N", description = "threads of the all-reduce benchmark (default: 2)")
    private int ranks = 2;
    @Option(names = "--sizes", split = ",", paramLabel = "BYTES",
            description = "message sizes of the benchmark, bytes, multiples of 4 (default: 1024,65536,1048576,16777216)")
    private List<Long> sizes = List.of(KIB, 64 * KIB, KIB * KIB, 16 * KIB * KIB);
    @Option(names = "--no-benchmark", description = "print what will be chosen, measure nothing")
    private boolean noBenchmark;
    @Option(names = "--gpu-sizes", split = ",", paramLabel = "BYTES",
            description = "message sizes of the GPU all-reduce benchmark, bytes, multiples of 4"
                    + " (default: 1024,65536,1048576,16777216,67108864)")
    private List<Long> gpuSizes = List.of(KIB, 64 * KIB, KIB * KIB, 16 * KIB * KIB, 64 * KIB * KIB);
    @Option(names = "--gpu-reps", paramLabel = "R", description = "timings per GPU cell, the median is printed (default: 5)")
    private int gpuReps = 5;
    @Option(names = "--tp-shape", paramLabel = "NxK",
            description = "the tensor-parallel GEMM's N x K timed in the GPU patterns (default: 1792x4096)")
    private String tpShape = "1792x4096";
    @Option(names = "--tp-rows", paramLabel = "M",
            description = "the tensor-parallel GEMM's M, the group's rows (tokens), in the GPU patterns (default: 4096)")
    private int tpRows = 4096;
    @Option(names = "--write-thresholds", paramLabel = "FILE",
            description = "write the GPU all-reduce row the benchmark calibrates to FILE (a thresholds file to ship)")
    private Path writeThresholds;

    private final PrintStream out;

    Doctor(PrintStream out) {
        this.out = out;
    }

    /**
     * Runs the doctor; exits with 0, or 2 for bad arguments.
     *
     * @param args the options ({@code --help} lists them)
     */
    public static void main(String[] args) {
        System.exit(new CommandLine(new Doctor(System.out)).execute(args));
    }

    @Override
    public Integer call() throws IOException {
        if (ranks < 2 || sizes.isEmpty() || sizes.stream().anyMatch(b -> b < 4 || b % 4 != 0)) {
            throw new ParameterException(spec.commandLine(), "--ranks=" + ranks + " --sizes=" + sizes
                    + " expected ranks >= 2 and sizes that are positive multiples of 4 bytes (float32 elements);"
                    + " fix: e.g. --ranks 2 --sizes 1024,65536");
        }
        if (gpuReps < 1 || gpuSizes.isEmpty() || gpuSizes.stream().anyMatch(b -> b < 4 || b % 4 != 0)) {
            throw new ParameterException(spec.commandLine(), "--gpu-reps=" + gpuReps + " --gpu-sizes=" + gpuSizes
                    + " expected reps >= 1 and sizes that are positive multiples of 4 bytes;"
                    + " fix: e.g. --gpu-reps 5 --gpu-sizes 1024,1048576");
        }
        if (!tpShape.matches("[1-9][0-9]*x[1-9][0-9]*") || tpRows < 1) {
            throw new ParameterException(spec.commandLine(), "--tp-shape=" + tpShape + " --tp-rows=" + tpRows
                    + " expected N x K as two positive integers joined by x, and rows >= 1; fix: e.g. --tp-shape 1792x4096"
                    + " --tp-rows 4096");
        }
        if (writeThresholds != null && noBenchmark) {
            throw new ParameterException(spec.commandLine(), "--write-thresholds " + writeThresholds + " with --no-benchmark:"
                    + " the rows come from the GPU benchmark; fix: drop one of the two");
        }
        out.println("symmem4j doctor");
        build();
        jvm();
        machine();
        libraries();
        int gpus = DoctorGpu.describe(out);
        transports();
        ThresholdTable table = ThresholdTable.load();
        decisionTable(table);
        if (!noBenchmark) {
            double[] ours = benchmark(table);
            List<Long> sorted = sizes.stream().sorted().toList();
            DoctorMpi.Result mpi = DoctorMpi.measure(ranks, sorted);
            DoctorMpi.compare(out, ranks, sorted, ours, mpi);
            DoctorPatterns.host(out, ranks, sorted, mpi);
            if (gpus >= 2) {
                List<Long> gpuSorted = gpuSizes.stream().sorted().toList();
                DoctorGpu.benchmark(out, gpus, gpuSorted, gpuReps, table, writeThresholds);
                DoctorPatterns.gpu(out, gpus, gpuSorted, gpuReps, tpShape, tpRows);
            }
        }
        out.println("== not measured");
        out.println("host processes (host-shm): bench/host-allreduce.sh times threads against processes and Open MPI with"
                + " repetitions");
        if (gpus < 2) {
            out.println("GPU all-reduce against NCCL: needs 2 GPUs or more, this machine has " + gpus
                    + (writeThresholds == null ? "" : " (so " + writeThresholds + " was not written)"));
        }
        out.println("fp32 and 128 MiB+ GPU rows, peer bandwidth: bench/gpu/ (GpuAllReduceBench --thresholds, peer_limits.cu)");
        return 0;
    }

    private void build() {
        BuildInfo b = BuildInfo.current();
        out.println("== build");
        out.println("version=" + b.version() + " commit=" + b.commit() + " java=" + b.java());
    }

    private void jvm() {
        out.println("== jvm");
        out.println("java.vm=" + System.getProperty("java.vm.name") + " " + System.getProperty("java.vm.version")
                + " home=" + System.getProperty("java.home"));
        List<String> args = ManagementFactory.getRuntimeMXBean().getInputArguments();
        boolean nativeAccess = Doctor.class.getModule().isNativeAccessEnabled()
                && args.stream().anyMatch(a -> a.startsWith("--enable-native-access"));
        flag("--enable-native-access=ALL-UNNAMED", nativeAccess,
                "without it every FFM binding (CUDA, NCCL, MPI, mmap of /dev/shm) warns, and a later JDK refuses");
        flag("--add-modules=jdk.incubator.vector", ModuleLayer.boot().findModule("jdk.incubator.vector").isPresent(),
                "without it host reductions fall back to scalar loops");
        flag("--sun-misc-unsafe-memory-access=allow", args.contains("--sun-misc-unsafe-memory-access=allow"),
                "needed only with DL4J (JavaCPP uses sun.misc.Unsafe)");
        List<String> unknown = KnownSettings.unknown();
        out.println("settings: " + (unknown.isEmpty() ? "no unknown symmem4j.* property or SYMMEM4J_* variable"
                : "UNKNOWN " + String.join(", ", unknown) + " (symmem4j reads no such name; fix: correct each name, or"
                        + " unset it; docs/configuration.md lists every setting)"));
    }

    private void flag(String flag, boolean present, String why) {
        out.println("flag " + flag + ": " + (present ? "present" : "MISSING (" + why + "; fix: add " + flag + ")"));
    }

    private void machine() throws IOException {
        out.println("== machine");
        int numa = 0;
        Path nodes = Path.of("/sys/devices/system/node");
        if (Files.isDirectory(nodes)) {
            try (Stream<Path> list = Files.list(nodes)) {
                numa = (int) list.filter(p -> p.getFileName().toString().matches("node[0-9]+")).count();
            }
        }
        out.println("cores=" + Runtime.getRuntime().availableProcessors() + " numa-nodes=" + (numa == 0 ? "unknown" : numa));
        Path shm = Path.of("/dev/shm");
        if (Files.isDirectory(shm)) {
            FileStore store = Files.getFileStore(shm);
            out.println(String.format(Locale.ROOT, "/dev/shm: total=%s free=%s (the host-shm transport maps one file per"
                    + " rank there; a group needs ranks x its symmetric memory)", mib(store.getTotalSpace()),
                    mib(store.getUsableSpace())));
        } else {
            out.println("/dev/shm: absent (the host-shm transport, processes on one machine, cannot run)");
        }
    }

    private static String mib(long bytes) {
        return String.format(Locale.ROOT, "%.0f MiB", bytes / (double) (KIB * KIB));
    }

    private void libraries() {
        out.println("== native libraries");
        boolean cuda = CudaDriver.available();
        out.println("libcuda.so.1: " + (cuda ? "available" : "absent (" + CudaDriver.unavailableReason() + ")"));
        out.println("libnccl.so.2: " + (Nccl.available() ? "available" : "absent (" + Nccl.unavailableReason() + ")"));
        out.println("libnvshmem_host.so.3: " + (Nvshmem.available() ? "available" : "absent"));
        out.println("libmpi.so.40 (Open MPI): " + (Mpi.isAvailable() ? "available (" + mpiVersion() + ")" : "absent"));
        out.println("gpus=" + (cuda ? Integer.toString(CudaDriver.get().deviceCount()) : "0 (no CUDA driver)"));
    }

    /** The first line of the MPI library's own version string, or why it could not be read. */
    private static String mpiVersion() {
        try {
            return Mpi.libraryVersion().lines().findFirst().orElse("no version string");
        } catch (RuntimeException e) {
            return "version unknown: " + e.getMessage();
        }
    }

    private void transports() {
        out.println("== transports");
        String inJvm = InJvmWorld.runOnEveryRank(2, GroupOptions.defaults(),
                group -> group.transport().capabilities(group).table()).getFirst();
        out.print(inJvm);
        out.print(SharedMemoryTransport.capabilities().table());
    }

    private void decisionTable(ThresholdTable table) {
        out.println("== algorithm table (" + table.source() + ")");
        List<String> columns = new ArrayList<>();
        for (String transport : List.of(Transport.HOST_IN_JVM, Transport.HOST_SHM)) {
            columns.add(transport + " x" + ranks);
        }
        out.println(String.format(Locale.ROOT, "%12s  %-22s  %-22s", "bytes", columns.get(0), columns.get(1)));
        for (long bytes : TABLE_SIZES) {
            out.println(String.format(Locale.ROOT, "%12d  %-22s  %-22s", bytes,
                    table.lookup(Transport.HOST_IN_JVM, ranks, bytes), table.lookup(Transport.HOST_SHM, ranks, bytes)));
        }
    }

    /** Prints the host benchmark's table; returns the fastest time per size (ascending sizes), NaN where none ran. */
    private double[] benchmark(ThresholdTable table) {
        out.println("== all-reduce host-in-jvm, " + ranks + " threads, float32 sum, median microseconds per call");
        out.println(String.format(Locale.ROOT, "%12s  %10s  %10s  %10s  %-10s  %-10s", "bytes", "ONE_SHOT", "TWO_SHOT",
                "RING", "table", "fastest"));
        List<Long> sorted = sizes.stream().sorted().toList();
        double[][][] times = CalibrateThresholds.measure(ranks, sorted, 1);
        double[] fastestTimes = new double[sorted.size()];
        for (int s = 0; s < sorted.size(); s++) {
            StringBuilder row = new StringBuilder(String.format(Locale.ROOT, "%12d", sorted.get(s)));
            int fastest = -1;
            for (int a = 0; a < CANDIDATES.length; a++) {
                double t = times[s][a][0];
                row.append(Double.isNaN(t) ? String.format(Locale.ROOT, "  %10s", "-")
                        : String.format(Locale.ROOT, "  %10.2f", t));
                if (!Double.isNaN(t) && (fastest < 0 || t < times[s][fastest][0])) {
                    fastest = a;
                }
            }
            row.append(String.format(Locale.ROOT, "  %-10s  %-10s", table.lookup(Transport.HOST_IN_JVM, ranks, sorted.get(s)),
                    fastest < 0 ? "-" : CANDIDATES[fastest]));
            out.println(row);
            fastestTimes[s] = fastest < 0 ? Double.NaN : times[s][fastest][0];
        }
        out.println("(one run per cell; bench/calibrate.sh measures repetitions and writes the table's rows)");
        return fastestTimes;
    }
}
