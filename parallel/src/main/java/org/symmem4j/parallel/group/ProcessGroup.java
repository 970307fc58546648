package org.symmem4j.parallel.group;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.symmem4j.parallel.Configuration;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.GroupAbort;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.PeerTimeoutException;
import org.symmem4j.parallel.RendezvousStore;
import org.symmem4j.parallel.StoreTimeoutException;
import org.symmem4j.parallel.SymmemException;
import org.symmem4j.parallel.Transport;
import org.symmem4j.parallel.affinity.RankAffinity;
import org.symmem4j.parallel.host.PeerProcesses;
import org.symmem4j.parallel.host.SharedMemoryTransport;
import org.symmem4j.parallel.rendezvous.InMemoryStore;
import org.symmem4j.parallel.rendezvous.JobIdentity;
import org.symmem4j.parallel.rendezvous.PortHolder;
import org.symmem4j.parallel.rendezvous.StoreLimits;
import org.symmem4j.parallel.rendezvous.StoreSecret;
import org.symmem4j.parallel.rendezvous.TcpStoreClient;
import org.symmem4j.parallel.rendezvous.TcpStoreServer;
import org.symmem4j.parallel.sync.ProcessLiveness;

/**
 * A group whose ranks are JVM processes on one machine. Rank 0 hosts the rendezvous store at
 * {@code MASTER_ADDR:MASTER_PORT}; every rank registers its pid there, so a waiting rank can tell
 * a peer that exited (for example after SIGKILL, reaped or not) from one that is merely slow.
 *
 * <p>Job identity: the group is generation {@code g} of run {@link ProcessGroupConfig#runId()},
 * where {@code g} counts the groups this process joined before as the same rank of the same run on
 * the same address (0, 1, ...: ranks create their groups in the same order). The store refuses ranks of other runs and other
 * generations, and every rank proves the job's {@link StoreSecret} before it may read or write a key.
 * So two jobs on one port never merge, a rank of the previous group on a port never joins the next,
 * and back-to-back groups on one port simply wait for the previous store to go.
 *
 * <p>Two jobs with the same run id (one parent starting both without {@code SYMMEM4J_RUN_ID}) are told
 * apart by their processes: every rank claims its seat on the host first (SeatClaim: a record lock
 * the kernel releases when the process ends), so a second live process claiming one fails at once, and
 * the group of the first fails at its next set-up exchange, before any data moves; and rank 0 hands
 * every rank a random launch token with the member records, which every shared-memory file's pad
 * carries and every mapper checks.
 *
 * <p>Failing set-up together: the first rank whose set-up exchange fails publishes the culprits in the
 * store; every other rank fails naming the same ranks, and acknowledges. Rank 0 keeps its store up until
 * every live rank that is not a culprit has acknowledged (bounded by the timeout), so no rank finds the
 * store gone and mistakes a live rank 0 for the culprit.
 */
public final class ProcessGroup implements Group {

    /** The fix of a failure another rank caused: its own error says why (it names the cause where it happened). */
    private static final String SEE_ITS_ERROR = " (fix: see that rank's own error or exit status, which names the cause)";

    private static final String MEMBER_KEY = "group/member/";
    private static final String CLOSED_KEY = "group/closed";
    private static final String ALL_CLOSED_KEY = "group/all-closed";
    /** Set by the first rank whose set-up wait failed: "culprit ranks\nmessage", so the others fail naming them. */
    private static final String SETUP_FAILED_KEY = "group/setup-failed";
    /** Per rank: set once it knows of SETUP_FAILED_KEY, so rank 0 keeps its store up until every live rank does. */
    private static final String SETUP_FAILED_SEEN_KEY = "group/setup-failed-seen/";
    /** Counts the ranks that tried to publish SETUP_FAILED_KEY: the first one does, so every rank names the same culprits. */
    private static final String SETUP_FAILED_CLAIMS_KEY = "group/setup-failed-claims";
    /** A member record: "pid startMillis", and on rank 0 " launchToken" (16 hex digits) after it. */
    private static final Pattern MEMBER = Pattern.compile("([1-9][0-9]{0,9}) ([0-9]{1,15})( [0-9a-f]{16})?");
    /** Groups this process joined so far, per run, store address and rank: the next group's generation. */
    private static final ConcurrentHashMap<String, AtomicLong> GENERATIONS = new ConcurrentHashMap<>();

