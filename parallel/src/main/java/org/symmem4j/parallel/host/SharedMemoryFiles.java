package org.symmem4j.parallel.host;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.nio.file.attribute.PosixFilePermissions;
import java.time.Instant;
import java.util.HexFormat;
import java.util.concurrent.ThreadLocalRandom;
import java.util.regex.Pattern;
import org.symmem4j.parallel.Configuration;
import org.symmem4j.parallel.SymmemException;
import org.symmem4j.parallel.sync.ProcessLiveness;

/**
 * The files behind cross-process symmetric memory: created in {@code /dev/shm} with mode 0600 and
 * a unique name that records the owner's pid and start time:
 * {@code symmem4j-<pid>-<startMillis>-<random>-r<rank>}.
 *
 * <p>Lifetime: once every rank has mapped every file, each rank unlinks all of them (the mappings stay
 * valid; the owner's unlink alone would leave the file of an owner killed just before it, while its
 * peers' allocation succeeded), so a process killed after set-up leaves nothing behind. A process
 * killed during set-up can leave its file; {@link #sweepStale()} removes files whose owner process is
 * gone, and runs before every allocation and after every failed one.
 */
public final class SharedMemoryFiles {

    /** File-name prefix of every symmem4j shared-memory file; the sweep only touches these. */
    public static final String PREFIX = "symmem4j-";

    private SharedMemoryFiles() {
    }

    /**
     * {@code -Dsymmem4j.shm.dir}, else {@code /dev/shm}, else the temp directory.
     *
     * @return the directory shared-memory files are created in
     */
    public static Path directory() {
        Path configured = Configuration.SHM_DIR.get();
        if (configured != null) {
            return configured;
        }
        Path shm = Path.of("/dev/shm");
        if (Files.isDirectory(shm) && Files.isWritable(shm)) {
            return shm;
        }
        return Path.of(System.getProperty("java.io.tmpdir"));
    }

    /**
     * A peer's file is not there (any more): its owner removed it after giving up on the set-up, or a
     * sweep removed it after its owner died. Not the peer's fault as such: the mapper finds out who failed.
     */
    static final class FileGoneException extends SymmemException {
        FileGoneException(String message, Throwable cause) {
            super(message, cause);
        }
    }

    /** The random part of a file name: 12 lowercase hex digits. */
    static final Pattern TAG = Pattern.compile("[0-9a-f]{12}");

    /** A fresh random tag for a file of this process (see {@link #name}). */
    static String newTag() {
        byte[] random = new byte[6];
        ThreadLocalRandom.current().nextBytes(random);
        return HexFormat.of().formatHex(random);
    }

