package org.symmem4j.benchmarks;

import java.io.IOException;
import java.io.PrintStream;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.ReduceOp;
import org.symmem4j.parallel.mpi.Mpi;
import org.symmem4j.parallel.mpi.MpiComm;

/**
 * The doctor's Open MPI anchor: {@code MPI_Allreduce} (float32 sum, in place), {@code MPI_Allgather} and a
 * {@code MPI_Send}/{@code MPI_Recv} ping-pong between processes of this machine,
 * started by {@code mpirun} with Open MPI's own choice of transport (shared memory on one host: its best
 * configuration), timed at the doctor's sizes, so the host all-reduce table can put symmem4j's time beside MPI's.
 * {@link #measure} launches the job and parses rank 0's lines; {@link #main} is what each MPI process runs.
 */
final class DoctorMpi {

    /** How long the whole mpirun job may take before the doctor gives up on it. */
    static final long LIMIT_SECONDS = 120;
    private static final String LINE = "doctor-mpi ";
    private static final int REPS = 5;

    private DoctorMpi() {
    }

    /** The patterns each MPI job times, as its lines name them. */
    static final List<String> PATTERNS = List.of(Pattern.ALL_REDUCE, Pattern.ALL_GATHER, Pattern.HAND_OFF);

    /** Names of the patterns, shared by the MPI job's lines and the doctor's tables. */
    static final class Pattern {
        static final String ALL_REDUCE = "all-reduce";
        static final String ALL_GATHER = "all-gather";
        static final String HAND_OFF = "hand-off";

        private Pattern() {
        }
    }

    /**
     * Microseconds per call per pattern and size (all-gather: per size of the gathered result; hand-off: one way,
     * half a round trip), or why there are none.
     */
    record Result(Map<String, Map<Long, Double>> micros, String problem) {

        /** The median microseconds of {@code pattern} at {@code bytes}, NaN where it was not timed. */
        double of(String pattern, long bytes) {
            Double t = micros.getOrDefault(pattern, Map.of()).get(bytes);
            return t == null ? Double.NaN : t;
        }
    }

    /**
     * Runs {@code mpirun -np ranks} of this class on this machine and reads its medians.
     *
     * @param ranks processes
     * @param sizes message sizes, bytes, multiples of 4
     * @return the medians, or the reason there are none (no Open MPI, no mpirun, a failed or overdue job)
     */
    static Result measure(int ranks, List<Long> sizes) {
        if (!Mpi.isAvailable()) {
            return new Result(Map.of(), "Open MPI's library is not installed (Debian: openmpi-bin)");
        }
        List<String> cmd = new ArrayList<>(List.of("mpirun", "--allow-run-as-root", "--oversubscribe", "-np",
                Integer.toString(ranks), Path.of(System.getProperty("java.home"), "bin", "java").toString(),
                "--enable-native-access=ALL-UNNAMED", "-Xmx256m", "-cp", System.getProperty("java.class.path"),
                DoctorMpi.class.getName()));
        sizes.forEach(s -> cmd.add(Long.toString(s)));
        Process p;
        try {
            ProcessBuilder pb = new ProcessBuilder(cmd).redirectErrorStream(true);
            pb.environment().remove("RANK"); // Open MPI's own variables give each process its rank
            p = pb.start();
            p.getOutputStream().close();
        } catch (IOException e) {
            return new Result(Map.of(), "mpirun could not start (" + e.getMessage() + "); fix: install Debian's openmpi-bin");
        }
        // read beside the wait, so that a job that hangs ends at the bound instead of blocking the read
        CompletableFuture<String> text = CompletableFuture.supplyAsync(() -> {
            try {
                return new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
            } catch (IOException e) {
                return "(output unreadable: " + e + ")";
            }
        });
        try {
            if (!p.waitFor(LIMIT_SECONDS, TimeUnit.SECONDS)) {
                p.descendants().forEach(ProcessHandle::destroyForcibly);
                p.destroyForcibly();
                return new Result(Map.of(), "mpirun -np " + ranks + " did not end within " + LIMIT_SECONDS + " s (stopped)");
            }
            String out = text.get(30, TimeUnit.SECONDS);
            Map<String, Map<Long, Double>> micros = parse(out);
            int timed = micros.getOrDefault(Pattern.ALL_REDUCE, Map.of()).size();
            if (p.exitValue() != 0 || timed != sizes.size()) {
                String tail = out.lines().skip(Math.max(0, out.lines().count() - 5)).reduce("", (a, b) -> a + "\n  " + b);
                return new Result(Map.of(), "mpirun -np " + ranks + " exited " + p.exitValue() + " with " + timed
                        + " of " + sizes.size() + " all-reduce sizes timed; its last lines:" + tail);
            }
            return new Result(micros, null);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            p.descendants().forEach(ProcessHandle::destroyForcibly);
            p.destroyForcibly();
            return new Result(Map.of(), "interrupted");
        } catch (java.util.concurrent.ExecutionException | java.util.concurrent.TimeoutException e) {
            return new Result(Map.of(), "mpirun's output could not be read (" + e + ")");
        }
    }