    private final ProcessGroupConfig config;
    private final GroupOptions options;
    private final JobIdentity identity;
    private final StoreSecret secret;
    private final byte[] servedSecret; // rank 0 only
    private final TcpStoreServer server; // rank 0 only
    private final RendezvousStore store;
    private final long[] peerPids;
    private final long[] peerStarts;
    /** This process's seat on the host: two live processes never run as one rank of one job. */
    private final SeatClaim seat;
    /** Rank 0's random token for this launch, learned with the member records; every pad of the group carries it. */
    private final long launchToken;
    /** This group's /dev/shm memory: its transport, or the control plane's where it lives on a device transport. */
    private final SharedMemoryTransport hostTransport;
    /** Where its memories and communicators live: {@link #hostTransport}, or the device transport it was joined on. */
    private final Transport transport;
    private final GroupAbort abortState = new GroupAbort();
    /** Where this group comes from in the launch: the launcher's ranks of its ranks, for {@link #shrink()}. */
    private final Lineage lineage;
    private long exchangeSeq;
    private String previousExchangeKey;
    private boolean closed;

    private ProcessGroup(ProcessGroupConfig config, GroupOptions options, StoreSecret secret, Transport deviceTransport) {
        this(config, options, secret, deviceTransport, Lineage.launched(config));
    }

    private ProcessGroup(ProcessGroupConfig config, GroupOptions options, StoreSecret secret, Transport deviceTransport,
                         Lineage lineage) {
        Configuration.validate(); // a bad -Dsymmem4j.* value fails here, not inside a collective
        // symmem4j.affinity: this process is local rank r of its machine's ranks; checked and pinned before it joins
        RankAffinity.fromConfiguration(config.localWorldSize()).pinProcess(config.localRank());
        this.lineage = lineage;
        this.config = config;
        this.options = options;
        this.secret = secret;
        String address = config.runId() + "@" + config.masterAddr() + ":" + config.masterPort() + "#" + config.rank();
        long generation = GENERATIONS.computeIfAbsent(address, k -> new AtomicLong()).getAndIncrement();
        this.identity = new JobIdentity(config.runId(), generation, config.worldSize());
        this.seat = SeatClaim.claim(config.runId(), generation, config.masterAddr(), config.masterPort(), config.rank());
        TcpStoreServer srv = null;
        byte[] served = null;
        RendezvousStore st;
        try {
            if (config.rank() == 0) {
                served = secret.isHostSecret() ? StoreSecret.generateHostSecret() : secret.bytes();
                srv = startServer(served, lineage.storePortFile() == null ? config.masterPort() : 0);
                if (lineage.storePortFile() != null) {
                    try {
                        ShrinkFiles.publishStorePort(lineage.storePortFile(), srv.port());
                    } catch (RuntimeException e) {
                        srv.close();
                        throw e;
                    }
                }
                if (secret.isHostSecret()) {
                    try {
                        secret.publish(served); // only once this process holds the port: a loser must not overwrite it
                    } catch (RuntimeException e) {
                        srv.close();
                        throw e;
                    }
                }
                st = new LocalServerStore(srv);
            } else {
                int port = lineage.storePortFile() == null ? config.masterPort()
                        : ShrinkFiles.awaitStorePort(lineage.storePortFile(), config, options);
                st = new TcpStoreClient(config.masterAddr(), port, identity, config.rank(), secret,
                        options.timeout(), responseTimeout(options));
            }
        } catch (RuntimeException e) {
            seat.close();
            throw e;
        }
        this.server = srv;
        this.servedSecret = served;
        this.store = st;
        this.peerPids = new long[config.worldSize()];
        this.peerStarts = new long[config.worldSize()];
        long token = 0;
        try {
            ProcessHandle self = ProcessHandle.current();
            String me = self.pid() + " " + self.info().startInstant().map(Instant::toEpochMilli).orElse(0L);
            if (rank() == 0) {
                me += " " + HexFormat.of().toHexDigits(newLaunchToken());
            }
            List<byte[]> members = exchangeThroughStore(MEMBER_KEY, me.getBytes(StandardCharsets.UTF_8), "join");
            for (int r = 0; r < members.size(); r++) {
                String value = new String(members.get(r), StandardCharsets.UTF_8);
                Matcher m = MEMBER.matcher(value);
                if (!m.matches() || (r == 0) != (m.group(3) != null)) {
                    throw new SymmemException("rank=" + rank() + " set-up 'join' of " + identity + ": the member record of"
                            + " rank " + r + " is malformed: '" + abbreviate(value) + "' (expected '<pid> <startMillis>',"
                            + " and ' <launch token>' after it from rank 0 only; is something other than a symmem4j rank of"
                            + " this job, or of another symmem4j version, writing to the store? fix: run the same symmem4j"
                            + " version on every rank, and give each job its own MASTER_PORT and SYMMEM4J_RUN_ID)");
                }
                peerPids[r] = Long.parseLong(m.group(1));
                peerStarts[r] = Long.parseLong(m.group(2));
                if (r == 0) {
                    token = Long.parseUnsignedLong(m.group(3).substring(1), 16);
                }
            }
        } catch (RuntimeException e) {
            closeStore();
            throw e;
        }
        this.launchToken = token;
        // the transport builds peers' /dev/shm names from their process identities, given here
        this.hostTransport = new SharedMemoryTransport(new PeerProcesses() {
            @Override
            public long pid(int rank) {
                return peerPids[rank];
            }

            @Override
            public long startMillis(int rank) {
                return peerStarts[rank];
            }

            @Override
            public long launchToken() {
                return launchToken;
            }
        });
        this.transport = deviceTransport != null ? deviceTransport : hostTransport;
    }

