package org.symmem4j.parallel.host;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.DirectoryStream;
import java.nio.file.FileAlreadyExistsException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.time.Instant;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import org.symmem4j.parallel.SymmemException;

/**
 * This process's claim, on this host, to its seat in a job: rank {@code r} of generation {@code g} of
 * run {@code R} whose store is {@code MASTER_ADDR:MASTER_PORT}. Two live processes never hold one seat:
 * two jobs started with the same run id (by default the parent process, so one parent starting two
 * jobs gives both the same id) would otherwise pair one job's ranks with the other's through rank 0's
 * store and compute with each other's data without a word.
 *
 * <p>A claim is an empty file in {@link SharedMemoryFiles#directory()}, mode 0600, named after the
 * claiming process (so {@link SharedMemoryFiles#sweepStale()} removes it once that process is gone,
 * SIGKILL included) and the seat: {@code symmem4j-<pid>-<startMillis>-seat<key>-r<rank>}, where
 * {@code key} hashes run, generation and address. A claimant first creates its own file, then lists
 * the seat's files: of two processes that claim one seat, at least the later lister sees the other.
 * A process that sees another live claim leaves that process a notice,
 * {@code symmem4j-<itsPid>-<itsStart>-twin<key>-r<rank>-<myPid>}, and fails; the other finds the notice
 * (or the claim) at its next {@link #check()}, which a process group runs at every set-up exchange, so
 * its whole group fails before any data moves. Files of another user are ignored: a stranger cannot
 * make a job fail by planting them.
 */
public final class SeatClaim implements AutoCloseable {

    private final String key;
    private final int rank;
    private final String seat;
    private final String mine;
    private final String noticePrefix;
    private boolean closed;

    private SeatClaim(String key, int rank, String seat) {
        this.key = key;
        this.rank = rank;
        this.seat = seat;
        ProcessHandle self = ProcessHandle.current();
        String owner = SharedMemoryFiles.PREFIX + self.pid() + "-"
                + self.info().startInstant().map(Instant::toEpochMilli).orElse(0L) + "-";
        this.mine = owner + "seat" + key + "-r" + rank;
        this.noticePrefix = owner + "twin" + key + "-r" + rank + "-";
    }

    /**
     * Claims the seat, failing if another live process of this user holds it (or claims it at the same time).
     *
     * @param runId      the job's run id
     * @param generation the group's generation within the run
     * @param masterAddr the store's address
     * @param masterPort the store's port
     * @param rank       the seat: this process's rank
     * @return the claim; close it when the group closes
     * @throws SymmemException when another live process holds the seat, or the claim file cannot be created
     */
    public static SeatClaim claim(String runId, long generation, String masterAddr, int masterPort, int rank) {
        String seat = "rank " + rank + " of run '" + runId + "' generation " + generation + " at " + masterAddr + ":"
                + masterPort;
        SeatClaim claim = new SeatClaim(key(runId, generation, masterAddr, masterPort), rank, seat);
        claim.create();
        try {
            claim.check();
        } catch (RuntimeException e) {
            claim.close();
            throw e;
        }
        return claim;
    }

    private static String key(String runId, long generation, String masterAddr, int masterPort) {
        try {
            byte[] digest = MessageDigest.getInstance("SHA-256").digest((runId + "\n" + generation + "\n" + masterAddr
                    + "\n" + masterPort).getBytes(StandardCharsets.UTF_8));
            return HexFormat.of().formatHex(digest, 0, 8);
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException("SHA-256 is required of every Java platform", e);
        }
    }

    private void create() {
        Path path = SharedMemoryFiles.directory().resolve(mine);
        try {
            try {
                Files.createFile(path, PosixFilePermissions.asFileAttribute(PosixFilePermissions.fromString("rw-------")));
            } catch (UnsupportedOperationException e) {
                Files.createFile(path);
            }
        } catch (FileAlreadyExistsException e) {
            throw new SymmemException("seat claim: this process already holds " + seat + " (file " + path
                    + "); a process joins a seat once per group");
        } catch (IOException e) {
            throw new SymmemException("seat claim: cannot create " + path + ": " + e + " (is " + SharedMemoryFiles.directory()
                    + " writable? set -Dsymmem4j.shm.dir to another tmpfs)", e);
        }
    }

