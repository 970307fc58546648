package org.symmem4j.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.File;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.jar.JarFile;
import java.util.jar.Manifest;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * {@code java -jar symmem4j-launcher-<version>.jar} works from where Maven puts it: the launcher jar this build
 * made (the one on this test's class path), copied alone into a folder laid out as the local Maven repository
 * ({@code org/symmem4j/symmem4j-launcher/<version>/}, nothing beside it), starts a real 2-process job. Its
 * manifest names the main class and no class path: picocli is inside it.
 */
class LauncherJarTest {

    /** The launcher jar on the class path; absent when the launcher module was not packaged (an IDE's run). */
    static Path launcherJar() {
        for (String entry : System.getProperty("java.class.path").split(File.pathSeparator)) {
            Path p = Path.of(entry);
            String name = p.getFileName() == null ? "" : p.getFileName().toString();
            if (name.startsWith("symmem4j-launcher-") && name.endsWith(".jar") && Files.isRegularFile(p)) {
                return p;
            }
        }
        return null;
    }

    @Test
    void javaDashJarRunsAJobFromALocalRepositoryLayout(@TempDir Path repository) throws Exception {
        Path jar = launcherJar();
        Assumptions.assumeTrue(jar != null, "the launcher module's jar is not on the class path (its classes folder is):"
                + " run through Maven's package phase (mvn verify) to test the packaged jar");
        Path dir = repository.resolve("org/symmem4j/symmem4j-launcher/0.1.0-SNAPSHOT");
        Files.createDirectories(dir);
        Path copy = Files.copy(jar, dir.resolve(jar.getFileName()));

        try (JarFile j = new JarFile(copy.toFile())) {
            Manifest m = j.getManifest();
            assertNotNull(m, "the launcher jar has no manifest");
            assertEquals("org.symmem4j.launch.Launcher", m.getMainAttributes().getValue("Main-Class"));
            assertNull(m.getMainAttributes().getValue("Class-Path"),
                    "the launcher jar names a class path, which a jar alone in the local repository does not have");
            assertNotNull(j.getEntry("org/symmem4j/launch/internal/picocli/CommandLine.class"),
                    "picocli is not inside the launcher jar (relocated to org.symmem4j.launch.internal.picocli)");
            assertNull(j.getEntry("picocli/CommandLine.class"), "picocli is inside the jar unrelocated");
        }

        String java = Path.of(System.getProperty("java.home"), "bin", "java").toString();
        Run version = run(repository, java, "-jar", copy.toString(), "--version");
        assertEquals(0, version.status(), version.output());
        assertTrue(version.output().contains("symmem4j-run 0.1.0-SNAPSHOT"), version.output());

        Run job = run(repository, java, "-jar", copy.toString(), "--standalone", "--nproc-per-node", "2",
                "--cpu-bind", "none", "--", "sh", "-c", "echo \"rank $RANK of $WORLD_SIZE\"");
        assertEquals(0, job.status(), job.output());
        assertTrue(job.output().contains("[rank 0] rank 0 of 2") && job.output().contains("[rank 1] rank 1 of 2"),
                job.output());
    }

    record Run(int status, String output) {
    }

    static Run run(Path workDir, String... command) throws IOException, InterruptedException {
        List<String> cmd = new ArrayList<>(Arrays.asList(command));
        ProcessBuilder pb = new ProcessBuilder(cmd).directory(workDir.toFile()).redirectErrorStream(true);
        pb.environment().remove("SYMMEM4J_RUN_ID");
        pb.environment().remove("SYMMEM4J_SECRET");
        pb.environment().remove("SYMMEM4J_SECRET_FILE");
        Process p = pb.start();
        byte[] out = p.getInputStream().readAllBytes();
        if (!p.waitFor(120, TimeUnit.SECONDS)) {
            p.destroyForcibly();
            throw new AssertionError("java -jar did not end within 120 s: " + String.join(" ", cmd));
        }
        return new Run(p.exitValue(), new String(out, StandardCharsets.UTF_8));
    }
}