    /**
     * Binds the store, retrying until the timeout while the port is taken: the store of the previous
     * group on this port (this job's or another's) may still be serving its last peers. If the port
     * stays taken, the error names the job that holds it, as that job's store describes itself, or, where no store
     * answers, what does ({@link PortHolder}: another program's server, or a socket that does not listen).
     */
    private TcpStoreServer startServer(byte[] served, int port) {
        Duration handshake = min(options.timeout(), Duration.ofSeconds(10));
        StoreLimits limits = StoreLimits.defaults(config.worldSize()).withHandshakeTimeout(handshake)
                .withRequestTimeout(handshake);
        long deadline = System.nanoTime() + options.timeout().toNanos();
        org.symmem4j.parallel.sync.IdleStrategy idle =
                new org.symmem4j.parallel.sync.BackoffIdleStrategy(0, 0, 10_000_000, 200_000_000);
        while (true) {
            try {
                return new TcpStoreServer(config.masterAddr(), port, identity, served, limits);
            } catch (SymmemException e) {
                if (!(e.getCause() instanceof java.net.BindException)) {
                    throw e;
                }
                if (System.nanoTime() - deadline >= 0) {
                    String store = TcpStoreClient.describeStoreAt(config.masterAddr(), port, Duration.ofSeconds(2),
                            secret);
                    // no store answers: another program's server, or a socket that does not listen at all (some
                    // program's connection got the port as its local one), which "another job" would misname
                    String holder = store != null ? store + " (two jobs on one port; fix: give each job its own"
                            + " MASTER_PORT)" : PortHolder.describe(config.masterAddr(), port, Duration.ofSeconds(2));
                    // error-message: both holders' phrases end with their fix (PortHolder.describe's and the store's)
                    throw new SymmemException("rank=0 of " + identity + " cannot host the rendezvous store: MASTER_PORT="
                            + port + " is still held after " + options.timeout() + " by " + holder, e);
                }
                idle.idle();
            }
        }
    }

    /** A random non-zero token for this launch of the group. */
    private static long newLaunchToken() {
        long t;
        do {
            t = new java.security.SecureRandom().nextLong();
        } while (t == 0);
        return t;
    }

    /** How long the store may take to answer one request: a quarter of the timeout, within [1 s, 10 s]. */
    private static Duration responseTimeout(GroupOptions options) {
        Duration quarter = options.timeout().dividedBy(4);
        return quarter.compareTo(Duration.ofSeconds(1)) < 0 ? Duration.ofSeconds(1) : min(quarter, Duration.ofSeconds(10));
    }

    private static Duration min(Duration a, Duration b) {
        return a.compareTo(b) <= 0 ? a : b;
    }

    private static String abbreviate(String s) {
        String printable = s.replaceAll("[^\\x20-\\x7e]", "?");
        return printable.length() <= 64 ? printable : printable.substring(0, 64) + "...";
    }

    /**
     * Joins the group described by torchrun's environment variables.
     *
     * @return this process's group, once every rank has joined
     * @throws IllegalArgumentException when a variable is missing or malformed
     * @throws SymmemException when the store cannot be reached or bound, the secret is missing or wrong, or a peer
     *         does not arrive within the timeout ({@link PeerTimeoutException})
     */
    public static ProcessGroup fromEnvironment() {
        return join(ProcessGroupConfig.fromEnvironment(), GroupOptions.defaults());
    }

    /**
     * Collective across processes: joins the group described by torchrun's environment variables
     * ({@code RANK}, {@code WORLD_SIZE}, {@code LOCAL_RANK}, {@code MASTER_ADDR}, {@code MASTER_PORT},
     * {@code SYMMEM4J_RUN_ID}) with the given options.
     *
     * @param options timeout and waiting
     * @return this process's group, once every rank has joined
     * @throws IllegalArgumentException when a variable is missing or malformed
     * @throws SymmemException          when the store cannot be reached or bound, or a peer does not
     *         arrive within the timeout ({@link PeerTimeoutException})
     */
    public static ProcessGroup fromEnvironment(GroupOptions options) {
        return join(ProcessGroupConfig.fromEnvironment(), options);
    }