    /**
     * The file name of rank {@code rank}'s allocation, built from facts this rank already holds (the
     * peer's pid and start time from the group's member records) and a tag that must match
     * {@link #TAG}: nothing a peer sends becomes a path unchecked.
     */
    static String name(long pid, long startMillis, String tag, int rank) {
        if (pid <= 0 || startMillis < 0 || rank < 0 || tag == null || !TAG.matcher(tag).matches()) {
            throw new SymmemException("shared-memory file name: pid=" + pid + " startMillis=" + startMillis + " tag="
                    + (tag == null ? "null" : "'" + tag.replaceAll("[^\\x20-\\x7e]", "?") + "'") + " rank=" + rank
                    + " (expected a positive pid, a start time, 12 lowercase hex digits and a rank; fix: run the same"
                    + " symmem4j version on every rank, and let no other job write to this job's store)");
        }
        return PREFIX + pid + "-" + startMillis + "-" + tag + "-r" + rank;
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
                    + " (is " + directory() + " writable? fix: set -Dsymmem4j.shm.dir to another tmpfs)", e);
        }
        try (FileChannel ch = FileChannel.open(path, StandardOpenOption.READ, StandardOpenOption.WRITE,
                LinkOption.NOFOLLOW_LINKS)) {
            if (bytes > 0) {
                ch.write(ByteBuffer.wrap(new byte[] {0}), bytes - 1); // sizes the file; pages stay zero
            }
            return ch.map(FileChannel.MapMode.READ_WRITE, 0, bytes, arena);
        } catch (IOException e) {
            deleteQuietly(name);
            throw new SymmemException("cannot size or map shared-memory file " + path + " to " + bytes + " bytes: " + e
                    + " (is " + directory() + " full? df -h " + directory() + "; fix: free space there,"
                    + " or set -Dsymmem4j.shm.dir to a larger tmpfs)", e);
        }
    }

    private static void createWithoutPosix(Path path) {
        try {
            Files.createFile(path);
        } catch (IOException e) {
            throw new SymmemException("cannot create shared-memory file " + path + ": " + e + " (fix: point"
                    + " symmem4j.shm.dir (SYMMEM4J_SHM_DIR) at a writable directory with room, e.g. /dev/shm)", e);
        }
    }

    /**
     * Maps a peer's file, after checking that it is what a rank of this job creates: a regular file
     * (not a symbolic link), owned by the user this process runs as, with no access for group or
     * others, of the expected size. A file another user planted under the expected name (a 0666 file
     * in the shared {@code /dev/shm}, say) is refused.
     */
    static MemorySegment map(String name, long bytes, Arena arena) {
        Path path = directory().resolve(name);
        checkOwnedPrivateFile(path);
        try (FileChannel ch = FileChannel.open(path, StandardOpenOption.READ, StandardOpenOption.WRITE,
                LinkOption.NOFOLLOW_LINKS)) {
            long size = ch.size();
            if (size != bytes) {
                throw new SymmemException("shared-memory file " + path + " has size=" + size + " expected=" + bytes
                        + " (fix: every rank must allocate the same number of bytes)");
            }
            return ch.map(FileChannel.MapMode.READ_WRITE, 0, bytes, arena);
        } catch (java.nio.file.NoSuchFileException e) {
            throw new FileGoneException("peer shared-memory file " + path + " is gone (its owner gave up on the set-up,"
                    + " or exited and its file was swept; fix: see that rank's own error)", e);
        } catch (IOException e) {
            throw new SymmemException("cannot map peer shared-memory file " + path + ": " + e
                    + " (the peer may have exited, or the ranks run as different users; fix: run every rank as the"
                    + " same user with the same symmem4j.shm.dir, and see the peer's own error)", e);
        }
    }

    /** Throws unless {@code path} is a regular file of this user's with mode 0600 or stricter. */
    static void checkOwnedPrivateFile(Path path) {
        try {
            if (!Files.exists(path, LinkOption.NOFOLLOW_LINKS)) {
                throw new FileGoneException("peer shared-memory file " + path + " is gone (its owner gave up on the"
                        + " set-up, or exited and its file was swept; fix: see that rank's own error)", null);
            }
            if (!Files.isRegularFile(path, LinkOption.NOFOLLOW_LINKS)) {
                throw new SymmemException("shared-memory file " + path + " is missing or not a regular file (symbolic"
                        + " links are refused; the peer may have exited; fix: keep only symmem4j's own files in"
                        + " symmem4j.shm.dir, and see the peer's own error)");
            }
            int owner = (Integer) Files.getAttribute(path, "unix:uid", LinkOption.NOFOLLOW_LINKS);
            int mode = (Integer) Files.getAttribute(path, "unix:mode", LinkOption.NOFOLLOW_LINKS);
            int me = currentUid();
            if (owner != me || (mode & 0077) != 0) {
                throw new SymmemException("shared-memory file " + path + " has owner uid=" + owner + " mode="
                        + Integer.toOctalString(mode & 0777) + "; expected owner uid=" + me + " mode=600 (a file that this"
                        + " job's ranks did not create, or ranks running as different users; fix: run every"
                        + " rank as one user)");
            }
        } catch (UnsupportedOperationException | IllegalArgumentException e) {
            // no unix attributes on this file system (not Linux): nothing more to check
        } catch (IOException e) {
            throw new SymmemException("cannot check shared-memory file " + path + ": " + e + " (fix: run every rank as"
                    + " the same user, with symmem4j.shm.dir on a local file system such as /dev/shm)", e);
        }
    }

    private static volatile int uid = -1;

    /** This process's user id, from the owner of {@code /proc/self}. */
    private static int currentUid() throws IOException {
        int u = uid;
        if (u < 0) {
            u = (Integer) Files.getAttribute(Path.of("/proc/self"), "unix:uid");
            uid = u;
        }
        return u;
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
     *
     * @return the number of files deleted
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
        return ProcessLiveness.isRunning(pid, start);
    }

    /**
     * Names of symmem4j files currently in the directory (for tests and diagnostics).
     *
     * @return the file names (not paths)
     */
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
