package org.symmem4j.serving;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import java.util.Map;

import org.junit.jupiter.api.Test;

/** {@link WorkerJvm}: the default worker JVM flags and environment, the CDS archive's writer, the override. */
class WorkerJvmTest {

    @Test
    void theFirstWorkerKeepsTheArchiveAndTheOthersOnlyMapIt() {
        List<String> first = WorkerJvm.flags(Map.of(), "a.jar:b.jar", 1);
        List<String> second = WorkerJvm.flags(Map.of(), "a.jar:b.jar", 2);
        String archive = "-XX:SharedArchiveFile=" + WorkerJvm.sharedArchive("a.jar:b.jar");
        assertTrue(first.containsAll(WorkerJvm.DEFAULT_FLAGS) && first.contains(archive), first.toString());
        assertTrue(first.contains("-XX:+AutoCreateSharedArchive"), first.toString());
        assertTrue(second.contains(archive), second.toString());
        assertFalse(second.contains("-XX:+AutoCreateSharedArchive"), "only worker 1 writes the archive: " + second);
        assertNotEquals(WorkerJvm.sharedArchive("a.jar"), WorkerJvm.sharedArchive("a.jar:b.jar"),
                "another class path, another archive");
        assertThrows(IllegalArgumentException.class, () -> WorkerJvm.flags(Map.of(), "a.jar", 0));
    }

    @Test
    void aClassPathWithADirectoryGetsNoArchive() {
        String cp = "a.jar" + java.io.File.pathSeparator + System.getProperty("java.io.tmpdir");
        assertFalse(WorkerJvm.archivable(cp));
        List<String> flags = WorkerJvm.flags(Map.of(), cp, 1);
        assertEquals(WorkerJvm.DEFAULT_FLAGS, flags, "the JVM would fail dumping classes of a directory");
    }

    @Test
    void theEnvironmentVariableReplacesTheFlags() {
        assertEquals(List.of("-Xmx64m", "-XX:+UseG1GC"),
                WorkerJvm.flags(Map.of(WorkerJvm.FLAGS_ENV, " -Xmx64m  -XX:+UseG1GC "), "a.jar", 1));
        assertEquals(List.of(), WorkerJvm.flags(Map.of(WorkerJvm.FLAGS_ENV, "none"), "a.jar", 1));
    }

    @Test
    void theEnvironmentKeepsWhatIsSet() {
        Map<String, String> env = WorkerJvm.environment(Map.of("OMP_NUM_THREADS", "4", "PATH", "/bin"));
        assertEquals("4", env.get("OMP_NUM_THREADS"));
        assertEquals("2", env.get("MALLOC_ARENA_MAX"));
        assertEquals("/bin", env.get("PATH"));
    }
}