    /**
     * Collective across processes: returns once every rank has joined. The store secret comes from
     * the environment ({@link StoreSecret#resolve}).
     *
     * @param config  this rank's place and the job's identity
     * @param options timeout and waiting
     * @return this process's group, once every rank has joined
     * @throws SymmemException when the store cannot be reached or bound, the secret is missing or wrong, or a peer
     *         does not arrive within the timeout ({@link PeerTimeoutException})
     */
    public static ProcessGroup join(ProcessGroupConfig config, GroupOptions options) {
        return join(config, options, StoreSecret.resolve(System.getenv(), config.runId(), config.masterAddr(),
                config.masterPort()));
    }

    /**
     * As {@link #join(ProcessGroupConfig, GroupOptions)}, with the store secret given.
     *
     * @param config  this rank's place and the job's identity
     * @param options timeout and waiting
     * @param secret  the job's store secret
     * @return this process's group, once every rank has joined
     * @throws SymmemException when the store cannot be reached or bound, the secret is missing or wrong, or a peer
     *         does not arrive within the timeout ({@link PeerTimeoutException})
     */
    public static ProcessGroup join(ProcessGroupConfig config, GroupOptions options, StoreSecret secret) {
        return new ProcessGroup(config, options, secret, null);
    }

    /**
     * Collective across processes: joins the group described by torchrun's environment variables on
     * {@code transport}, a device transport (for example {@code CudaTransport.create()}: one process
     * per GPU), so that {@link org.symmem4j.parallel.SymmetricMemory#allocate} and {@link org.symmem4j.parallel.Communicator#create}
     * give that transport's memory and communicators; its control plane lives in the group's
     * {@code /dev/shm} memory ({@link #hostTransport()}). The transport is not closed with the group.
     *
     * @param options   timeout and waiting
     * @param transport where the group's memories and communicators live
     * @return this process's group, once every rank has joined
     * @throws IllegalArgumentException when a variable is missing or malformed
     * @throws SymmemException when the store cannot be reached or bound, the secret is missing or wrong, or a peer
     *         does not arrive within the timeout ({@link PeerTimeoutException})
     */
    public static ProcessGroup fromEnvironment(GroupOptions options, Transport transport) {
        ProcessGroupConfig config = ProcessGroupConfig.fromEnvironment();
        return new ProcessGroup(config, options, StoreSecret.resolve(System.getenv(), config.runId(), config.masterAddr(),
                config.masterPort()), java.util.Objects.requireNonNull(transport, "transport"));
    }

    /** {@return the configuration the group was joined with: where this rank sits and which job it belongs to} */
    public ProcessGroupConfig config() {
        return config;
    }

    /** {@return the group's identity in the store: the run id, generation and size it was created with} */
    public JobIdentity identity() {
        return identity;
    }

    @Override
    public int rank() {
        return config.rank();
    }

    @Override
    public int worldSize() {
        return config.worldSize();
    }

    @Override
    public int localRank() {
        return config.localRank();
    }

    @Override
    public int localWorldSize() {
        return config.localWorldSize();
    }

    @Override
    public GroupOptions options() {
        return options;
    }

    @Override
    public RendezvousStore store() {
        return store;
    }

    @Override
    public Transport transport() {
        return transport;
    }

    @Override
    public Transport hostTransport() {
        return hostTransport;
    }

    @Override
    public GroupAbort abortState() {
        return abortState;
    }

    /**
     * Pid of rank {@code peer}'s process.
     *
     * @param peer a rank of the group
     * @return its process id
     */
    public long pid(int peer) {
        return peerPids[peer];
    }

    /**
     * Start time (epoch ms, 0 = unknown) of rank {@code peer}'s process.
     *
     * @param peer a rank of the group
     * @return its process start, epoch milliseconds, or 0
     */
    public long startMillis(int peer) {
        return peerStarts[peer];
    }

