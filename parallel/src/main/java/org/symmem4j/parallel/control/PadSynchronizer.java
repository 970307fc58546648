package org.symmem4j.parallel.control;

import static org.symmem4j.parallel.control.SignalPadLayout.ABORT_CLAIMED;
import static org.symmem4j.parallel.control.SignalPadLayout.ABORT_REASON_MAX_BYTES;
import static org.symmem4j.parallel.control.SignalPadLayout.ABORT_REASON_OFFSET;
import static org.symmem4j.parallel.control.SignalPadLayout.ABORT_WORD_OFFSET;
import static org.symmem4j.parallel.control.SignalPadLayout.LONG;
import static org.symmem4j.parallel.control.SignalPadLayout.WAITING_FOR_OFFSET;
import static org.symmem4j.parallel.control.SignalPadLayout.WAIT_HEARTBEAT_OFFSET;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;
import org.symmem4j.parallel.Configuration;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.GroupAbort;
import org.symmem4j.parallel.PeerTimeoutException;
import org.symmem4j.parallel.PeerTimeoutException.Reason;
import org.symmem4j.parallel.SignalOp;
import org.symmem4j.parallel.sync.WaitSubject;
import org.symmem4j.parallel.sync.Waiter;

/**
 * One rank's flag protocols over the signal pads of a host symmetric memory: barrier, neighbour
 * step counters, user signals and group abort. Every wait is bounded: it fails with a
 * {@link PeerTimeoutException} naming the ranks that did not arrive once the deadline passes, a
 * missing rank's thread or process is found dead, or a peer aborted. A rank that fails a wait
 * aborts the group, so every other waiting rank fails promptly instead of waiting out its own
 * timeout.
 *
 * <p>Who is to blame on a timeout: a rank blocked in a wait bumps a heartbeat in its own pad and says
 * there which rank it waits for ({@link SignalPadLayout#WAIT_HEARTBEAT_OFFSET}). A waiter whose deadline
 * passes follows those from the ranks it misses: a missing rank that kept beating is blocked too, so
 * the waiter follows it to the rank it waits for, until it reaches ranks that neither arrived nor
 * waited during the second half of the wait (a stopped, hung or busy process). Those are named and
 * blamed in the abort, on every rank alike, instead of a ring neighbour that merely waits as well.
 *
 * <p>Used by one thread (the rank's); not thread-safe.
 */
public final class PadSynchronizer implements WaitSubject {

    private enum WaitKind { ENTRY, BARRIER, STEP, SIGNAL, LEFT }

    /** Longest wait for an aborting peer to finish writing its reason after claiming the abort word. */
    private static final long ABORT_REASON_WAIT_NANOS = 2_000_000_000L;
    /** Least time between two heartbeats of a blocked wait: peers read them only when their own wait times out. */
    private static final long HEARTBEAT_INTERVAL_NANOS = 1_000_000L;

    private final Group group;
    private final int rank;
    private final int worldSize;
    private final MemorySegment[] pads;
    private final MemorySegment ownPad;
    private final Waiter waiter;
    private final long livenessIntervalNanos;
    /** Unregisters this synchronizer from the group's abort; run when its memory is freed. */
    private final Runnable detachFromGroupAbort;
    /** Set once this rank started leaving this memory (its close). */
    private volatile boolean leaving;

    /**
     * The synchronizers of every live memory of each rank's group (keyed by the rank's
     * {@link GroupAbort}, which is unique per rank's group object), as arrays that are replaced, never
     * changed, so a wait can scan them without allocating. See {@link #checkNoneLeft}.
     */
    private static final ConcurrentHashMap<GroupAbort, PadSynchronizer[]> RANK_MEMORIES = new ConcurrentHashMap<>();

    private long barrierEpoch;

    // The operation in progress, named in errors; set per operation without building strings.
    private String opKind = "operation";
    private long opNumber = -1;
    /** This rank's last collectives in words (its flight recorder), for failure messages; null: none. */
    private java.util.function.Supplier<String> lastOps = () -> null;

    // The wait in progress, for error reports (set only on the slow path).
    private WaitKind waitKind;
    private String waitPhase; // a constant; the full label is built only for an error
    private long waitTarget;
    private int waitPeer;
    private long waitOffset;
    private long lastLivenessCheckNanos;

    // Heartbeats: this rank's, published while it is blocked, and peers' as sampled once a wait is half over.
    private final long halfTimeoutNanos;
    private long heartbeats;
    private long lastHeartbeatNanos;
    private final long[] heartbeatAtMark;
    private boolean marked;

    /**
     * Polls a wait makes without a pause before its idle strategy begins ({@link Configuration#WAIT_SPIN_FIRST}, 0 by
     * default, read once per JVM): a pause ({@code Thread.onSpinWait()}) lasts tens of ns on recent Xeons, so a
     * spinning wait notices the peer's store only at that granularity, and work done just before the wait (the flight
     * recorder's entry, in the entry barrier's shadow) shifts every poll after it. The experiment of issue #36.
     */
    private static final int SPIN_FIRST = Configuration.WAIT_SPIN_FIRST.get();

