package org.symmem4j.examples;

import java.io.IOException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

import org.symmem4j.launch.Launcher;
import org.symmem4j.parallel.ChildJvmFlags;

/**
 * The command lines of the JVMs the examples' tests launch (ranks under {@code symmem4j-run --java}, example programs
 * run directly, launchers): one place for their flags.
 *
 * <p>Every one gets {@link #LIGHT}: C1 only and the serial collector. These JVMs live for seconds, load DL4J and ND4J
 * (thousands of classes) and spend their heavy compute in ND4J's native code; C2's compiles, which such a short run
 * never earns back, and G1's threads cost CPU on CI's two shared cores. Measured on the 2-core dev machine, user+sys
 * per JVM, several runs: a thread-mode {@link DataParallelExample} 4.5-5.7 s with the defaults, 3.5-4.0 s with C1
 * only, 2.8-3.4 s with C1 and the serial collector; a whole shrink-after-kill case (3 ranks and this JVM's reference)
 * 21-24 s against 13-15 s (bench/results/2026-11-30-ci-time-examples.md). What the tests check does not change: Java's
 * arithmetic is the same in every tier (a tiered JVM runs each method interpreted, by C1 and by C2 at different times
 * anyway), and most references the launched ranks are compared with, bitwise, are computed in the test's own JVM,
 * which keeps the defaults ({@link ProcessModeExampleTest}'s thread-mode runs are launched JVMs too).
 */
final class LaunchedJvm {

    /**
     * The flags {@code symmem4j-run --java} gives every JVM (the launcher's {@code LaunchPlan.JVM_FLAGS}): native
     * access, the vector module, JavaCPP's use of {@code sun.misc.Unsafe}.
     */
    static final List<String> RUNTIME_FLAGS = List.of("--enable-native-access=ALL-UNNAMED",
            "--add-modules=jdk.incubator.vector", "--sun-misc-unsafe-memory-access=allow");

    /**
     * Test-only flags for short JVMs (see the class comment for why and how much): the build's flags for the JVMs tests
     * launch, {@link ChildJvmFlags} (C1 only: Maven property {@code symmem4j.test.child.jvm.flags}, one setting for
     * every module's launched JVMs), and the serial collector, which these DL4J JVMs take on top.
     */
    static final List<String> LIGHT = light();

    /**
     * {@code -Dsymmem4j.test.defaultJvms=true}: launch with the JVM's defaults instead of {@link #LIGHT}, as a user's
     * JVMs run: for measurements of start-up and recovery times ({@link RestartSoak} sets it).
     */
    static final String DEFAULT_JVMS = "symmem4j.test.defaultJvms";

    private LaunchedJvm() {
    }

    private static List<String> light() {
        List<String> flags = new ArrayList<>(ChildJvmFlags.get());
        flags.add("-XX:+UseSerialGC");
        return List.copyOf(flags);
    }

    /** This JDK's {@code java}. */
    static String java() {
        return Path.of(System.getProperty("java.home"), "bin", "java").toString();
    }

    /**
     * The JVM arguments after {@code symmem4j-run --java --} up to the main class: {@link #LIGHT} (unless
     * {@value #DEFAULT_JVMS} is set), {@code jvmOptions}
     * (a heap size, system properties) and this test's class path.
     */
    static List<String> options(String... jvmOptions) {
        List<String> options = new ArrayList<>(Boolean.getBoolean(DEFAULT_JVMS) ? List.of() : LIGHT);
        options.addAll(List.of(jvmOptions));
        options.addAll(List.of("-cp", System.getProperty("java.class.path")));
        return options;
    }

    /**
     * A whole command up to the main class, as {@code --java} runs it: {@link #java()}, {@link #RUNTIME_FLAGS},
     * {@link #options(String...)}.
     */
    static List<String> command(String... jvmOptions) {
        List<String> command = new ArrayList<>(List.of(java()));
        command.addAll(RUNTIME_FLAGS);
        command.addAll(options(jvmOptions));
        return command;
    }

    /** {@link #command(String...)} with {@code jvmOptions}, then {@code main} and {@code args}. */
    static List<String> command(List<String> jvmOptions, Class<?> main, List<String> args) {
        List<String> command = command(jvmOptions.toArray(String[]::new));
        command.add(main.getName());
        command.addAll(args);
        return command;
    }

    /**
     * Runs {@code main} as {@code ranks} processes under the launcher ({@code symmem4j-run -n ranks --java}) on a free
     * port, its output captured: how the shared-state examples' tests run them as processes.
     *
     * @param ranks    processes
     * @param maxHeap  each one's {@code -Xmx} value, e.g. {@code "128m"}
     * @param main     the example
     * @param mainArgs its arguments
     * @return the launcher's status and the ranks' output
     * @throws IOException when no free port can be had
     */
    private static Launcher.Result launchRanks(int ranks, String maxHeap, Class<?> main, List<String> mainArgs)
            throws IOException {
        List<String> args = new ArrayList<>(List.of("-n", Integer.toString(ranks), "--master-port",
                Integer.toString(freePort()), "--"));
        args.addAll(command(List.of("-Xmx" + maxHeap), main, mainArgs));
        return Launcher.runCapturing(args, Launcher.newJobEnvironment(System.getenv()));
    }

    /**
     * {@link #launchRanks}, then the checks every shared-state example's process test makes: the launcher's status is
     * 0, and no rank but 0 printed the result line ({@code "[rank r] " + resultPrefix}: the examples print from rank 0
     * only).
     *
     * @param ranks        processes
     * @param maxHeap      each one's {@code -Xmx} value
     * @param main         the example
     * @param mainArgs     its arguments
     * @param resultPrefix how the example's result line begins after its rank tag, e.g. {@code "ring buffer"}
     * @return the ranks' output, for the test's own checks of rank 0's line
     * @throws IOException when no free port can be had
     */
    static String launchRanksReportingFromRankZero(int ranks, String maxHeap, Class<?> main, List<String> mainArgs,
                                                   String resultPrefix) throws IOException {
        Launcher.Result launched = launchRanks(ranks, maxHeap, main, mainArgs);
        String out = launched.out();
        org.junit.jupiter.api.Assertions.assertEquals(0, launched.status(), launched.err() + "\n" + out);
        for (int r = 1; r < ranks; r++) {
            org.junit.jupiter.api.Assertions.assertFalse(out.contains("[rank " + r + "] " + resultPrefix),
                    "only rank 0 prints: " + out);
        }
        return out;
    }

    /** A loopback port free a moment ago. */
    static int freePort() throws IOException {
        try (java.net.ServerSocket s = new java.net.ServerSocket(0)) {
            return s.getLocalPort();
        }
    }
}