    @Override
    public List<byte[]> allGatherBytes(String tag, byte[] mine) {
        if (closed) {
            throw new IllegalStateException("rank=" + rank() + " group already closed; expected an open group"
                    + " (fix: make"
                    + " every call before close(), or create a new group)");
        }
        String prefix = "x/" + (exchangeSeq++) + "/" + tag + "/";
        List<byte[]> all;
        try {
            all = exchangeThroughStore(prefix, mine, tag);
        } catch (PeerTimeoutException e) {
            // the group cannot be used any more: its teardown must not wait for peers again
            abortState.raise(e.missingRanks().isEmpty() ? rank() : e.missingRanks().getFirst(), e.getMessage());
            throw e;
        }
        // Every rank set this exchange's key, so every rank finished reading the previous one: this
        // rank's key of the previous exchange is nobody's business any more. The store holds at most
        // two exchanges, however long the job runs.
        if (previousExchangeKey != null) {
            store.delete(previousExchangeKey);
        }
        previousExchangeKey = prefix + rank();
        return all;
    }

    /**
     * Sets {@code prefix+rank} and waits for every rank's key, in slices, checking between slices
     * whether the missing ranks' processes still exist. First checks that no other process claims this
     * rank's seat: a set-up exchange is the last point before data moves where the whole group can fail
     * together.
     */
    private List<byte[]> exchangeThroughStore(String prefix, byte[] mine, String what) {
        try {
            try {
                seat.check();
            } catch (SymmemException twin) {
                publishSetUpFailure(List.of(rank()), twin.getMessage());
                abortState.raise(rank(), twin.getMessage()); // the group cannot be used: its teardown waits for nobody
                throw twin;
            }
            return StoreExchange.exchange(store, prefix, rank(), worldSize(), mine, options.timeout(),
                    (missing, deadlinePassed) -> {
                        failIfAPeerGaveUp(what);
                        List<Integer> dead = missing.stream().filter(p -> !knownAlive(p)).toList();
                        if (!dead.isEmpty()) {
                            throw giveUp(new PeerTimeoutException("rank=" + rank() + " set-up '" + what + "': "
                                    + describeJoining(dead) + " exited before arriving" + SEE_ITS_ERROR, rank(), dead, what,
                                    PeerTimeoutException.Reason.PEER_EXITED, options.timeout()));
                        }
                        if (deadlinePassed) {
                            throw giveUp(new PeerTimeoutException("rank=" + rank() + " set-up '" + what + "' of "
                                    + identity + ": timed out after " + options.timeout() + " waiting for ranks "
                                    + missing + " (fix: start every rank with the same WORLD_SIZE, MASTER_ADDR,"
                                    + " MASTER_PORT and run id, or raise symmem4j.timeout.ms if they start slowly)",
                                    rank(), missing, what, PeerTimeoutException.Reason.DEADLINE_PASSED,
                                    options.timeout()));
                        }
                    });
        } catch (PeerTimeoutException | StoreTimeoutException e) {
            throw e;
        } catch (SymmemException e) {
            throw storeGone(e, what);
        }
    }

    /**
     * A store call failed for another reason than a wait: on ranks other than 0, the connection to rank
     * 0's store. When rank 0's process is gone, that is rank 0's failure and is named as such; otherwise
     * {@code e} as it is.
     */
    private SymmemException storeGone(SymmemException e, String what) {
        if (server != null || peerPids[0] == 0 || isAlive(0)) {
            return e;
        }
        PeerTimeoutException gone = new PeerTimeoutException("rank=" + rank() + " set-up '" + what + "': " + describe(0)
                + ", which hosts the rendezvous store, exited: " + e.getMessage() + SEE_ITS_ERROR, rank(), List.of(0), what,
                PeerTimeoutException.Reason.PEER_EXITED, options.timeout());
        gone.initCause(e);
        return gone;
    }

    /** Throws, naming the culprits, if another rank already gave up on the group's set-up. */
    private void failIfAPeerGaveUp(String what) {
        Optional<byte[]> failed = store.tryGet(SETUP_FAILED_KEY);
        if (failed.isEmpty()) {
            return;
        }
        SetUpFailure f = SetUpFailure.parse(failed.get());
        try {
            store.set(SETUP_FAILED_SEEN_KEY + rank(), new byte[] {1});
        } catch (RuntimeException ignored) {
            // rank 0 already gone: the error below says enough
        }
        throw new PeerTimeoutException("rank=" + rank() + " set-up '" + what + "': another rank gave up on the group: "
                + f.reason() + SEE_ITS_ERROR, rank(), f.culprits(), what, PeerTimeoutException.Reason.PEER_ABORTED,
                options.timeout());
    }

    /** A set-up failure as published in the store: "culprit ranks\nmessage". */
    private record SetUpFailure(List<Integer> culprits, String reason) {
        static SetUpFailure parse(byte[] value) {
            String[] parts = new String(value, StandardCharsets.UTF_8).split("\n", 2);
            List<Integer> culprits = new ArrayList<>();
            if (parts.length == 2 && parts[0].matches("[0-9]{1,9}(,[0-9]{1,9})*")) {
                for (String r : parts[0].split(",")) {
                    culprits.add(Integer.parseInt(r));
                }
            }
            return new SetUpFailure(culprits, parts.length == 2 ? parts[1] : "(malformed report)");
        }
    }