    /**
     * This rank's synchronizer over the signal pads of {@code group}'s ranks.
     *
     * @param group this rank's group (its rank, size, options, liveness and abort state)
     * @param pads  every rank's signal pad as mapped in this rank, in rank order ({@link SignalPadLayout})
     */
    public PadSynchronizer(Group group, MemorySegment[] pads) {
        this.group = group;
        this.rank = group.rank();
        this.worldSize = group.worldSize();
        this.pads = pads;
        this.ownPad = pads[rank];
        this.waiter = new Waiter(group.options().idleStrategy().get(), group.options().timeout());
        this.livenessIntervalNanos = group.options().livenessInterval().toNanos();
        this.halfTimeoutNanos = group.options().timeout().toNanos() / 2;
        this.heartbeatAtMark = new long[worldSize];
        // An abort raised anywhere on this rank (another memory, a communicator, Group.abort) is
        // written into this memory's pads too, so peers waiting on this memory hear of it.
        this.detachFromGroupAbort = group.abortState().onRaise(this::writeAbort);
        RANK_MEMORIES.merge(group.abortState(), new PadSynchronizer[] {this}, (old, one) -> {
            PadSynchronizer[] grown = Arrays.copyOf(old, old.length + 1);
            grown[old.length] = this;
            return grown;
        });
    }

    /**
     * Names the operation the next waits belong to (for example kind "all-reduce", number 12).
     *
     * @param kind   what the operation is
     * @param number its sequence number in the group, or -1 for none
     */
    public void beginOp(String kind, long number) {
        opKind = kind;
        opNumber = number;
    }

    /**
     * Where this rank's last collectives come from for failure messages (its control plane's flight recorder).
     *
     * @param lastOps this rank's last collectives in words, or null when not recorded
     */
    public void describePositionsWith(java.util.function.Supplier<String> lastOps) {
        this.lastOps = lastOps;
    }

    /**
     * Where every rank is, from the entry lines in this rank's pad (each rank's latest collective that
     * reached this rank's pad) and this rank's own op: "ranks 0-2 at all-reduce#13; rank 3 last entered
     * all-reduce#12", grouped, then this rank's flight-recorder tail. Error path only: it allocates, and
     * reads a peer's line while the peer may rewrite it for a later op (a hung peer does not), so it is a
     * diagnosis, not a verdict.
     */
    String positions() {
        java.util.Map<String, List<Integer>> byPlace = new java.util.LinkedHashMap<>();
        for (int p = 0; p < worldSize; p++) {
            String place;
            if (p == rank) {
                place = "at " + currentOp();
            } else {
                long best = 0;
                long bestLine = -1;
                for (int parity = 0; parity < 2; parity++) {
                    long line = SignalPadLayout.entryLineOffset(p, parity);
                    // acquire: pairs with p's release of the epoch in arrive(); its descriptor fields are visible
                    long epoch = (long) LONG.getAcquire(ownPad, line + OpDescriptorLayout.EPOCH);
                    if (epoch > best) {
                        best = epoch;
                        bestLine = line;
                    }
                }
                if (bestLine < 0) {
                    place = "entered no collective yet";
                } else {
                    int kind = ownPad.get(ValueLayout.JAVA_INT, bestLine + OpDescriptorLayout.KIND);
                    OpDescriptorLayout.Kind[] kinds = OpDescriptorLayout.Kind.values();
                    String label = kind >= 0 && kind < kinds.length ? DescriptorCheck.label(kinds[kind]) : "collective";
                    place = (best - 1 == opNumber ? "at " : "last entered ") + label + "#" + (best - 1);
                }
            }
            byPlace.computeIfAbsent(place, k -> new ArrayList<>()).add(p);
        }
        StringBuilder b = new StringBuilder("where the ranks are: ");
        boolean first = true;
        for (java.util.Map.Entry<String, List<Integer>> e : byPlace.entrySet()) {
            b.append(first ? "" : "; ").append(rankList(e.getValue())).append(' ').append(e.getKey());
            first = false;
        }
        String mine = lastOps.get();
        if (mine != null) {
            b.append("; this rank's last collectives: ").append(mine);
        }
        return b.toString();
    }

    /** "rank 3", "ranks 0-2", "ranks 0, 2, 5". */
    private static String rankList(List<Integer> ranks) {
        if (ranks.size() == 1) {
            return "rank " + ranks.getFirst();
        }
        boolean consecutive = ranks.getLast() - ranks.getFirst() == ranks.size() - 1;
        return "ranks " + (consecutive ? ranks.getFirst() + "-" + ranks.getLast()
                : String.join(", ", ranks.stream().map(String::valueOf).toList()));
    }

    /** {@return the name of this rank's latest collective ("all-reduce"), as {@link #beginOp} was given it} */
    String opName() {
        return opKind;
    }

    /**
     * The operation in progress, for error messages.
     *
     * @return for example {@code "all-reduce#12"}
     */
    public String currentOp() {
        return opNumber >= 0 ? opKind + "#" + opNumber : opKind;
    }