    /** Rank 0's lines {@code doctor-mpi <pattern> <bytes> <microseconds>}, per pattern in order. */
    static Map<String, Map<Long, Double>> parse(String out) {
        Map<String, Map<Long, Double>> micros = new LinkedHashMap<>();
        out.lines().filter(l -> l.startsWith(LINE)).forEach(l -> {
            String[] f = l.substring(LINE.length()).trim().split("\\s+");
            micros.computeIfAbsent(f[0], k -> new LinkedHashMap<>()).put(Long.parseLong(f[1]), Double.parseDouble(f[2]));
        });
        return micros;
    }

    /**
     * Prints the {@code == host all-reduce against Open MPI} section: symmem4j's fastest time on threads (from the
     * doctor's host benchmark) beside MPI_Allreduce between processes, and their ratio.
     *
     * @param out     where to print
     * @param ranks   ranks of both sides
     * @param sizes   message sizes, ascending
     * @param ours    symmem4j's fastest microseconds per size (NaN where none ran)
     * @param mpi     what {@link #measure} found
     */
    static void compare(PrintStream out, int ranks, List<Long> sizes, double[] ours, Result mpi) {
        out.println("== host all-reduce against Open MPI, " + ranks + " ranks, float32 sum, median microseconds per call");
        if (mpi.problem() != null) {
            out.println("not measured: " + mpi.problem());
            return;
        }
        out.println(String.format(Locale.ROOT, "%12s  %14s  %14s  %10s", "bytes", "symmem4j", "MPI_Allreduce", "MPI/ours"));
        for (int s = 0; s < sizes.size(); s++) {
            double theirs = mpi.of(Pattern.ALL_REDUCE, sizes.get(s));
            out.println(String.format(Locale.ROOT, "%12d  %14.2f  %14.2f  %10.2f", sizes.get(s), ours[s], theirs,
                    theirs / ours[s]));
        }
        out.println("(symmem4j: the fastest algorithm on threads above; Open MPI: processes, its own transport choice,"
                + " one run of " + REPS + " timings per size)");
    }

    /**
     * One process of the MPI job: times, at each size given, MPI_Allreduce (float32 sum in place), MPI_Allgather
     * (float32, a gathered result of that size: size / ranks bytes from each rank; not timed where that is not a whole
     * number of elements) and a ping-pong of that many bytes between ranks 0 and 1 (MPI_Send, MPI_Recv; the others
     * wait at the barrier); rank 0 prints {@code doctor-mpi <pattern> <bytes> <median microseconds>}, the hand-off as
     * half a round trip, after checking that the echo came back byte for byte.
     *
     * @param args message sizes, bytes
     */
    public static void main(String[] args) {
        long[] sizes = Arrays.stream(args).mapToLong(Long::parseLong).toArray();
        MpiComm world = Mpi.world();
        int me = world.rank();
        int ranks = world.size();
        long max = Arrays.stream(sizes).max().orElse(4);
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment buffer = arena.allocate(max, 64);
            MemorySegment gathered = arena.allocate(max, 64);
            MemorySegment payload = arena.allocate(max, 64);
            MemorySegment echo = arena.allocate(max, 64);
            for (long i = 0; i < max / 4; i++) {
                buffer.setAtIndex(ValueLayout.JAVA_FLOAT, i, (float) ((i % 7) * 1e-3));
            }
            for (long i = 0; i < max; i++) {
                payload.set(ValueLayout.JAVA_BYTE, i, (byte) (i % 251 + 1)); // a misplaced byte fails the echo check
            }
            for (long bytes : sizes) {
                long count = bytes / 4;
                int batch = bytes >= (1L << 20) ? 10 : 200;
                print(me, Pattern.ALL_REDUCE, bytes, time(world, batch,
                        () -> world.allReduce(buffer, count, DType.FLOAT32, ReduceOp.SUM)));
                if (count % ranks == 0) {
                    long block = count / ranks;
                    MemorySegment mine = buffer.asSlice(0, block * 4);
                    print(me, Pattern.ALL_GATHER, bytes, time(world, batch,
                            () -> world.allGather(mine, gathered, block, DType.FLOAT32)));
                }
                MemorySegment out = payload.asSlice(0, bytes);
                MemorySegment in = echo.asSlice(0, bytes);
                Runnable roundTrip = switch (me) {
                    case 0 -> () -> {
                        world.send(out, 1, 0);
                        world.recv(in, 1, 0);
                    };
                    case 1 -> () -> {
                        world.recv(in, 0, 0);
                        world.send(in, 0, 0);
                    };
                    default -> () -> { };
                };
                double roundTripMicros = time(world, batch, roundTrip);
                if (me == 0 && in.mismatch(out) >= 0) {
                    System.out.println("doctor-mpi: the ping-pong's echo of " + bytes + " bytes differs from what was sent"
                            + " at byte " + in.mismatch(out));
                    System.exit(1);
                }
                print(me, Pattern.HAND_OFF, bytes, roundTripMicros / 2);
            }
        }
        // MPI_Finalize runs in Mpi's shutdown hook (mpirun counts a process that skips it as failed)
    }

    /** The median of {@link #REPS} timings of {@code batch} calls, microseconds per call, after {@code batch} warm-ups. */
    private static double time(MpiComm world, int batch, Runnable call) {
        return RepetitionSpread.medianMicrosPerCall(REPS, batch, world::barrier, call);
    }

    private static void print(int rank, String pattern, long bytes, double micros) {
        if (rank == 0) {
            System.out.println(LINE + pattern + " " + bytes + " " + micros);
        }
    }
}