    /** Publishes this rank's set-up failure (see {@link #publishSetUpFailure}). Returns {@code e}. */
    private PeerTimeoutException giveUp(PeerTimeoutException e) {
        publishSetUpFailure(e.missingRanks().isEmpty() ? List.of(rank()) : e.missingRanks(), e.getMessage());
        return e;
    }

    /**
     * Publishes this rank's set-up failure, so that the other ranks fail at once naming the same
     * culprits instead of finding the store gone (rank 0's failure closes it). Only the first rank to
     * fail publishes: every rank then names the same culprits. Rank 0 keeps its store up until the live
     * ranks have read it ({@link #awaitSetUpFailureSeen}).
     */
    private void publishSetUpFailure(List<Integer> culprits, String message) {
        try {
            if (store.add(SETUP_FAILED_CLAIMS_KEY, 1) == 1) {
                String list = String.join(",", culprits.stream().map(String::valueOf).toList());
                store.set(SETUP_FAILED_KEY, (list + "\n" + message).getBytes(StandardCharsets.UTF_8));
            }
            store.set(SETUP_FAILED_SEEN_KEY + rank(), new byte[] {1});
        } catch (RuntimeException ignored) {
            // the store is gone or full: the peers find out on their own
        }
    }

    /**
     * Rank 0, before closing its store after a set-up failure: waits until every rank that is alive and
     * not among the culprits has read the failure (its SETUP_FAILED_SEEN key), bounded by the timeout. A
     * rank still on its way to the store (mapping files, or connecting) would otherwise find the store gone
     * and could only blame rank 0, which is alive.
     */
    private void awaitSetUpFailureSeen() {
        InMemoryStore local = server.store();
        Optional<byte[]> failed = local.tryGet(SETUP_FAILED_KEY);
        if (failed.isEmpty()) {
            return;
        }
        List<Integer> culprits = SetUpFailure.parse(failed.get()).culprits();
        long deadline = System.nanoTime() + options.timeout().toNanos();
        org.symmem4j.parallel.sync.IdleStrategy idle =
                new org.symmem4j.parallel.sync.BackoffIdleStrategy(0, 0, 1_000_000, 20_000_000);
        while (System.nanoTime() - deadline < 0) {
            boolean all = true;
            for (int r = 1; r < worldSize() && all; r++) {
                all = culprits.contains(r) || local.tryGet(SETUP_FAILED_SEEN_KEY + r).isPresent() || !knownAlive(r);
            }
            if (all) {
                return;
            }
            idle.idle();
        }
    }

    /**
     * Whether {@code peer} may still arrive: false when its process is known to be gone. Before the
     * join completes only rank 0 knows peers' processes, from their handshakes with its store.
     */
    private boolean knownAlive(int peer) {
        if (peerPids[peer] != 0) {
            return isAlive(peer);
        }
        java.nio.file.Path membership = Configuration.MEMBERSHIP_FILE.get();
        if (membership != null && ShrinkFiles.readDead(membership).contains(lineage.launchRanks().get(peer))) {
            return false; // the launcher saw it exit (a death during a shrink's rebuild fails the join at once)
        }
        long[] holder = server == null ? null : server.seatHolder(peer);
        return holder == null || ProcessLiveness.isRunning(holder[0], holder[1]);
    }

    @Override
    public boolean isAlive(int peer) {
        long pid = peerPids[peer];
        if (pid == 0) {
            return true; // not joined yet: unknown, so not known dead
        }
        return ProcessLiveness.isRunning(pid, peerStarts[peer]);
    }

    private String describeJoining(List<Integer> ranks) {
        List<String> parts = new ArrayList<>();
        for (int p : ranks) {
            long[] holder = peerPids[p] == 0 && server != null ? server.seatHolder(p) : null;
            parts.add(holder == null ? describe(p) : "rank " + p + " (pid " + holder[0] + ")");
        }
        return String.join(", ", parts);
    }

    @Override
    public String describe(int peer) {
        return "rank " + peer + (peerPids[peer] == 0 ? "" : " (pid " + peerPids[peer] + ")");
    }

