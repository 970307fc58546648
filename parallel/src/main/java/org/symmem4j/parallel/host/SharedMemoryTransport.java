package org.symmem4j.parallel.host;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.concurrent.atomic.AtomicLong;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.symmem4j.parallel.memory.Pages;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.CommunicatorOptions;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.SymmemException;
import org.symmem4j.parallel.SymmetricMemory;
import org.symmem4j.parallel.Transport;
import org.symmem4j.parallel.TransportCapabilities;
import org.symmem4j.parallel.TransportCapabilities.Capability;
import org.symmem4j.parallel.control.SignalPadLayout;

/**
 * Ranks are processes on one machine: each rank creates a {@code /dev/shm} file holding its signal
 * pad and buffer, the ranks exchange file names through the rendezvous store, every rank maps
 * every file, and each owner then unlinks its file (see {@link SharedMemoryFiles}). One transport
 * serves one group, which creates it with its peers' process identities ({@link PeerProcesses}).
 *
 * <pre>
 *   file of rank r:  [ signal pad (SignalPadLayout.padBytes) | buffer (bytes, rounded up to 4096) ]
 * </pre>
 */
public final class SharedMemoryTransport implements Transport {

    /** The transport's name, as {@code transportName()} reports it and configuration selects it. */
    public static final String NAME = Transport.HOST_SHM;

    /** A rank's allocation record: "tag bytes id". */
    private static final Pattern ALLOCATION = Pattern.compile("([0-9a-f]{12}) ([0-9]{1,18}) (-1|[0-9]{1,18})");

    private final AtomicLong nextId = new AtomicLong();
    private final PeerProcesses peers;

    /**
     * The transport of one process group, whose ranks' processes {@code peers} identifies.
     *
     * @param peers pid and start time of every rank's process, to tell live owners from stale files
     * @throws NullPointerException if {@code peers} is null
     */
    public SharedMemoryTransport(PeerProcesses peers) {
        this.peers = java.util.Objects.requireNonNull(peers, "peers");
    }

    @Override
    public String name() {
        return NAME;
    }