    /** "all-reduce#12 entry": built only when an error is reported. */
    private String label(String phase) {
        return (opNumber >= 0 ? opKind + "#" + opNumber : opKind) + " " + phase;
    }

    /**
     * This rank's own signal pad.
     *
     * @return the pad, {@link SignalPadLayout#padBytes} bytes
     */
    public MemorySegment ownPad() {
        return ownPad;
    }

    MemorySegment pad(int peer) {
        return pads[peer];
    }

    /**
     * Arrives at collective number {@code descriptor.seq()}: writes the descriptor and then the epoch
     * into this rank's entry line in every peer's pad, and waits until every peer's entry line in
     * this rank's pad carries the epoch. Afterwards {@link #entryLine(int, long)} holds each peer's
     * descriptor, readable with plain loads. This is a barrier: the release store of the epoch
     * publishes everything this rank wrote before arriving (its data too).
     *
     * <p>With {@code shadowRecorder} (the default placement, {@code symmem4j.flight.recorder.arrival=in-shadow}) this
     * rank's own line is written into the flight recorder's entry instead of into its own pad, and the entry's other
     * words between the publishing and the waiting ({@link FlightRecorder#ownLineWritten}): a rank that arrives first
     * waits anyway, so the work sits in the wait's shadow. It is not free for the last to arrive (its stores queue in
     * the store buffer behind the ones the peers wait for), but measured cheaper than writing the entry after the wait
     * ({@code after-wait}, {@link ControlPlane#arriveAndCheck}): one-shot 1 KiB on 2 ranks, +45 against +60 ns on 16
     * cores ({@code bench/results/2026-11-29-recorder-placement-16core.md}). A failure during the wait records the
     * entry from what this rank published ({@link #published}).
     *
     * @param descriptor     this rank's arguments of the collective, in the descriptor layout
     * @param shadowRecorder a flight recorder to write the entry into between the publishing and the waiting (the
     *                       default placement: {@code symmem4j.flight.recorder.arrival=in-shadow}), or null (then
     *                       the entry is written after the wait: {@code arrival=after-wait})
     * @throws PeerTimeoutException when a peer does not arrive in time, is gone, or the group was aborted
     */
    public void arrive(OpDescriptorLayout.Descriptor descriptor, FlightRecorder shadowRecorder) {
        checkNotAborted("entry");
        long seq = descriptor.seq();
        long epoch = seq + 1;
        long myLine = SignalPadLayout.entryLineOffset(rank, seq);
        // recording in the shadow: this rank's own line goes into the recorder's entry instead of into its own pad,
        // which only this thread reads (published(); the recorder's entry answers first there), through the same call
        // site as the peers' lines, so the compiled collective carries no second copy of write()
        boolean ownLineInEntry = shadowRecorder != null;
        MemorySegment ownTarget = ownLineInEntry ? shadowRecorder.ownLineSegment() : ownPad;
        long ownOffset = ownLineInEntry ? shadowRecorder.ownLineOffset(seq) : myLine;
        // the peers' lines first, this rank's own line last: nothing goes before the releases the peers wait for (the
        // recorder's entry is a new line every collective, and x86 drains stores in order); no gain was measurable on
        // 32 cores (bench/results/2026-11-30-recorder-own-line-32core.md), the order is kept as the one that cannot hurt
        for (int i = 1; i <= worldSize; i++) {
            int p = rank + i < worldSize ? rank + i : rank + i - worldSize;
            boolean own = p == rank;
            MemorySegment pad = own ? ownTarget : pads[p];
            long line = own ? ownOffset : myLine;
            descriptor.write(pad, line);
            if (!own || !ownLineInEntry) {
                // release: publishes the descriptor above and this rank's earlier writes; acquired below by p
                LONG.setRelease(pad, line + OpDescriptorLayout.EPOCH, epoch);
            }
        }
        if (ownLineInEntry) {
            shadowRecorder.ownLineWritten(descriptor, opKind); // the entry's words beside the line
        }
        for (int p = 0; p < worldSize; p++) {
            if (p != rank) {
                long offset = SignalPadLayout.entryLineOffset(p, seq) + OpDescriptorLayout.EPOCH;
                // acquire: pairs with p's release above; p's descriptor and data are visible after it
                if ((long) LONG.getAcquire(ownPad, offset) < epoch) {
                    slowWait(WaitKind.ENTRY, "entry", offset, epoch, p);
                }
            }
        }
    }

    /**
     * Whether every peer arrived at collective {@code seq}'s entry barrier: its entry line for {@code seq} in this
     * rank's pad carries the epoch (a peer cannot be two collectives ahead, so the line is still {@code seq}'s).
     * Message and failure paths only: the flight recorder asks it instead of storing a state per collective.
     *
     * @param seq the collective's sequence number
     * @return true when every peer's descriptor of {@code seq} is here
     */
    boolean everyPeerArrived(long seq) {
        for (int p = 0; p < worldSize; p++) {
            // acquire: pairs with p's release of its epoch in arrive(), as the wait's own load does
            if (p != rank && (long) LONG.getAcquire(ownPad, SignalPadLayout.entryLineOffset(p, seq)
                    + OpDescriptorLayout.EPOCH) < seq + 1) {
                return false;
            }
        }
        return true;
    }