    /**
     * Leaves the group. Rank 0 keeps serving the store until every live rank has left (bounded by
     * the timeout), because peers may still be finishing set-up exchanges. An aborted group leaves
     * at once: its peers are failing too, and nobody waits a second timeout.
     */
    @Override
    public void close() {
        if (closed) {
            return;
        }
        closed = true;
        try {
            if (!abortState.isRaised()) {
                long n = store.add(CLOSED_KEY, 1);
                if (n == worldSize()) {
                    store.set(ALL_CLOSED_KEY, new byte[] {1});
                }
                if (rank() == 0) {
                    awaitPeersLeft();
                }
            }
        } catch (RuntimeException e) {
            // rank 0 gone or not answering (every store call is bounded): nothing left to coordinate with
        } finally {
            closeStore();
        }
    }

    private void awaitPeersLeft() {
        long deadline = System.nanoTime() + options.timeout().toNanos();
        while (System.nanoTime() < deadline && !abortState.isRaised()) {
            try {
                store.get(ALL_CLOSED_KEY, StoreExchange.POLL_SLICE);
                return;
            } catch (StoreTimeoutException e) {
                boolean anyAlive = false;
                for (int r = 1; r < worldSize(); r++) {
                    anyAlive |= isAlive(r);
                }
                if (!anyAlive) {
                    return;
                }
            }
        }
    }

    private void closeStore() {
        if (server != null) {
            awaitSetUpFailureSeen();
        }
        store.close();
        if (server != null) {
            server.close();
            secret.unpublish(servedSecret);
        }
        seat.close();
    }

    @Override
    public String toString() {
        return "ProcessGroup[rank=" + rank() + ", worldSize=" + worldSize() + ", master=" + config.masterAddr() + ":"
                + config.masterPort() + ", run=" + identity.runId() + ", generation=" + identity.generation() + "]";
    }

    /** Rank 0 talks to its own server's map directly rather than through a loopback socket. */
    private record LocalServerStore(TcpStoreServer server) implements RendezvousStore {
        @Override
        public void set(String key, byte[] value) {
            server.store().set(key, value);
        }

        @Override
        public byte[] get(String key, Duration timeout) {
            return server.store().get(key, timeout);
        }

        @Override
        public Optional<byte[]> tryGet(String key) {
            return server.store().tryGet(key);
        }

        @Override
        public List<byte[]> getAll(List<String> keys, Duration timeout) {
            return server.store().getAll(keys, timeout);
        }

        @Override
        public long add(String key, long delta) {
            return server.store().add(key, delta);
        }

        @Override
        public boolean delete(String key) {
            return server.store().delete(key);
        }

        @Override
        public void close() {
            // the server is closed by the group
        }
    }

    @Override
    public Group split(int color, int key, String label) {
        return GroupSplit.split(this, color, key, label);
    }

    /**
     * The launch a group comes from: the launcher's run id and port, and the launcher's rank ({@code RANK}) of each
     * of this group's ranks (the identity for the group the launcher started; the survivors' ranks after a shrink).
     *
     * @param storePortFile where the store's port is published: null for a launched group, whose store listens on
     *                      {@code MASTER_PORT}; for a shrunk group, a file beside the membership file, which its rank
     *                      0 writes once its store is bound to a port the system chose (so no job's port is taken)
     */
    private record Lineage(String runId, int masterPort, List<Integer> launchRanks, java.nio.file.Path storePortFile) {
        static Lineage launched(ProcessGroupConfig config) {
            List<Integer> ranks = new ArrayList<>(config.worldSize());
            for (int r = 0; r < config.worldSize(); r++) {
                ranks.add(r);
            }
            return new Lineage(config.runId(), config.masterPort(), List.copyOf(ranks), null);
        }
    }

    /**
     * True when the launcher announces dead ranks ({@code SYMMEM4J_MEMBERSHIP_FILE}, set by {@code symmem4j-run
     * --on-failure shrink}) and the group lives on its host transport or on a device transport that survives a shrink
     * ({@link Transport#survivesShrink()}: CUDA's, not NVSHMEM's), on one machine.
     */
    @Override
    public boolean canShrink() {
        return Configuration.MEMBERSHIP_FILE.get() != null && (transport == hostTransport || transport.survivesShrink())
                && config.localWorldSize() == config.worldSize();
    }

