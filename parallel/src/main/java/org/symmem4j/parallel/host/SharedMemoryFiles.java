package org.symmem4j.parallel.host;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.nio.file.attribute.PosixFilePermissions;
import java.time.Instant;
import java.util.HexFormat;
import java.util.Optional;
import java.util.concurrent.ThreadLocalRandom;
import org.symmem4j.parallel.SymmemException;

/**
 * The files behind cross-process symmetric memory: created in {@code /dev/shm} with mode 0600 and
 * a unique name that records the owner's pid and start time:
 * {@code symmem4j-<pid>-<startMillis>-<random>-r<rank>}.
 *
 * <p>Lifetime: the owner unlinks its file as soon as every peer has mapped it (the mappings stay
 * valid), so a process killed after set-up leaves nothing behind. A process killed during set-up
 * can leave its file; {@link #sweepStale()} removes files whose owner process is gone, and runs
 * before every allocation and after every failed one.
 */
public final class SharedMemoryFiles {

    public static final String PREFIX = "symmem4j-";

    private SharedMemoryFiles() {
    }

    /** {@code -Dsymmem4j.shm.dir}, else {@code /dev/shm}, else the temp directory. */
    public static Path directory() {
        String configured = System.getProperty("symmem4j.shm.dir");
        if (configured != null && !configured.isBlank()) {
            return Path.of(configured);
        }
        Path shm = Path.of("/dev/shm");
        if (Files.isDirectory(shm) && Files.isWritable(shm)) {
            return shm;
        }
        return Path.of(System.getProperty("java.io.tmpdir"));
    }

    /** A fresh unique file name owned by this process. */
    static String newName(int rank) {
        ProcessHandle self = ProcessHandle.current();
        long start = self.info().startInstant().map(Instant::toEpochMilli).orElse(0L);
        byte[] random = new byte[6];
        ThreadLocalRandom.current().nextBytes(random);
        return PREFIX + self.pid() + "-" + start + "-" + HexFormat.of().formatHex(random) + "-r" + rank;
    }

    /** Creates {@code name} (mode 0600, must not exist), sizes it to {@code bytes} and maps it. */
    static MemorySegment createAndMap(String name, long bytes, Arena arena) {
        Path path = directory().resolve(name);
        try {
            Files.createFile(path, PosixFilePermissions.asFileAttribute(PosixFilePermissions.fromString("rw-------")));
        } catch (UnsupportedOperationException e) {
            createWithoutPosix(path);
        } catch (IOException e) {
            throw new SymmemException("cannot create shared-memory file " + path + ": " + e
                    + " (is " + directory() + " writable? set -Dsymmem4j.shm.dir to another tmpfs)", e);
        }
        try (FileChannel ch = FileChannel.open(path, StandardOpenOption.READ, StandardOpenOption.WRITE)) {
            if (bytes > 0) {
                ch.write(ByteBuffer.wrap(new byte[] {0}), bytes - 1); // sizes the file; pages stay zero
            }
            return ch.map(FileChannel.MapMode.READ_WRITE, 0, bytes, arena);
        } catch (IOException e) {
            deleteQuietly(name);
            throw new SymmemException("cannot size or map shared-memory file " + path + " to " + bytes + " bytes: " + e
                    + " (is " + directory() + " full? df -h " + directory() + ")", e);
        }
    }

    private static void createWithoutPosix(Path path) {
        try {
            Files.createFile(path);
        } catch (IOException e) {
            throw new SymmemException("cannot create shared-memory file " + path + ": " + e, e);
        }
    }

    /** Maps a peer's file. */
    static MemorySegment map(String name, long bytes, Arena arena) {
        Path path = directory().resolve(name);
        try (FileChannel ch = FileChannel.open(path, StandardOpenOption.READ, StandardOpenOption.WRITE)) {
            long size = ch.size();
            if (size != bytes) {
                throw new SymmemException("shared-memory file " + path + " has size=" + size + " expected=" + bytes
                        + " (ranks must allocate the same number of bytes)");
            }
            return ch.map(FileChannel.MapMode.READ_WRITE, 0, bytes, arena);
        } catch (IOException e) {
            throw new SymmemException("cannot map peer shared-memory file " + path + ": " + e
                    + " (the peer may have exited, or the ranks run as different users)", e);
        }
    }

    static void deleteQuietly(String name) {
        try {
            Files.deleteIfExists(directory().resolve(name));
        } catch (IOException ignored) {
            // the sweep will retry
        }
    }

    /**
     * Deletes symmem4j files whose owner process no longer exists (or whose pid now belongs to a
     * process that started later). Returns how many were deleted.
     */
    public static int sweepStale() {
        int deleted = 0;
        try (DirectoryStream<Path> files = Files.newDirectoryStream(directory(), PREFIX + "*")) {
            for (Path p : files) {
                if (!ownerAlive(p.getFileName().toString())) {
                    try {
                        if (Files.deleteIfExists(p)) {
                            deleted++;
                        }
                    } catch (IOException ignored) {
                        // another sweeper got it, or not ours to delete
                    }
                }
            }
        } catch (IOException ignored) {
            // directory unreadable: nothing to sweep
        }
        return deleted;
    }

    /** Whether the process that created file {@code name} is still running. Unparseable names count as alive. */
    static boolean ownerAlive(String name) {
        String[] parts = name.substring(PREFIX.length()).split("-");
        if (parts.length < 3) {
            return true;
        }
        long pid;
        long start;
        try {
            pid = Long.parseLong(parts[0]);
            start = Long.parseLong(parts[1]);
        } catch (NumberFormatException e) {
            return true;
        }
        Optional<ProcessHandle> h = ProcessHandle.of(pid);
        if (h.isEmpty() || !h.get().isAlive()) {
            return false;
        }
        Optional<Instant> actual = h.get().info().startInstant();
        return start == 0 || actual.isEmpty() || actual.get().toEpochMilli() == start;
    }

    /** Names of symmem4j files currently in the directory (for tests and diagnostics). */
    public static java.util.List<String> list() {
        java.util.List<String> names = new java.util.ArrayList<>();
        try (DirectoryStream<Path> files = Files.newDirectoryStream(directory(), PREFIX + "*")) {
            for (Path p : files) {
                names.add(p.getFileName().toString());
            }
        } catch (IOException ignored) {
            // unreadable: report none
        }
        return names;
    }
}