    /**
     * Whether this rank published its descriptor of collective {@code seq} ({@link #arrive} got past its abort check
     * and wrote the epoch): read from this rank's own entry line in its own pad, which only this thread writes, so
     * the hot path keeps no flag for it. Failure paths only.
     *
     * @param seq the collective's sequence number
     * @return true once this rank arrived at {@code seq}'s entry barrier
     */
    boolean published(long seq) {
        // with an own-line recorder on, this rank's line is the recorder's entry and this reads false: callers ask the
        // recorder first (ControlPlane.recordPendingArrival: lacksEntry is false once the entry is written)
        // plain: this rank's own line in its own pad, written by this thread in arrive()
        return ownPad.get(ValueLayout.JAVA_LONG, SignalPadLayout.entryLineOffset(rank, seq) + OpDescriptorLayout.EPOCH)
                == seq + 1;
    }

    /**
     * This rank's own descriptor of collective {@code seq} as {@link #arrive} published it (valid while
     * {@link #published} says so). Failure paths only: it allocates.
     *
     * @param seq the collective's sequence number
     * @return a fresh copy of the descriptor
     */
    OpDescriptorLayout.Descriptor publishedDescriptor(long seq) {
        return OpDescriptorLayout.Descriptor.read(ownPad, SignalPadLayout.entryLineOffset(rank, seq));
    }

    /**
     * Where rank {@code peer}'s entry line for op {@code seq} lies in this rank's pad (valid after {@link #arrive}).
     *
     * @param peer a rank of the group
     * @param seq  the collective's sequence number
     * @return the line's byte offset in {@link #ownPad()}
     */
    public long entryLine(int peer, long seq) {
        return SignalPadLayout.entryLineOffset(peer, seq);
    }

    /**
     * Every rank signals every peer, then waits for every peer's signal. The release store
     * publishes all of this rank's earlier writes (data, descriptor); the matching acquire load in
     * the peer's wait loop makes them visible there.
     *
     * @param phase names the barrier in a timeout's message
     * @throws PeerTimeoutException when a peer does not arrive in time, is gone, or the group was aborted
     */
    public void barrier(String phase) {
        checkNotAborted(phase);
        long epoch = ++barrierEpoch;
        long mySlot = SignalPadLayout.barrierSlotOffset(worldSize, rank);
        for (int p = 0; p < worldSize; p++) {
            if (p != rank) {
                // release: publishes this rank's writes before the barrier; acquired by p's loop below
                LONG.setRelease(pads[p], mySlot, epoch);
            }
        }
        for (int p = 0; p < worldSize; p++) {
            if (p != rank) {
                long offset = SignalPadLayout.barrierSlotOffset(worldSize, p);
                // acquire: pairs with p's release above; p's pre-barrier writes are visible after it
                if ((long) LONG.getAcquire(ownPad, offset) < epoch) {
                    slowWait(WaitKind.BARRIER, phase, offset, epoch, p);
                }
            }
        }
    }

    /** Number of barriers this rank has passed (equal on every rank between collectives). */
    long barrierEpoch() {
        return barrierEpoch;
    }

    /**
     * Tells {@code peer} that this rank has completed {@code steps} ring steps. Release: publishes
     * the partial sums and chunks written in those steps; acquired by {@link #awaitStep}.
     *
     * @param peer  the rank told
     * @param steps the ring steps this rank has completed
     */
    public void publishStep(int peer, long steps) {
        LONG.setRelease(pads[peer], SignalPadLayout.stepSlotOffset(worldSize, rank), steps);
    }

    /**
     * Waits until {@code peer} has told this rank it completed at least {@code steps} steps (acquire).
     *
     * @param peer  the rank waited for
     * @param steps the steps it must have completed
     * @param phase names the wait in a timeout's message
     * @throws PeerTimeoutException when the peer does not get there in time, is gone, or the group was aborted
     */
    public void awaitStep(int peer, long steps, String phase) {
        long offset = SignalPadLayout.stepSlotOffset(worldSize, peer);
        // acquire: pairs with the peer's release in publishStep
        if ((long) LONG.getAcquire(ownPad, offset) < steps) {
            slowWait(WaitKind.STEP, phase, offset, steps, peer);
        }
    }

    /**
     * Applies a user signal to {@code peer}'s slot with release semantics (publishes the put before it).
     *
     * @param peer  the rank signalled
     * @param slot  the signal slot
     * @param value the operand
     * @param op    set or add
     */
    public void signal(int peer, int slot, long value, SignalOp op) {
        long offset = SignalPadLayout.signalSlotOffset(worldSize, slot);
        if (op == SignalOp.SET) {
            // release: publishes data put before this signal; acquired by the peer's waitSignal
            LONG.setRelease(pads[peer], offset, value);
        } else {
            // release: as above; the add is atomic against other signallers of the same slot
            LONG.getAndAddRelease(pads[peer], offset, value);
        }
    }

