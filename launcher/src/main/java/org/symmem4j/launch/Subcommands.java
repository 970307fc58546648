package org.symmem4j.launch;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.io.PrintStream;
import java.io.UncheckedIOException;
import java.net.URISyntaxException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.OptionalInt;
import java.util.stream.Stream;
import picocli.CommandLine;

/**
 * The launcher's subcommands, named by its first argument: {@code symmem4j-run doctor [options]} runs
 * {@code symmem4j-doctor} (what symmem4j will choose on this machine and how fast it is here, docs/doctor.md) and
 * {@code symmem4j-run flight-report DUMP...} merges flight-recorder dumps ({@link FlightReport}). Any other first
 * argument is the launcher's own; {@code symmem4j-run -- doctor} runs a program named {@code doctor}.
 *
 * <p>The doctor lives in the benchmarks module (it times the runtime's collectives, which the launcher does not
 * load), so it runs in a JVM of its own on that module's class path: {@code SYMMEM4J_DOCTOR_CLASSPATH} when set,
 * else the benchmarks module built in the checkout the launcher was built in.
 */
final class Subcommands {

    /** The first argument that runs the doctor. */
    static final String DOCTOR = "doctor";
    /** The first argument that runs the flight report. */
    static final String FLIGHT_REPORT = "flight-report";
    /** The environment variable naming the doctor's whole class path. */
    static final String DOCTOR_CLASSPATH = "SYMMEM4J_DOCTOR_CLASSPATH";
    /** The doctor's main class, in the benchmarks module. */
    static final String DOCTOR_MAIN = "org.symmem4j.benchmarks.Doctor";

    private Subcommands() {
    }

    /**
     * Runs the subcommand {@code args[0]} names, if it names one.
     *
     * @param args the launcher's command line
     * @param out  where the subcommand's output goes
     * @param err  where its errors go
     * @param env  the environment ({@link #DOCTOR_CLASSPATH})
     * @return its exit status, or empty when {@code args[0]} names no subcommand
     */
    static OptionalInt run(String[] args, PrintStream out, PrintStream err, Map<String, String> env) {
        if (args.length == 0) {
            return OptionalInt.empty();
        }
        String[] rest = Arrays.copyOfRange(args, 1, args.length);
        return switch (args[0]) {
            case DOCTOR -> OptionalInt.of(doctor(rest, out, err, env, DOCTOR_MAIN));
            case FLIGHT_REPORT -> {
                CommandLine cl = new CommandLine(new FlightReport(out));
                cl.setOut(new java.io.PrintWriter(out, true));
                cl.setErr(new java.io.PrintWriter(err, true));
                yield OptionalInt.of(cl.execute(rest));
            }
            default -> OptionalInt.empty();
        };
    }

    /**
     * Runs {@code mainClass} with {@code args} in a child JVM (this JVM's {@code java}, with the flags symmem4j
     * needs) on the doctor's class path, its output copied to {@code out} and {@code err}; returns its exit status,
     * or 2 without starting it when there is no class path.
     */
    static int doctor(String[] args, PrintStream out, PrintStream err, Map<String, String> env, String mainClass) {
        String classPath;
        try {
            classPath = doctorClassPath(env);
        } catch (IllegalStateException e) {
            err.println("symmem4j-run doctor: " + e.getMessage());
            return 2;
        }
        List<String> command = new ArrayList<>(List.of(Path.of(System.getProperty("java.home"), "bin", "java").toString(),
                "--enable-native-access=ALL-UNNAMED", "--add-modules=jdk.incubator.vector", "-cp", classPath, mainClass));
        command.addAll(List.of(args));
        try {
            Process p = new ProcessBuilder(command).start();
            p.getOutputStream().close();
            Thread copyErr = Thread.ofPlatform().daemon().start(() -> copy(p.getErrorStream(), err));
            copy(p.getInputStream(), out);
            int status = p.waitFor();
            copyErr.join();
            return status;
        } catch (IOException e) {
            err.println("symmem4j-run doctor: could not start " + command.getFirst() + " (" + e.getMessage() + "); fix:"
                    + " run the launcher on a JDK >= 25 whose bin/java is executable");
            return 2;
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return 130;
        }
    }

    private static void copy(InputStream from, OutputStream to) {
        try {
            from.transferTo(to);
            to.flush();
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    /**
     * The doctor's class path: {@link #DOCTOR_CLASSPATH}, else the benchmarks module's jar and its
     * {@code classpath.txt} (written by its build) in the checkout holding this launcher's jar or classes.
     *
     * @throws IllegalStateException saying what is missing and how to build it
     */
    static String doctorClassPath(Map<String, String> env) {
        return doctorClassPath(env, codeSource());
    }

    /** As {@link #doctorClassPath(Map)} for a launcher whose jar or classes are at {@code codeSource}. */
    static String doctorClassPath(Map<String, String> env, Path codeSource) {
        String given = env.get(DOCTOR_CLASSPATH);
        if (given != null && !given.isBlank()) {
            return given;
        }
        Path root = checkoutRoot(codeSource);
        String build = "run 'mvn -q -B -DskipTests package -pl benchmarks -am' in " + (root == null ? "the checkout" : root)
                + ", or set " + DOCTOR_CLASSPATH + " to the doctor's class path";
        if (root == null) {
            throw new IllegalStateException("the doctor ships in symmem4j's benchmarks module, and this launcher does not"
                    + " run from a checkout's launcher/target (found " + codeSource + "); fix: " + build);
        }
        Path target = root.resolve("benchmarks").resolve("target");
        Path list = target.resolve("classpath.txt");
        Path jar = null;
        if (Files.isDirectory(target)) {
            try (Stream<Path> files = Files.list(target)) {
                jar = files.filter(f -> f.getFileName().toString().matches("symmem4j-benchmarks-.*\\.jar")
                        && !f.getFileName().toString().matches(".*-(sources|javadoc|tests)\\.jar")).findFirst().orElse(null);
            } catch (IOException e) {
                throw new IllegalStateException("cannot list " + target + " (" + e.getMessage() + "); fix: " + build, e);
            }
        }
        if (jar == null || !Files.isRegularFile(list)) {
            throw new IllegalStateException("the doctor ships in the benchmarks module, which is not built: expected"
                    + " " + target + "/symmem4j-benchmarks-<version>.jar and " + list + ", found "
                    + (jar == null ? "no jar" : jar.getFileName()) + (Files.isRegularFile(list) ? "" : " and no classpath.txt")
                    + "; fix: " + build);
        }
        try {
            return Files.readString(list, StandardCharsets.UTF_8).strip() + java.io.File.pathSeparator + jar;
        } catch (IOException e) {
            throw new IllegalStateException("cannot read " + list + " (" + e.getMessage() + "); fix: " + build, e);
        }
    }

    /** The checkout a launcher at {@code source} was built in ({@code <root>/launcher/target/...}), or null. */
    private static Path checkoutRoot(Path source) {
        if (source == null) {
            return null;
        }
        Path target = source.getParent(); // of target/classes or target/symmem4j-launcher-<version>.jar
        if (target == null || !target.getFileName().toString().equals("target") || target.getParent() == null
                || !target.getParent().getFileName().toString().equals("launcher")) {
            return null;
        }
        return target.getParent().getParent();
    }

    private static Path codeSource() {
        try {
            var location = Subcommands.class.getProtectionDomain().getCodeSource().getLocation();
            return location == null ? null : Path.of(location.toURI()).toAbsolutePath().normalize();
        } catch (URISyntaxException | SecurityException e) {
            return null;
        }
    }
}