    @Override
    public SymmetricMemory allocate(Group group, long bytes) {
        Group g = ownGroup(group);
        if (bytes < 0) {
            throw new IllegalArgumentException("bytes=" + bytes + " must be >= 0 (fix: pass the size to"
                    + " allocate in bytes)");
        }
        SharedMemoryFiles.sweepStale();
        int n = g.worldSize();
        int rank = g.rank();
        int slots = SignalPadLayout.DEFAULT_SIGNAL_SLOTS;
        long padBytes = SignalPadLayout.padBytes(n, slots);
        long fileBytes = padBytes + ((bytes + 4095) & ~4095L);
        Arena arena = Arena.ofShared();
        String myTag = SharedMemoryFiles.newTag();
        String myName = SharedMemoryFiles.name(peers.pid(rank), peers.startMillis(rank), myTag, peers.worldRank(rank));
        boolean unlinked = false;
        try {
            MemorySegment mine = SharedMemoryFiles.createAndMap(myName, fileBytes, arena);
            SignalPadLayout.initialize(mine.asSlice(0, padBytes), n, rank, slots, bytes, peers.launchToken());
            long idProposal = rank == 0 ? nextId.getAndIncrement() : -1;
            // What crosses the store: a random tag, the size and rank 0's id. Never a path: each rank
            // builds its peers' file names itself from their member records and a checked tag.
            List<byte[]> all = g.allGatherBytes("shm-allocate",
                    (myTag + " " + bytes + " " + idProposal).getBytes(StandardCharsets.UTF_8));
            MemorySegment[] datas = new MemorySegment[n];
            MemorySegment[] pads = new MemorySegment[n];
            String[] names = new String[n];
            StringBuilder sizes = new StringBuilder();
            boolean sameSize = true;
            long id = -1;
            for (int r = 0; r < n; r++) {
                String value = new String(all.get(r), StandardCharsets.UTF_8);
                Matcher m = ALLOCATION.matcher(value);
                if (!m.matches() || (r == 0) == m.group(3).equals("-1")) {
                    throw new SymmemException("rank=" + rank + " symmetric memory allocate: the record of rank " + r
                            + " is malformed: '" + value.replaceAll("[^\\x20-\\x7e]", "?") + "' (expected '<12 hex digits>"
                            + " <bytes> <id>', id -1 except on rank 0; is something other than a symmem4j rank of this job"
                            + " writing to the store? fix: run the same symmem4j version on every rank, and give each job"
                            + " its own MASTER_PORT and SYMMEM4J_RUN_ID)");
                }
                long peerBytes = Long.parseLong(m.group(2));
                sameSize &= peerBytes == bytes;
                sizes.append(r == 0 ? "" : ", ").append("rank=").append(r).append(" bytes=").append(peerBytes);
                if (r == 0) {
                    id = Long.parseLong(m.group(3));
                }
                names[r] = SharedMemoryFiles.name(peers.pid(r), peers.startMillis(r), m.group(1), peers.worldRank(r));
            }
            if (!sameSize) {
                throw new SymmemException("symmetric memory allocate: sizes differ across ranks: " + sizes
                        + " (fix: every rank must allocate the same number of bytes)");
            }
            // A peer's file that is gone is not reported at once: its owner may have removed it because it gave up
            // on the set-up (a peer died), or a sweep may have removed a dead peer's file. The exchange below finds
            // out which rank failed, and every rank fails alike. A file that is there but wrong (another user's,
            // another launch's, the wrong size) is refused at once.
            RuntimeException mapFailure = null;
            for (int r = 0; r < n && mapFailure == null; r++) {
                try {
                    MemorySegment file = r == rank ? mine : SharedMemoryFiles.map(names[r], fileBytes, arena);
                    pads[r] = file.asSlice(0, padBytes);
                    datas[r] = file.asSlice(padBytes, bytes);
                    SignalPadLayout.verify(pads[r], n, r, slots, bytes, peers.launchToken());
                } catch (SharedMemoryFiles.FileGoneException e) {
                    mapFailure = e;
                }
            }
            // Every rank has mapped every file once all pass this exchange; then the files are unlinked
            // and the mappings live on with no name in /dev/shm.
            List<byte[]> mapped;
            try {
                mapped = g.allGatherBytes("shm-mapped", mapFailure == null ? new byte[0]
                        : abbreviate(String.valueOf(mapFailure.getMessage())).getBytes(StandardCharsets.UTF_8));
            } catch (RuntimeException e) {
                if (mapFailure != null) {
                    e.addSuppressed(mapFailure);
                }
                throw e;
            }
            List<String> failures = new java.util.ArrayList<>();
            for (int r = 0; r < n; r++) {
                if (mapped.get(r).length > 0) {
                    failures.add("rank " + r + ": " + new String(mapped.get(r), StandardCharsets.UTF_8)
                            .replaceAll("[^\\x20-\\x7e]", "?"));
                }
            }
            if (!failures.isEmpty()) {
                SymmemException e = new SymmemException("rank=" + rank + " symmetric memory allocate: every rank arrived,"
                        + " but not every rank could map every peer's file: " + String.join("; ", failures)
                        + " (fix: run every rank as the same user on one machine, with the same symmem4j.shm.dir)");
                if (mapFailure != null) {
                    e.addSuppressed(mapFailure);
                }
                throw e;
            }
            // every rank has mapped every file: each unlinks them all, not only its own, so that a peer killed
            // between the exchange and its own unlink leaves no file behind (its peers' allocation succeeded, so no
            // failure's sweep follows; they fail later, in a collective). names[rank] is this rank's own.
            for (String name : names) {
                SharedMemoryFiles.deleteQuietly(name);
            }
            unlinked = true;
            return new HostSymmetricMemory(g, NAME, id, bytes, slots, datas, pads, arena::close, Pages.MADV_REMOVE);
        } catch (RuntimeException e) {
            if (!unlinked) {
                SharedMemoryFiles.deleteQuietly(myName);
            }
            arena.close();
            SharedMemoryFiles.sweepStale(); // a peer that died during set-up may have left its file
            throw e;
        }
    }

