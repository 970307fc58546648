package org.symmem4j.parallel.group;

import java.io.IOException;
import java.nio.channels.FileChannel;
import java.nio.channels.FileLock;
import java.nio.channels.OverlappingFileLockException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.nio.file.attribute.PosixFilePermissions;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.HexFormat;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.symmem4j.parallel.Invariants;
import org.symmem4j.parallel.SymmemException;
import org.symmem4j.parallel.rendezvous.StoreSecret;

/**
 * This process's claim, on this host, to its seat in a job: rank {@code r} of generation {@code g} of
 * run {@code R} whose store is {@code MASTER_ADDR:MASTER_PORT}. Two live processes never hold one seat:
 * two jobs started with the same run id (by default the parent process, so one parent starting two
 * jobs gives both the same id) look alike to rank 0's store in every respect, and one job's ranks would
 * otherwise pair with the other's and compute with each other's data without a word.
 *
 * <p>A seat is an exclusive POSIX record lock on one byte of a per-user registry file, {@code seats.lock}
 * in the user's 0700 host directory ({@link StoreSecret#hostDirectory()}), at an offset hashed from the
 * seat. The kernel arbitrates (of two claimants exactly one gets it) and releases it when the process
 * ends, SIGKILL included: nothing is left behind. The registry is opened once per JVM and never closed,
 * since closing any descriptor of a file drops every POSIX lock the process holds on it. A claimant that
 * finds the seat held leaves a notice ({@code seat-twin-<seat hash>}, holding its pid) and fails; the
 * holder finds the notice at its next {@link #check()}, which a process group runs before every set-up
 * exchange, so the holder's whole group fails too, before any data moves. Where the host directory cannot
 * be used, no seat is claimed (logged once).
 */
final class SeatClaim implements AutoCloseable {

    private static final Logger LOG = LoggerFactory.getLogger(SeatClaim.class);
    /** Seat offsets lie below 2^46: far apart for any number of seats a host runs at once. */
    private static final long OFFSET_MASK = (1L << 46) - 1;
    private static FileChannel registry;
    private static boolean unavailableLogged;

    private final String seat;
    private final int rank;
    private final Path notice;
    private final FileLock lock;
    private boolean closed;

    private SeatClaim(String seat, int rank, Path notice, FileLock lock) {
        this.seat = seat;
        this.rank = rank;
        this.notice = notice;
        this.lock = lock;
    }

    /**
     * Claims the seat, failing if another live process of this user holds it.
     *
     * @param runId      the job's run id
     * @param generation the group's generation within the run
     * @param masterAddr the store's address
     * @param masterPort the store's port
     * @param rank       the seat: this process's rank
     * @return the claim; close it when the group closes
     * @throws SymmemException when another live process holds the seat
     */
    static SeatClaim claim(String runId, long generation, String masterAddr, int masterPort, int rank) {
        String seat = "rank " + rank + " of run '" + runId + "' generation " + generation + " at " + masterAddr + ":"
                + masterPort;
        byte[] hash = sha256(runId + "\n" + generation + "\n" + masterAddr + "\n" + masterPort + "\n" + rank);
        long offset = java.nio.ByteBuffer.wrap(hash).getLong() & OFFSET_MASK;
        FileChannel ch;
        Path notice;
        try {
            Path dir = StoreSecret.hostDirectory();
            ch = registry(dir);
            notice = dir.resolve("seat-twin-" + HexFormat.of().formatHex(hash, 0, 8));
        } catch (SymmemException | IOException | UnsupportedOperationException e) {
            logUnavailable(e);
            return new SeatClaim(seat, rank, null, null);
        }
        // A notice left for an earlier holder of this seat (gone now, or this claim fails below anyway) is stale.
        deleteQuietly(notice);
        FileLock lock;
        try {
            lock = ch.tryLock(offset, 1, false);
        } catch (OverlappingFileLockException e) {
            lock = null; // this JVM holds the seat already (in another group object)
        } catch (IOException e) {
            logUnavailable(e);
            return new SeatClaim(seat, rank, null, null);
        }
        if (lock == null) {
            leaveNotice(notice);
            throw claimedTwice(rank, seat, "another live process (it is told too, and its group fails before moving data)");
        }
        return new SeatClaim(seat, rank, notice, lock);
    }

    private static synchronized FileChannel registry(Path dir) throws IOException {
        if (registry == null) {
            Path file = dir.resolve("seats.lock");
            try {
                Files.createFile(file, PosixFilePermissions.asFileAttribute(PosixFilePermissions.fromString("rw-------")));
            } catch (java.nio.file.FileAlreadyExistsException e) {
                // another process of this user made it
            }
            // never closed: closing any descriptor of the file would drop every lock this process holds on it
            registry = FileChannel.open(file, StandardOpenOption.READ, StandardOpenOption.WRITE, LinkOption.NOFOLLOW_LINKS);
        }
        return registry;
    }

    private static synchronized void logUnavailable(Exception e) {
        if (!unavailableLogged) {
            unavailableLogged = true;
            LOG.warn("cannot claim seats in the host directory (" + e + "): two jobs started with the same run id"
                    + " would not be told apart on this host; give each job its own SYMMEM4J_RUN_ID");
        }
    }

    private static void leaveNotice(Path notice) {
        try {
            Files.writeString(notice, Long.toString(ProcessHandle.current().pid()), StandardCharsets.US_ASCII);
        } catch (IOException ignored) {
            // the holder cannot be told; this process fails all the same
        }
    }

    /**
     * Fails if another process tried to claim this seat since this process holds it.
     *
     * @throws SymmemException naming the other process, the seat and the fix
     */
    void check() {
        if (closed || lock == null) {
            return;
        }
        String other;
        try {
            other = Files.readString(notice, StandardCharsets.US_ASCII).trim();
        } catch (NoSuchFileException e) {
            return;
        } catch (IOException e) {
            other = "?";
        }
        throw claimedTwice(rank, seat, "pid " + (other.matches("[0-9]{1,10}") ? other : "?"));
    }

    private static SymmemException claimedTwice(int rank, String seat, String other) {
        return new SymmemException("rank=" + rank + " seat claimed twice: " + seat + ": expected one process per rank,"
                + " found pid " + ProcessHandle.current().pid() + " (this one) and " + other + " (two jobs were started"
                + " with the same run id and MASTER_PORT; the default run id is the parent process, so one parent"
                + " starting two jobs gives both the same one; fix: give each job its own SYMMEM4J_RUN_ID and MASTER_PORT)");
    }

    /** Gives the seat up, with any notice left for it. */
    @Override
    public void close() {
        if (closed) {
            return;
        }
        closed = true;
        if (lock != null) {
            deleteQuietly(notice);
            try {
                lock.release();
            } catch (IOException ignored) {
                // released when the process ends
            }
        }
    }

    private static void deleteQuietly(Path p) {
        try {
            Files.deleteIfExists(p);
        } catch (IOException ignored) {
            // a later claimant deletes it
        }
    }

    private static byte[] sha256(String s) {
        try {
            return MessageDigest.getInstance("SHA-256").digest(s.getBytes(StandardCharsets.UTF_8));
        } catch (NoSuchAlgorithmException e) {
            throw Invariants.violated("SHA-256 is required of every Java platform, and this one has none", e);
        }
    }
}