    /**
     * Waits until this rank's signal slot holds at least {@code atLeast} (acquire).
     *
     * @param slot     the signal slot
     * @param atLeast  the value waited for
     * @param fromRank the rank expected to signal, named in a timeout (-1: any)
     * @param phase    names the wait in a timeout's message
     * @return the value seen, at least {@code atLeast}
     * @throws PeerTimeoutException when no signal comes in time, the signaller is gone, or the group was aborted
     */
    public long waitSignal(int slot, long atLeast, int fromRank, String phase) {
        long offset = SignalPadLayout.signalSlotOffset(worldSize, slot);
        // acquire: pairs with the signaller's release in signal()
        long v = (long) LONG.getAcquire(ownPad, offset);
        if (v < atLeast) {
            slowWait(WaitKind.SIGNAL, phase, offset, atLeast, fromRank);
            v = (long) LONG.getAcquire(ownPad, offset);
        }
        return v;
    }

    /**
     * This rank's signal slot now (acquire).
     *
     * @param slot the signal slot
     * @return its value
     */
    public long readSignal(int slot) {
        // acquire: pairs with the signaller's release in signal()
        return (long) LONG.getAcquire(ownPad, SignalPadLayout.signalSlotOffset(worldSize, slot));
    }

    private void slowWait(WaitKind kind, String phase, long offset, long target, int peer) {
        for (int i = 0; i < SPIN_FIRST; i++) {
            // acquire: same pairing as the fast-path load that sent us here; polled without a pause (SPIN_FIRST)
            if ((long) LONG.getAcquire(ownPad, offset) >= target) {
                return;
            }
        }
        waitKind = kind;
        waitPhase = phase;
        waitOffset = offset;
        waitTarget = target;
        waitPeer = peer;
        beginSlowWait();
        // acquire: same pairing as the fast-path load that sent us here
        while ((long) LONG.getAcquire(ownPad, offset) < target) {
            waiter.idle(this);
        }
    }

    /** The current wait, for error messages: for example "all-reduce#12 ring all-gather step 40". */
    private String waitLabel() {
        return label(waitKind == WaitKind.STEP ? waitPhase + " step " + waitTarget : waitPhase);
    }

    /** Whether the current slow wait still waits for rank {@code p}. Allocation-free: called on every progress check. */
    private boolean isMissing(int p) {
        if (p == rank) {
            return false;
        }
        return switch (waitKind) {
            // acquire: pairs with p's release of its barrier epoch / entry epoch
            case BARRIER -> (long) LONG.getAcquire(ownPad, SignalPadLayout.barrierSlotOffset(worldSize, p)) < waitTarget;
            case ENTRY -> (long) LONG.getAcquire(ownPad,
                    SignalPadLayout.entryLineOffset(p, waitTarget - 1) + OpDescriptorLayout.EPOCH) < waitTarget;
            case LEFT -> !hasLeft(p);
            // acquire: pairs with the signaller's release, as the wait loop's own load
            case STEP, SIGNAL -> p == waitPeer && (long) LONG.getAcquire(ownPad, waitOffset) < waitTarget;
        };
    }

    /** The ranks this rank is still waiting for in the current slow wait (builds a list: error paths only). */
    private List<Integer> missingRanks() {
        List<Integer> missing = new ArrayList<>();
        for (int p = 0; p < worldSize; p++) {
            if (isMissing(p)) {
                missing.add(p);
            }
        }
        return missing;
    }

    /** Whether any rank is still missing in the current slow wait, without allocating. */
    private boolean anyMissing() {
        for (int p = 0; p < worldSize; p++) {
            if (isMissing(p)) {
                return true;
            }
        }
        return false;
    }

    /**
     * Whether rank {@code peer} left this memory, or left another memory of the group that this rank
     * has not left. In the second case {@code peer} sits in that memory's close, waiting for this rank
     * to leave it too, while this rank waits for {@code peer} here: neither can ever proceed (ranks
     * that run the same program never get there; one whose code failed and is closing its resources
     * does). Scans an array: no allocation on the wait path.
     */
    private boolean hasLeftSomewhere(int peer) {
        if (hasLeft(peer)) {
            return true;
        }
        PadSynchronizer[] mine = RANK_MEMORIES.get(group.abortState());
        if (mine != null) {
            for (PadSynchronizer other : mine) {
                if (other != this && !other.leaving && other.worldSize == worldSize && other.hasLeft(peer)) {
                    return true;
                }
            }
        }
        return false;
    }

    /** Whether rank {@code peer} closed this memory (acquire: pairs with the release in {@link #leaveAndAwaitPeers}). */
    private boolean hasLeft(int peer) {
        return (long) LONG.getAcquire(ownPad, SignalPadLayout.leftSlotOffset(worldSize, peer)) != 0;
    }