    /**
     * Fails if another live process claims this seat, or left this process a notice that it tried to. A
     * live other claimant is left a notice first, so it fails too, however late it looks again.
     *
     * @throws SymmemException naming both processes, the seat and the fix
     */
    public void check() {
        if (closed) {
            return;
        }
        List<Long> twins = new ArrayList<>();
        String claimSuffix = "-seat" + key + "-r" + rank;
        try (DirectoryStream<Path> files = Files.newDirectoryStream(SharedMemoryFiles.directory(),
                SharedMemoryFiles.PREFIX + "*" + key + "-r" + rank + "*")) {
            for (Path p : files) {
                String name = p.getFileName().toString();
                if (name.equals(mine) || !ownPrivate(p)) {
                    continue;
                }
                if (name.endsWith(claimSuffix) && SharedMemoryFiles.ownerAlive(name)) {
                    long other = ownerPid(name);
                    twins.add(other);
                    leaveNotice(name.substring(0, name.length() - claimSuffix.length()));
                } else if (name.startsWith(noticePrefix)) {
                    try {
                        twins.add(Long.parseLong(name.substring(noticePrefix.length())));
                    } catch (NumberFormatException ignored) {
                        // not a notice of ours
                    }
                }
            }
        } catch (IOException e) {
            return; // directory unreadable: claims could not be made either
        }
        if (!twins.isEmpty()) {
            throw new SymmemException("rank=" + rank + " seat claimed twice: " + seat + ": expected one process per rank,"
                    + " found pid " + ProcessHandle.current().pid() + " (this one) and pid"
                    + (twins.size() == 1 ? " " + twins.getFirst() : "s " + twins) + " (two jobs were started with the same"
                    + " run id and MASTER_PORT; the default run id is the parent process, so one parent starting two jobs"
                    + " gives both the same one: give each job its own SYMMEM4J_RUN_ID and MASTER_PORT)");
        }
    }

    /** Tells the claimant whose files start with {@code ownerPrefix} ("symmem4j-pid-start-") that this process claims its seat. */
    private void leaveNotice(String ownerPrefix) {
        Path notice = SharedMemoryFiles.directory().resolve(ownerPrefix + "-twin" + key + "-r" + rank + "-"
                + ProcessHandle.current().pid());
        try {
            Files.createFile(notice, PosixFilePermissions.asFileAttribute(PosixFilePermissions.fromString("rw-------")));
        } catch (FileAlreadyExistsException ignored) {
            // told already
        } catch (IOException | UnsupportedOperationException ignored) {
            // the claimant still sees this process's claim while it lives
        }
        if (!SharedMemoryFiles.ownerAlive(notice.getFileName().toString())) {
            SharedMemoryFiles.deleteQuietly(notice.getFileName().toString()); // it ended meanwhile: leave nothing
        }
    }

    private static long ownerPid(String name) {
        String rest = name.substring(SharedMemoryFiles.PREFIX.length());
        return Long.parseLong(rest.substring(0, rest.indexOf('-')));
    }

    private static boolean ownPrivate(Path p) {
        try {
            SharedMemoryFiles.checkOwnedPrivateFile(p);
            return true;
        } catch (SymmemException e) {
            return false;
        }
    }

    /** Gives the seat up: removes the claim and any notices left for it. */
    @Override
    public void close() {
        if (closed) {
            return;
        }
        closed = true;
        SharedMemoryFiles.deleteQuietly(mine);
        try (DirectoryStream<Path> files = Files.newDirectoryStream(SharedMemoryFiles.directory(), noticePrefix + "*")) {
            for (Path p : files) {
                SharedMemoryFiles.deleteQuietly(p.getFileName().toString());
            }
        } catch (IOException ignored) {
            // unreadable: the sweep removes them once this process is gone
        }
    }
}
