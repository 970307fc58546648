package org.symmem4j.parallel.group;

import java.nio.charset.StandardCharsets;
import java.util.List;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.PeerTimeoutException;
import org.symmem4j.parallel.SymmemException;

/**
 * The files of an in-place shrink ({@link ProcessGroup#shrink(java.util.function.IntFunction)}): the launcher's
 * membership file, which names the dead ranks ({@code SYMMEM4J_MEMBERSHIP_FILE}, written by {@code symmem4j-run
 * --on-failure shrink}), and beside it each shrunk group's store-port file, which its rank 0 writes and the other
 * survivors read. Both are replaced atomically (a temporary file forced to disk, renamed over it): never read half.
 */
final class ShrinkFiles {

    private ShrinkFiles() {
    }

    /**
     * A shrunk group's rank 0: publishes its store's port in {@code file}, atomically (a temporary file forced to
     * disk, renamed over it), so the other survivors never read half a number.
     */
    static void publishStorePort(java.nio.file.Path file, int port) {
        java.nio.file.Path tmp = file.resolveSibling(file.getFileName() + ".tmp");
        try {
            try (java.nio.channels.FileChannel ch = java.nio.channels.FileChannel.open(tmp,
                    java.nio.file.StandardOpenOption.CREATE, java.nio.file.StandardOpenOption.TRUNCATE_EXISTING,
                    java.nio.file.StandardOpenOption.WRITE)) {
                ch.write(java.nio.ByteBuffer.wrap((port + "\n").getBytes(StandardCharsets.UTF_8)));
                ch.force(true);
            }
            java.nio.file.Files.move(tmp, file, java.nio.file.StandardCopyOption.ATOMIC_MOVE,
                    java.nio.file.StandardCopyOption.REPLACE_EXISTING);
        } catch (java.io.IOException e) {
            throw new SymmemException("rank=0 of a shrunk group cannot publish its store's port " + port + " in " + file
                    + ": " + e.getMessage() + " (the membership file's directory must stay writable while the job runs;"
                    + " fix: give the launcher a writable, not-cleaned directory for it)", e);
        }
    }

    /**
     * A shrunk group's other ranks: the port its rank 0 published in {@code file}, polled every 10 ms until the
     * timeout.
     */
    static int awaitStorePort(java.nio.file.Path file, ProcessGroupConfig config, GroupOptions options) {
        long deadline = System.nanoTime() + options.timeout().toNanos();
        org.symmem4j.parallel.sync.IdleStrategy idle =
                new org.symmem4j.parallel.sync.BackoffIdleStrategy(0, 0, 1_000_000, 10_000_000);
        while (true) {
            try {
                String text = java.nio.file.Files.readString(file, StandardCharsets.UTF_8).strip();
                int port = Integer.parseInt(text);
                if (port < 1 || port > 65535) {
                    throw new SymmemException("rank=" + config.rank() + " of shrunk group " + config.runId() + ": " + file
                            + " names port " + port + ", outside [1, 65535] (expected the port its rank 0's store bound;"
                        + " fix: let only the launcher and this job's rank 0 write that file)");
                }
                return port;
            } catch (java.io.IOException | NumberFormatException notYet) {
                // not published yet (it appears whole, by a rename)
            }
            if (System.nanoTime() - deadline >= 0) {
                throw new PeerTimeoutException("rank=" + config.rank() + " of shrunk group " + config.runId() + ": its rank 0"
                        + " did not publish its store's port in " + file + " within timeout=" + options.timeout()
                        + " (rank 0 of the survivors died or is stuck before binding its store; fix: see its error or"
                        + " exit status, or raise symmem4j.timeout.ms if it starts slowly)", config.rank(),
                        List.of(0), "shrink", PeerTimeoutException.Reason.DEADLINE_PASSED, options.timeout());
            }
            idle.idle();
        }
    }

    /** The launch ranks the membership file names dead ({@code dead <rank> <how>} lines; others ignored). */
    static java.util.SortedSet<Integer> readDead(java.nio.file.Path file) {
        java.util.SortedSet<Integer> dead = new java.util.TreeSet<>();
        List<String> lines;
        try {
            lines = java.nio.file.Files.readAllLines(file, StandardCharsets.UTF_8);
        } catch (java.io.IOException e) {
            return dead; // not written yet (the launcher replaces it atomically: never half-written)
        }
        for (String line : lines) {
            String[] words = line.strip().split(" ", 3);
            if (words.length >= 2 && words[0].equals("dead")) {
                try {
                    dead.add(Integer.parseInt(words[1]));
                } catch (NumberFormatException ignored) {
                    // not a rank: not ours to read
                }
            }
        }
        return dead;
    }
}