    private void beginSlowWait() {
        lastLivenessCheckNanos = 0;
        lastHeartbeatNanos = -HEARTBEAT_INTERVAL_NANOS;
        marked = false;
        waiter.begin();
    }

    /**
     * While blocked: says in this rank's pad which rank it waits for and bumps its heartbeat (at most
     * once per {@link #HEARTBEAT_INTERVAL_NANOS}); once the wait is half over, samples every peer's
     * heartbeat, against which {@link #blame} tells blocked peers from ones that neither arrive nor wait.
     * Allocation-free.
     */
    private void beat(long waitedNanos) {
        if (waitedNanos - lastHeartbeatNanos >= HEARTBEAT_INTERVAL_NANOS) {
            lastHeartbeatNanos = waitedNanos;
            ownPad.set(ValueLayout.JAVA_LONG, WAITING_FOR_OFFSET, firstMissing() + 1L); // published by the release below
            // release: publishes waitingFor above; acquired by a timed-out peer's blame()
            LONG.setRelease(ownPad, WAIT_HEARTBEAT_OFFSET, ++heartbeats);
        }
        if (!marked && waitedNanos >= halfTimeoutNanos) {
            marked = true;
            for (int p = 0; p < worldSize; p++) {
                heartbeatAtMark[p] = heartbeatOf(p);
            }
        }
    }

    /** Rank {@code p}'s heartbeat, or -1 once its pad is no longer mapped here (in-JVM: p freed it after an abort). */
    private long heartbeatOf(int p) {
        try {
            // acquire: pairs with p's release in beat()
            return (long) LONG.getAcquire(pads[p], WAIT_HEARTBEAT_OFFSET);
        } catch (IllegalStateException unmapped) {
            return -1;
        }
    }

    /** The first rank the current wait still waits for, or -1 (none known: a signal from any rank). No allocation. */
    private int firstMissing() {
        for (int p = 0; p < worldSize; p++) {
            if (isMissing(p)) {
                return p;
            }
        }
        return waitKind == WaitKind.STEP || waitKind == WaitKind.SIGNAL ? waitPeer : -1;
    }

    @Override
    public void checkProgressPossible(long waitedNanos) {
        checkAbortWord();
        beat(waitedNanos);
        if (waitKind == WaitKind.LEFT) {
            if (!anyMissing()) {
                return;
            }
        } else {
            checkNoneLeft();
        }
        if (waitedNanos - lastLivenessCheckNanos < livenessIntervalNanos) {
            return;
        }
        lastLivenessCheckNanos = waitedNanos;
        List<Integer> dead = new ArrayList<>();
        for (int p : missingRanks()) {
            if (!group.isAlive(p)) {
                dead.add(p);
            }
        }
        if (!dead.isEmpty()) {
            String what = waitLabel();
            String msg = "rank=" + rank + " " + what + ": " + describe(dead)
                    + " exited before arriving (its thread or process is gone)";
            abort(dead.getFirst(), msg); // the abort reason is short (a pad line): positions go to this rank's message
            throw new PeerTimeoutException(msg + "; " + positions() + "; fix: read the exited rank's own error or"
                    + " exit status (its log), which names the cause; this rank only waited for it", rank, dead, what,
                    Reason.PEER_EXITED, waiter.timeout());
        }
    }

    /**
     * Fails the current wait if a rank it waits for already closed this memory: that rank left and
     * will never arrive. A few loads, on every progress check, so a peer that failed just before a
     * collective and closed its communicator is noticed within microseconds, not at the timeout.
     */
    private void checkNoneLeft() {
        boolean anyLeft = false;
        // LEFT first, then the waited slot: p publishes everything it sent before it leaves (release),
        // so a p that is still missing after its LEFT was seen (acquire) will never arrive.
        for (int p = 0; p < worldSize && !anyLeft; p++) {
            anyLeft = hasLeftSomewhere(p) && isMissing(p);
        }
        if (anyLeft) {
            List<Integer> left = new ArrayList<>();
            for (int p = 0; p < worldSize; p++) {
                if (hasLeftSomewhere(p) && isMissing(p)) {
                    left.add(p);
                }
            }
            String what = waitLabel();
            String msg = "rank=" + rank + " " + what + ": " + describe(left) + " is closing its symmetric memory or"
                    + " communicators (it left the group) instead of arriving: its code failed or returned before this"
                    + " collective";
            abort(left.getFirst(), msg);
            throw new PeerTimeoutException(msg + "; " + positions() + "; fix: read that rank's own error (its log), or"
                    + " make every rank run the same collectives before closing", rank, left, what, Reason.PEER_LEFT,
                    waiter.timeout());
        }
    }

