package org.symmem4j.serving;

import java.io.File;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * How to start the JVM of a {@link WorkerProcess}: the JVM flags and environment variables that keep its resident
 * memory small. A worker JVM runs networks over the router's shared weights, so its own footprint is the JVM, its
 * loaded classes, and ND4J's native state; these settings cut that (measured in {@code docs/serving.md}):
 * <ul>
 *   <li>{@code -XX:+UseSerialGC -Xms8m -Xmx512m -Xmn6m}: a worker's heap holds configurations and network objects, not
 *       arrays (those are off-heap), so a small heap that grows on demand, without G1's regions, remembered sets and
 *       large default young generation (1/64 of the host's memory at start), is enough; a young generation of 6 MiB keeps the pages that
 *       garbage touches between collections few;</li>
 *   <li>{@code -XX:TieredStopAtLevel=1}: the C1 compiler only (the work runs in ND4J's native code), a smaller code
 *       cache and no C2 compiler threads; {@code -Xss512k} for the threads' stacks. Not for models on the host path
 *       ({@code ModelSpec.ofHostPath}): its Vector API loops need C2 (without it about 150 times slower), so such a
 *       worker serves them on DL4J's forward, with a warning: for the host path's speed set {@value #FLAGS_ENV} to
 *       these flags without it;</li>
 *   <li>a dynamic CDS archive, {@link #sharedArchive}: the classes of the class path (DL4J, ND4J, symmem4j) parsed
 *       once and mapped read-only by every worker JVM, so their pages are shared, not loaded again per JVM. The
 *       first worker ({@code worker == 1}) starts with {@code -XX:+AutoCreateSharedArchive}: it writes the archive
 *       when it exits if the archive is missing or stale (another JDK or class path); the others only map it, so
 *       no two JVMs write it at once. The first start after a change runs without it, and a class path with
 *       directories gets none ({@link #archivable});</li>
 *   <li>environment {@code MALLOC_ARENA_MAX=2} (glibc keeps per-thread malloc arenas otherwise) and
 *       {@code OMP_NUM_THREADS=1} (one ND4J/OpenBLAS thread per worker: K workers use K cores), each unless already
 *       set.</li>
 * </ul>
 * Override: the environment variable {@value #FLAGS_ENV} replaces the flags (split at white space; {@code none}
 * for no flags at all).
 */
public final class WorkerJvm {

    /** The environment variable whose value replaces {@link #DEFAULT_FLAGS} (and the archive flags); "none": none. */
    public static final String FLAGS_ENV = "SYMMEM4J_WORKER_JVM_FLAGS";

    /** The flags every worker JVM gets by default, besides the CDS archive's. */
    public static final List<String> DEFAULT_FLAGS = List.of("-XX:+UseSerialGC", "-Xms8m", "-Xmx512m",
            "-Xmn6m", "-XX:TieredStopAtLevel=1", "-Xss512k");

    /** The environment variables a worker JVM gets by default, unless set. */
    public static final Map<String, String> DEFAULT_ENVIRONMENT = Map.of("MALLOC_ARENA_MAX", "2",
            "OMP_NUM_THREADS", "1");

    private WorkerJvm() {
    }

    /**
     * The JVM flags of worker {@code worker} (1, 2, ...) of a router.
     *
     * @param env       the environment to read {@value #FLAGS_ENV} from (usually {@code System.getenv()})
     * @param classPath the worker's class path (names the CDS archive)
     * @param worker    the worker's number from 1: worker 1 keeps the CDS archive up to date
     * @return {@link #DEFAULT_FLAGS} and the archive's flags, or what {@value #FLAGS_ENV} says
     */
    public static List<String> flags(Map<String, String> env, String classPath, int worker) {
        if (worker < 1) {
            throw new IllegalArgumentException("worker " + worker + ", expected the worker's number from 1 (fix: pass"
                    + " 1 for the first worker JVM)");
        }
        String override = env.get(FLAGS_ENV);
        if (override != null) {
            return override.isBlank() || override.trim().equals("none") ? List.of()
                    : List.of(override.trim().split("\\s+"));
        }
        List<String> flags = new ArrayList<>(DEFAULT_FLAGS);
        if (archivable(classPath)) {
            flags.add("-XX:SharedArchiveFile=" + sharedArchive(classPath));
            if (worker == 1) {
                flags.add("-XX:+AutoCreateSharedArchive");
            }
        }
        return List.copyOf(flags);
    }

    /**
     * {@return whether the JVM can archive the classes of {@code classPath}}: only when it names no non-empty
     * directory (a JVM asked to dump an archive of classes from a directory fails at exit, so a class path of
     * build directories, as in tests, gets no archive)
     */
    public static boolean archivable(String classPath) {
        for (String entry : classPath.split(File.pathSeparator)) {
            if (!entry.isEmpty() && Files.isDirectory(Path.of(entry))) {
                return false;
            }
        }
        return true;
    }

    /**
     * {@return {@code env}'s variables plus those of {@link #DEFAULT_ENVIRONMENT} it does not set}: the environment
     * of a worker JVM started from a process with environment {@code env}
     */
    public static Map<String, String> environment(Map<String, String> env) {
        Map<String, String> out = new LinkedHashMap<>(env);
        DEFAULT_ENVIRONMENT.forEach(out::putIfAbsent);
        return out;
    }

    /**
     * {@return the worker JVMs' dynamic CDS archive for {@code classPath}}: in the temporary directory, named after a
     * hash of this JDK, the class path and each entry's size and modification time, so that checkouts and JDKs keep
     * archives of their own and a rebuilt jar gets a new archive (the JVM refuses an archive whose jars changed, and
     * does not always write it again)
     */
    public static Path sharedArchive(String classPath) {
        StringBuilder key = new StringBuilder(System.getProperty("java.home")).append('\n')
                .append(System.getProperty("java.vm.version"));
        for (String entry : classPath.split(File.pathSeparator)) {
            Path p = Path.of(entry);
            key.append('\n').append(entry);
            try {
                key.append(' ').append(Files.size(p)).append(' ').append(Files.getLastModifiedTime(p).toMillis());
            } catch (java.io.IOException | RuntimeException missing) {
                key.append(" -"); // not there: the JVM skips it too
            }
        }
        try {
            byte[] hash = MessageDigest.getInstance("SHA-256").digest(key.toString().getBytes(StandardCharsets.UTF_8));
            return Path.of(System.getProperty("java.io.tmpdir"),
                    "symmem4j-worker-" + HexFormat.of().formatHex(hash, 0, 8) + ".jsa");
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException("SHA-256 is missing from this JDK, expected every JDK to have it (fix: run on"
                    + " a standard JDK 25)", e);
        }
    }
}