    /**
     * In-place shrink ({@link Group#shrink()}): reads the launcher's membership file until it names ranks of this
     * group (polled every 10 ms, at most the timeout), then the survivors join a new process group: run id
     * {@code <launch run id>-without-<dead launch ranks>}, hosted by the first survivor, whose store binds a port the
     * system chooses (so it cannot take another job's port) and publishes it in the file
     * {@code <membership file>.store-<run id>} beside the membership file, where the other survivors read it; the
     * same secret. The
     * survivors keep their order. This group is aborted (its teardown waits for nobody). A group on a device transport
     * tells it ({@link Transport#shrinking}) and the survivors' group is joined on the same device transport: the
     * caller closes the old group's memories and communicators and releases it there ({@link Transport#release}). Two survivors that read the
     * file at different moments of a second death name different groups and fail the join within the timeout.
     * Each dead rank takes out the ranks {@code lostWith} names ({@link Group#shrink(java.util.function.IntFunction)});
     * a rank so taken out gets no group, and the survivors' run id names every rank that left, the dead and the
     * leaving alike, so it does not depend on whether a leaving rank has exited when a survivor reads the file.
     */
    @Override
    public Survivors shrink(java.util.function.IntFunction<int[]> lostWith) {
        if (!canShrink()) {
            return Group.super.shrink(lostWith); // says why not
        }
        java.nio.file.Path file = Configuration.MEMBERSHIP_FILE.get();
        long deadline = System.nanoTime() + options.timeout().toNanos();
        org.symmem4j.parallel.sync.IdleStrategy idle =
                new org.symmem4j.parallel.sync.BackoffIdleStrategy(0, 0, 1_000_000, 10_000_000);
        java.util.SortedSet<Integer> deadLaunchRanks;
        List<Integer> dead = new ArrayList<>();
        while (true) {
            deadLaunchRanks = ShrinkFiles.readDead(file);
            dead.clear();
            for (int r = 0; r < worldSize(); r++) {
                if (deadLaunchRanks.contains(lineage.launchRanks().get(r))) {
                    dead.add(r);
                }
            }
            if (!dead.isEmpty()) {
                break;
            }
            if (System.nanoTime() - deadline >= 0) {
                throw new SymmemException("rank=" + rank() + " of " + identity + " cannot shrink: the launcher's membership"
                        + " file " + file + " named no dead rank of this group within timeout=" + options.timeout()
                        + " (expected a rank that exited; a rank that hangs is not dead: it is named by the peers'"
                        + " timeouts, and the job fails instead of shrinking; fix: call shrink() after a peer exited,"
                        + " under symmem4j-run --on-failure shrink, not on a timeout alone)");
            }
            idle.idle();
        }
        if (dead.contains(rank())) {
            throw new SymmemException("rank=" + rank() + " of " + identity + " cannot shrink: the launcher announced this"
                    + " rank (launch rank " + lineage.launchRanks().get(rank()) + ") dead in " + file + " while it runs"
                    + " (expected only exited ranks in it; fix: let only symmem4j-run write the membership file, and"
                    + " end this process: the survivors go on without it)");
        }
        // the dead and the ranks they take out with them: every survivor computes the same set from the same dead
        ShrinkPlan plan = ShrinkPlan.of(worldSize(), rank(), dead, lostWith, identity.toString());
        java.util.SortedSet<Integer> gone = new java.util.TreeSet<>(deadLaunchRanks);
        List<Integer> survivors = new ArrayList<>();
        for (int r = 0; r < worldSize(); r++) {
            if (!plan.leaves(r)) {
                survivors.add(lineage.launchRanks().get(r));
            } else {
                gone.add(lineage.launchRanks().get(r)); // the same name whether a leaving rank has exited yet or not
            }
        }
        if (plan.leaves(rank())) {
            abortState.raise(dead.getFirst(), "rank=" + rank() + ": leaves with dead ranks " + dead + " of " + identity);
            return new Survivors(null, List.copyOf(dead), plan.leaving());
        }
        int newRank = survivors.indexOf(lineage.launchRanks().get(rank()));
        StringBuilder without = new StringBuilder();
        for (int d : gone) {
            without.append(without.isEmpty() ? "" : "-").append(d);
        }
        // the new store binds a port the system chooses, which no other job holds, and its host publishes it beside
        // the membership file; the config keeps the launch's MASTER_PORT as the group's name in identities and claims
        String runId = lineage.runId() + "-without-" + without;
        java.nio.file.Path portFile = file.resolveSibling(file.getFileName() + ".store-" + runId);
        ProcessGroupConfig next = new ProcessGroupConfig(newRank, survivors.size(), newRank, survivors.size(),
                config.masterAddr(), lineage.masterPort(), runId);
        abortState.raise(dead.getFirst(), "rank=" + rank() + ": shrunk in place without ranks " + dead
                + " of " + identity);
        Transport device = transport == hostTransport ? null : transport;
        if (device != null) {
            device.shrinking(this, List.copyOf(dead));
        }
        ProcessGroup shrunk = new ProcessGroup(next, options, secret, device,
                new Lineage(lineage.runId(), lineage.masterPort(), List.copyOf(survivors), portFile));
        return new Survivors(shrunk, List.copyOf(dead), plan.leaving());
    }

}