    /**
     * Closing: tells every peer this rank left this memory (it will touch it no more) and waits,
     * bounded, until every peer has left too, so nobody frees memory a peer still reads. Returns early
     * without error when the group is aborted or a peer that has not left is gone; a peer that is
     * still waiting for this rank in a collective sees the flag and fails at once, and its abort ends
     * this wait.
     */
    public void leaveAndAwaitPeers() {
        leaving = true;
        for (int p = 0; p < worldSize; p++) {
            if (p != rank) {
                try {
                    // release: publishes this rank's last writes into p's memory; acquired by p's hasLeft
                    LONG.setRelease(pads[p], SignalPadLayout.leftSlotOffset(worldSize, rank), 1L);
                } catch (IllegalStateException unmapped) {
                    // p's memory is no longer mapped here (in-JVM: p freed it after an abort)
                }
            }
        }
        if (worldSize == 1 || isAborted()) {
            return;
        }
        waitKind = WaitKind.LEFT;
        waitPhase = "close";
        waitPeer = -1;
        beginSlowWait();
        try {
            while (anyMissing()) {
                waiter.idle(this);
            }
        } catch (PeerTimeoutException e) {
            // a peer is gone, aborted or late past the timeout: free anyway; live peers' mappings are their own
        }
    }

    /** Unregisters from the group's abort: the memory is being freed. */
    public void detach() {
        detachFromGroupAbort.run();
        RANK_MEMORIES.computeIfPresent(group.abortState(), (k, old) -> {
            PadSynchronizer[] left = Arrays.stream(old).filter(s -> s != this).toArray(PadSynchronizer[]::new);
            return left.length == 0 ? null : left;
        });
    }

    @Override
    public RuntimeException deadlinePassed(Duration timeout) {
        List<Integer> missing = missingRanks();
        String what = waitLabel();
        List<Integer> blocked = new ArrayList<>();
        List<Integer> culprits = blame(missing, blocked);
        String waitedFor = missing.isEmpty() ? "a signal (slot offset " + waitOffset + " >= " + waitTarget + ")"
                : describe(missing);
        String msg;
        if (culprits.equals(missing)) {
            msg = "rank=" + rank + " " + what + ": timed out after " + timeout + " waiting for " + waitedFor
                    + " (a rank stopped calling collectives, or the ranks called different ones;"
                    + " raise GroupOptions.timeout if ranks legitimately lag this long)";
        } else {
            msg = "rank=" + rank + " " + what + ": timed out after " + timeout + " waiting for " + waitedFor
                    + ", blocked in turn (" + describe(blocked) + " kept waiting): the group is held up by "
                    + describe(culprits) + ", which neither arrived nor waited in the last " + timeout.dividedBy(2)
                    + " (stopped, hung, or busy outside collectives; raise GroupOptions.timeout if ranks legitimately"
                    + " lag this long)";
        }
        abort(culprits.isEmpty() ? rank : culprits.getFirst(), msg);
        return new PeerTimeoutException(msg + "; " + positions() + "; fix: make every rank call the same collectives"
                + " in the same order (the positions above show where each one is), or raise symmem4j.timeout.ms"
                + " (GroupOptions.timeout) above " + timeout.toMillis() + " ms if ranks legitimately lag this long",
                rank, culprits, what, Reason.DEADLINE_PASSED, timeout);
    }

    /**
     * The ranks that hold up a timed-out wait: from the ranks it misses, a rank whose heartbeat moved
     * since the wait was half over is blocked itself, so the rank it waits for is followed instead; a rank
     * whose heartbeat did not move neither arrived nor waited, and is blamed. Returns {@code missing}
     * itself when nothing better is known (no sample taken, or every path leads back to a waiting rank:
     * the ranks called different collectives). Fills {@code blocked} with the blocked ranks passed on the
     * way. Error path only.
     */
    private List<Integer> blame(List<Integer> missing, List<Integer> blocked) {
        if (!marked || missing.isEmpty()) {
            return missing;
        }
        TreeSet<Integer> culprits = new TreeSet<>();
        boolean[] seen = new boolean[worldSize];
        seen[rank] = true;
        ArrayDeque<Integer> todo = new ArrayDeque<>(missing);
        while (!todo.isEmpty()) {
            int p = todo.poll();
            if (seen[p]) {
                continue;
            }
            seen[p] = true;
            long beats = heartbeatOf(p); // p's waitingFor below is at least as recent
            if (beats == heartbeatAtMark[p] || beats < 0) {
                culprits.add(p);
            } else {
                blocked.add(p);
                long waitsFor;
                try {
                    waitsFor = pads[p].get(ValueLayout.JAVA_LONG, WAITING_FOR_OFFSET) - 1;
                } catch (IllegalStateException unmapped) {
                    waitsFor = -1;
                }
                if (waitsFor >= 0 && waitsFor < worldSize) {
                    todo.add((int) waitsFor);
                }
            }
        }
        if (culprits.isEmpty()) {
            blocked.clear();
            return missing;
        }
        return List.copyOf(culprits);
    }

    private String describe(List<Integer> ranks) {
        return String.join(", ", ranks.stream().map(group::describe).toList());
    }

    /**
     * Marks every pad (this rank's too) aborted by this rank with {@code reason}, unless another rank
     * got there first. Peers see it on their next progress check and fail.
     *
     * @param reason why, for the peers' errors
     */
    public void abort(String reason) {
        abort(rank, reason);
    }

