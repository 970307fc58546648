package org.symmem4j.launch;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayOutputStream;
import java.io.File;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** {@code symmem4j-run doctor} and {@code symmem4j-run flight-report}: dispatch, the doctor's class path, refusals. */
class SubcommandsTest {

    /** Stands in for the benchmarks module's doctor in a child JVM: echoes its arguments, exits with 7. */
    public static final class DoctorStandIn {
        public static void main(String[] args) {
            System.out.println("doctor args=" + String.join(",", args));
            System.err.println("doctor err line");
            System.exit(7);
        }
    }

    @Test
    void theDoctorRunsInAChildJvmWithItsArgumentsAndExitStatus() {
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        ByteArrayOutputStream err = new ByteArrayOutputStream();
        int status = Subcommands.doctor(new String[] {"--no-benchmark", "--ranks", "2"}, print(out), print(err),
                Map.of(Subcommands.DOCTOR_CLASSPATH, System.getProperty("java.class.path")), DoctorStandIn.class.getName());
        assertEquals(7, status, err.toString(StandardCharsets.UTF_8));
        assertEquals("doctor args=--no-benchmark,--ranks,2", out.toString(StandardCharsets.UTF_8).strip());
        assertTrue(err.toString(StandardCharsets.UTF_8).contains("doctor err line"), err.toString(StandardCharsets.UTF_8));
    }

    @Test
    void theDoctorsClassPathIsTheBenchmarksModuleOfTheLaunchersCheckout(@TempDir Path root) throws Exception {
        Path launcherJar = root.resolve("launcher/target/symmem4j-launcher-1.0.jar");
        Files.createDirectories(launcherJar.getParent());
        Path target = Files.createDirectories(root.resolve("benchmarks/target"));
        // not built yet: refused with what is missing and the build command
        IllegalStateException missing = assertThrows(IllegalStateException.class,
                () -> Subcommands.doctorClassPath(Map.of(), launcherJar));
        assertTrue(missing.getMessage().contains("not built") && missing.getMessage().contains("no jar")
                && missing.getMessage().contains("fix: run 'mvn -q -B -DskipTests package -pl benchmarks -am' in " + root),
                missing.getMessage());
        Files.writeString(target.resolve("symmem4j-benchmarks-1.0-sources.jar"), "");
        Files.writeString(target.resolve("symmem4j-benchmarks-1.0.jar"), "");
        Files.writeString(target.resolve("classpath.txt"), "/m2/a.jar" + File.pathSeparator + "/m2/b.jar\n");
        assertEquals("/m2/a.jar" + File.pathSeparator + "/m2/b.jar" + File.pathSeparator + target.resolve("symmem4j-benchmarks-1.0.jar"),
                Subcommands.doctorClassPath(Map.of(), launcherJar));
        // the launcher's classes folder (a build without package) finds the same checkout
        assertTrue(Subcommands.doctorClassPath(Map.of(), root.resolve("launcher/target/classes")).endsWith("symmem4j-benchmarks-1.0.jar"));
        // the environment wins; a launcher outside a checkout without it is refused
        assertEquals("x.jar", Subcommands.doctorClassPath(Map.of(Subcommands.DOCTOR_CLASSPATH, "x.jar"), launcherJar));
        IllegalStateException elsewhere = assertThrows(IllegalStateException.class,
                () -> Subcommands.doctorClassPath(Map.of(), root.resolve("opt/symmem4j-launcher.jar")));
        assertTrue(elsewhere.getMessage().contains(Subcommands.DOCTOR_CLASSPATH) && elsewhere.getMessage().contains("fix:"),
                elsewhere.getMessage());
    }

    @Test
    void theLauncherDispatchesItsSubcommandsAndOnlyThem(@TempDir Path dumps) {
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        ByteArrayOutputStream err = new ByteArrayOutputStream();
        // an empty dump directory: the flight report's own "no dumps" status, through the launcher
        int status = Launcher.run(new String[] {"flight-report", dumps.toString()}, print(out), print(err), Map.of());
        assertEquals(FlightReport.NO_DUMPS, status, out + "\n" + err);
        assertTrue(Subcommands.run(new String[] {"--", "doctor"}, print(out), print(err), Map.of()).isEmpty(),
                "after --, doctor is a program's name");
        assertTrue(Subcommands.run(new String[0], print(out), print(err), Map.of()).isEmpty());
    }

    private static PrintStream print(ByteArrayOutputStream bytes) {
        return new PrintStream(bytes, true, StandardCharsets.UTF_8);
    }
}