    /** At most 400 characters of {@code s}: what crosses the store is bounded. */
    private static String abbreviate(String s) {
        return s.length() <= 400 ? s : s.substring(0, 400) + "...";
    }

    @Override
    public SymmetricMemory register(Group group, MemorySegment buffer) {
        throw capabilities().refusal(Capability.REGISTER);
    }

    /**
     * Processes of one machine, nothing exchanged: every rank maps every peer's {@code /dev/shm} file, and no buffer
     * of a process's own can be mapped by another (register is refused, whatever the group).
     */
    @Override
    public TransportCapabilities capabilities(Group group) {
        return capabilities();
    }

    /**
     * The answers, alike for every group of this transport (its ranks are processes of one machine).
     *
     * @return what {@link #capabilities(Group)} answers for any group
     */
    public static TransportCapabilities capabilities() {
        return TransportCapabilities.of(NAME)
                .yes(Capability.ALLOCATE, "/dev/shm files mapped by every rank")
                .no(Capability.REGISTER, "transport " + NAME + " cannot register an existing buffer:"
                        + " other processes cannot map private memory. Allocate with SymmetricMemory.allocate(group, bytes)"
                        + " and place the data in local()")
                .yes(Capability.PEER_ACCESS, "")
                .yes(Capability.IN_PLACE_REDUCE_SCATTER, "")
                .yes(Capability.IN_PLACE_ALL_GATHER, "")
                .yes(Capability.SUB_GROUPS, "")
                .no(Capability.DEVICE_MEMORY, "transport " + NAME + " holds host memory (/dev/shm files); for GPU"
                        + " memory join the process group on the cuda transport")
                .yes(Capability.CROSS_PROCESS, "one machine")
                .yes(Capability.DECOMMIT, "sparse /dev/shm files: pages given back with MADV_REMOVE (a hole in the file)")
                .build();
    }

    @Override
    public Communicator communicator(Group group, CommunicatorOptions options) {
        Group g = ownGroup(group);
        // a group on a GPU transport reaches this one as its host transport (Group.hostTransport()): the scratch of its
        // host collectives is this transport's memory, never the group's own (device memory Java cannot touch)
        return g.transport().deviceMemory() ? new HostCommunicator(g, this, options) : new HostCommunicator(g, options);
    }

    /**
     * A transport for the members' processes, re-indexed by sub-group rank; file names keep naming
     * each process's rank in the world ({@link PeerProcesses#worldRank}) and a fresh random tag, so
     * the files of concurrent sub-groups never collide and a sweep still finds their owners.
     */
    @Override
    public Transport forSubGroup(int[] parentRanks) {
        int[] members = parentRanks.clone();
        PeerProcesses parent = peers;
        return new SharedMemoryTransport(new PeerProcesses() {
            @Override
            public long pid(int rank) {
                return parent.pid(members[rank]);
            }

            @Override
            public long startMillis(int rank) {
                return parent.startMillis(members[rank]);
            }

            @Override
            public int worldRank(int rank) {
                return parent.worldRank(members[rank]);
            }

            @Override
            public long launchToken() {
                return parent.launchToken();
            }
        });
    }

    /** {@code group}, if this is its transport or its host transport: the peers' identities are that group's. */
    private Group ownGroup(Group group) {
        if (group == null || (group.transport() != this && group.hostTransport() != this)) {
            throw new IllegalArgumentException("transport " + NAME + " serves the process group that created it; found "
                    + (group == null ? "null" : group.getClass().getSimpleName() + " with transport "
                    + group.transport().name()) + " (fix: use group.transport() or group.hostTransport(), or"
                    + " SymmetricMemory.allocate(group, bytes))");
        }
        return group;
    }
}