    /**
     * As {@link #abort(String)}, naming {@code culprit} as the rank that caused it (a peer that died
     * or never arrived), so the errors peers see name that rank, not the one that noticed.
     *
     * @param culprit the rank that caused the abort
     * @param reason  why, for the peers' errors
     */
    public void abort(int culprit, String reason) {
        GroupAbort.Cause cause = new GroupAbort.Cause(culprit, reason);
        writeAbort(cause);
        group.abortState().raise(cause.rank(), cause.reason()); // this rank's other memories and teardown hear of it
    }

    /**
     * Writes the abort into every pad of this memory, naming the rank that caused it (a no-op on pads
     * already aborted).
     */
    private void writeAbort(GroupAbort.Cause cause) {
        byte[] text = cause.reason().getBytes(StandardCharsets.UTF_8);
        int len = Math.min(text.length, ABORT_REASON_MAX_BYTES);
        for (MemorySegment pad : pads) {
            try {
                // claim the pad's reason area; only the first aborter writes it
                if (LONG.compareAndSet(pad, ABORT_WORD_OFFSET, 0L, ABORT_CLAIMED)) {
                    pad.set(ValueLayout.JAVA_INT, ABORT_REASON_OFFSET, len);
                    MemorySegment.copy(text, 0, pad, ValueLayout.JAVA_BYTE, ABORT_REASON_OFFSET + Integer.BYTES, len);
                    // release: publishes the reason; acquired by checkNotAborted on the pad's owner
                    LONG.setRelease(pad, ABORT_WORD_OFFSET, (long) (cause.rank() >= 0 ? cause.rank() : rank) + 1);
                }
            } catch (IllegalStateException closed) {
                // a peer's memory is already unmapped (it left): nothing to tell it
            }
        }
    }

    /**
     * Throws if this rank's pad says the group was aborted. One acquire load on the fast path.
     *
     * @param phase names where the check happened, in the error
     * @throws PeerTimeoutException naming the rank that aborted, when the group was aborted
     */
    public void checkNotAborted(String phase) {
        // acquire: pairs with the aborter's release in abort(), so the reason text is complete
        long word = (long) LONG.getAcquire(ownPad, ABORT_WORD_OFFSET);
        if (word == 0) {
            return;
        }
        throwAborted(word, label(phase));
    }

    /** As {@link #checkNotAborted}, during a slow wait. */
    private void checkAbortWord() {
        // acquire: pairs with the aborter's release in abort()
        long word = (long) LONG.getAcquire(ownPad, ABORT_WORD_OFFSET);
        if (word != 0) {
            throwAborted(word, waitLabel());
        }
    }

    private void throwAborted(long word, String what) {
        // The aborter writes its reason between its claim and its release: wait for it, yielding (on
        // a loaded machine the aborter may be descheduled for many milliseconds in between; the
        // soak saw it), and bounded, since it may also have died in between.
        long until = System.nanoTime() + ABORT_REASON_WAIT_NANOS;
        while (word == ABORT_CLAIMED && System.nanoTime() - until < 0) {
            Thread.yield();
            // acquire: pairs with the aborter's release in writeAbort()
            word = (long) LONG.getAcquire(ownPad, ABORT_WORD_OFFSET);
        }
        if (word == ABORT_CLAIMED) {
            group.abortState().raise(-1, "aborted by a peer that did not finish writing its reason");
            throw new PeerTimeoutException("rank=" + rank + " " + what + ": group aborted by a peer (reason being written;"
                    + " fix: read the other ranks' errors, the aborting rank's names the cause)",
                    rank, List.of(), what, Reason.PEER_ABORTED, waiter.timeout());
        }
        int aborter = (int) word - 1;
        int len = ownPad.get(ValueLayout.JAVA_INT, ABORT_REASON_OFFSET);
        byte[] text = new byte[Math.max(0, Math.min(len, ABORT_REASON_MAX_BYTES))];
        MemorySegment.copy(ownPad, ValueLayout.JAVA_BYTE, ABORT_REASON_OFFSET + Integer.BYTES, text, 0, text.length);
        String reason = new String(text, StandardCharsets.UTF_8);
        group.abortState().raise(aborter, reason); // this rank now knows: its other memories and teardown stop waiting
        String msg = aborter == rank
                ? "rank=" + rank + " " + what + ": this group was aborted because of this rank: " + reason
                        + " (create a new group)"
                : "rank=" + rank + " " + what + ": group aborted because of rank " + aborter + ": " + reason + "; "
                        + positions();
        throw new PeerTimeoutException(msg, rank, aborter == rank ? List.of() : List.of(aborter), what,
                Reason.PEER_ABORTED, waiter.timeout());
    }

    /**
     * Whether this rank's pad says the group was aborted.
     *
     * @return true once any rank aborted the group
     */
    public boolean isAborted() {
        return (long) LONG.getAcquire(ownPad, ABORT_WORD_OFFSET) != 0;
    }
}
