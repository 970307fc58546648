package org.symmem4j.parallel.control;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.ArrayList;
import java.util.List;
import org.symmem4j.parallel.Algorithm;
import org.symmem4j.parallel.CollectiveMismatchException;
import org.symmem4j.parallel.Configuration;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.Invariants;
import org.symmem4j.parallel.ReduceOp;
import org.symmem4j.parallel.SymmetricMemory;
import org.symmem4j.parallel.Transport;
import org.symmem4j.parallel.control.OpDescriptorLayout.Descriptor;
import org.symmem4j.parallel.control.OpDescriptorLayout.Kind;
import org.symmem4j.parallel.control.OpDescriptorLayout.Problem;

/**
 * One rank's control plane of a communicator: the numbering of its collectives, the entry barrier
 * that checks every rank's arguments before any byte moves, barriers and the group abort, over the
 * signal pads of a host symmetric memory ({@link PadSynchronizer}). Every communicator builds on one:
 * the host communicator over the pads of its own scratch memory ({@link #over}), a device communicator
 * over a memory of nothing but pads on the group's host transport ({@link #open}), since its data
 * lives where Java code cannot check it (GPU kernels would hang on a mismatch).
 *
 * <p>The entry barrier: each rank writes its op descriptor into every peer's pad
 * ({@link PadSynchronizer#arrive}), and every rank compares all descriptors before it reads any peer's
 * data or writes anything a peer reads, so a disagreement throws the same
 * {@link CollectiveMismatchException} on every rank and leaves the group usable. What a rank can check
 * alone about its own arguments travels in its descriptor ({@link Problem}), so a bad buffer on one
 * rank is refused on every rank, naming that rank. The verdict's messages are {@link DescriptorCheck}'s.
 *
 * <p>Every collective is also written into this rank's {@link FlightRecorder} (dumped when one fails)
 * and, while a JDK Flight Recorder recording enables it, emitted as a {@link CollectiveEvent}. The
 * communicator tells the control plane when a collective returned ({@link #completed}) or failed
 * ({@link #failed}); {@link #checkAgreement} and {@link #barrier} complete on their own.
 *
 * <p>Used by one thread (the rank's); not thread-safe.
 */
public final class ControlPlane implements AutoCloseable {

    private static final DType[] DTYPES = DType.values();
    /**
     * Whether the recorder writes a collective's entry in the entry barrier's shadow (between this rank's publish and
     * its wait: the default, measured cheaper than after the wait on 16 cores) instead of after the wait;
     * {@link Configuration#FLIGHT_RECORDER_ARRIVAL}, read once per JVM, so C2 folds the branches it guards.
     */
    private static final boolean RECORD_IN_SHADOW = "in-shadow".equals(Configuration.FLIGHT_RECORDER_ARRIVAL.get());
    private static final Algorithm[] ALGORITHMS = Algorithm.values();
    /**
     * Whether the recorder's entry is written at arrival, and whether its return is recorded: both, unless the
     * diagnostic {@link Configuration#FLIGHT_RECORDER_PROBE} leaves a part out to find where the one-shot cost comes
     * from ({@code arrival}: the entry only; {@code none}: nothing, an A/A control of the benchmark's switching). Read
     * once per JVM, so C2 folds the branches they guard: with {@code all} the hot path is the one without the setting.
     */
    private static final boolean RECORD_ARRIVAL = !"none".equals(Configuration.FLIGHT_RECORDER_PROBE.get());
    private static final boolean RECORD_ENDS = "all".equals(Configuration.FLIGHT_RECORDER_PROBE.get());

    private final int rank;
    private final int worldSize;
    private final PadSynchronizer sync;
    /** The memory of pads {@link #open} allocated, closed with this control plane; null over another's memory. */
    private final SymmetricMemory owned;
    /** The memory whose pads this control plane uses (owned or not): named in {@link FlightRecording#placement}. */
    private final SymmetricMemory memory;
    /** The descriptor of {@link #checkAgreement} and {@link #barrier}, reused: the hot path allocates nothing. */
    private final Descriptor call = new Descriptor();
    /**
     * This rank's ring of its last collectives; null when {@code symmem4j.flight.recorder.entries} is 0, or while
     * {@link #recording} has it off. Read at each of the hot path's four checks, a plain load as when it was final
     * (the JIT folds no instance field of an ordinary class into a constant, final or not), and written only by the
     * {@link #recording()} switch.
     */
    private FlightRecorder recorder;
    /** The recorder this control plane was made with (null when entries is 0): what {@link #recording()} turns on. */
    private final FlightRecorder made;
    /** The switch {@link #recording()} hands out; null without a recorder. */
    private final FlightRecording recording;

    /**
     * The next collective's sequence number: how many this rank began. Written by this rank's thread only (plain);
     * read off it by the flight recorder's ticks with an opaque load ({@link #SEQ}), which needs no pairing: a late
     * value only dates a collective one tick later ({@link FlightRecorderTicks}).
     */
    private long seq;
    private static final java.lang.invoke.VarHandle SEQ;

    static {
        try {
            SEQ = java.lang.invoke.MethodHandles.lookup().findVarHandle(ControlPlane.class, "seq", long.class);
        } catch (ReflectiveOperationException e) {
            throw new ExceptionInInitializerError(e);
        }
    }
    /** The JFR event of the collective in progress; null while no recording enables {@link CollectiveEvent}. */
    private CollectiveEvent event;

    private ControlPlane(Group group, PadSynchronizer sync, SymmetricMemory memory, SymmetricMemory owned, String kind) {
        this.rank = group.rank();
        this.worldSize = group.worldSize();
        this.sync = sync;
        this.memory = memory;
        this.owned = owned;
        // its times: the ticks read how many collectives this rank began, off its thread (SEQ's opaque load)
        this.made = FlightRecorder.create(rank, worldSize, kind, () -> (long) SEQ.getOpaque(this));
        this.recorder = made;
        this.recording = made == null ? null : new Switch();
        sync.describePositionsWith(this::lastOps);
    }

    /**
     * Collective: a control plane of {@code group} on a memory of signal pads only (no data region),
     * allocated on {@code hostTransport}: the control plane of a device transport's communicator, whose
     * group's own transport allocates device memory that Java code cannot touch.
     *
     * @param group         this rank's group
     * @param hostTransport a host transport that reaches every rank of {@code group}
     *                      ({@link Group#hostTransport()})
     * @return this rank's control plane; close it collectively (it frees its pads)
     * @throws IllegalArgumentException when {@code hostTransport}'s memory has no host signal pads
     */
    public static ControlPlane open(Group group, Transport hostTransport) {
        SymmetricMemory memory = hostTransport.allocate(group, 0);
        if (!(memory instanceof SignalPads pads)) {
            memory.close();
            throw new IllegalArgumentException("control plane needs host symmetric memory; transport="
                    + hostTransport.name() + " gave " + memory.getClass().getSimpleName()
                    + " (fix: pass a host transport: host-in-jvm or host-shm)");
        }
        return new ControlPlane(group, pads.sync(), memory, memory, "device-m" + memory.id());
    }

    /**
     * A control plane over the pads of a memory its caller owns and closes (the host communicator's
     * scratch, whose pads also carry its data plane's barriers and ring steps).
     *
     * @param group  this rank's group
     * @param sync   this rank's synchronizer of that memory
     * @param memory that memory (its id names the communicator in flight-recorder dumps, equal on every rank)
     * @return this rank's control plane; closing it closes nothing
     */
    public static ControlPlane over(Group group, PadSynchronizer sync, SymmetricMemory memory) {
        return new ControlPlane(group, sync, memory, null, "host-m" + memory.id());
    }

    /** {@return this rank's synchronizer over the pads} */
    public PadSynchronizer sync() {
        return sync;
    }

    /**
     * Starts this rank's next collective: numbers it and names it for timeouts' messages.
     *
     * @param what the collective's name for messages, for example "all-reduce"
     * @return the collective's sequence number, the seq of its descriptor
     */
    public long begin(String what) {
        long s = seq++;
        sync.beginOp(what, s); // the recorder takes the name from there when this rank arrives
        if (CollectiveEvent.TYPE.isEnabled()) {
            beginEvent(s, what);
        }
        return s;
    }

    /**
     * Collective {@code s} (the latest {@link #begin}) returned on this rank: recorded as completed, its
     * JFR event committed. A collective that already {@link #failed} stays failed.
     *
     * @param s its sequence number
     */
    public void completed(long s) {
        if (recorder != null && RECORD_ENDS) {
            recorder.completed(s);
        }
        if (event != null) {
            commitEvent(s, "COMPLETED", null);
        }
    }

    /**
     * The latest collective failed on this rank: recorded as failed, the flight recorder dumped (once
     * per collective), its JFR event committed with the failure. Call before rethrowing.
     *
     * @param failure what went wrong
     */
    public void failed(Throwable failure) {
        long s = seq - 1;
        if (recorder != null) {
            recordPendingArrival(s); // failed while waiting at its entry barrier: the entry carries its arguments
            recorder.failed(s, sync.opName(), failure);
        }
        if (event != null) {
            commitEvent(s, "FAILED", failure);
        }
    }

    /** {@return this rank's flight recorder, or null when recording is off} */
    public FlightRecorder recorder() {
        return recorder;
    }

    /**
     * {@return the switch that turns this rank's flight recorder off and on between collectives, or null when this
     * control plane was made without one} For benchmarks of the recorder's cost; see {@link FlightRecording}.
     */
    public FlightRecording recording() {
        return recording;
    }

    /** {@link FlightRecording} over {@link #recorder}: the only place that writes it after construction. */
    private final class Switch implements FlightRecording {
        @Override
        public boolean isRecording() {
            return recorder != null;
        }

        @Override
        public void setRecording(boolean on) {
            if (on && recorder == null) {
                made.restartAt(seq); // the collectives in between were not recorded: its dump starts here
            }
            recorder = on ? made : null;
        }

        @Override
        public String placement() {
            StringBuilder b = new StringBuilder("rank ").append(rank).append(": ").append(made.placement())
                    .append("; signal pads");
            for (int r = 0; r < worldSize; r++) {
                b.append(r == 0 ? " " : ", ").append(r).append(": ")
                        .append(FlightRecorderLayout.describe(sync.pad(r).address()));
            }
            if (memory.hostAddressable() && memory.byteSize() > 0) {
                b.append("; data");
                for (int r = 0; r < worldSize; r++) {
                    b.append(r == 0 ? " " : ", ").append(r).append(": ")
                            .append(FlightRecorderLayout.describe(memory.peer(r).address()));
                }
            }
            return b.toString();
        }
    }

    /** This rank's last collectives in words, for timeout messages ({@link PadSynchronizer}). */
    private String lastOps() {
        if (recorder == null) {
            return null;
        }
        long s = seq - 1;
        recordPendingArrival(s); // built during the entry barrier's wait: its entry is written after the wait
        if (s >= 0 && recorder.hasEntry(s) && sync.everyPeerArrived(s)) {
            recorder.started(s); // past its entry barrier: nothing records that per collective, so say it here
        }
        return recorder.lastOps(3);
    }

    /**
     * Failure and message paths: writes collective {@code s}'s entry, with this rank's arguments as it published them,
     * when this rank arrived at its entry barrier but the entry is not written yet: {@link #arriveAndCheck} writes it
     * once the wait is over, and the wait threw, or a message is built inside it. A rank that failed before publishing
     * stays without arguments ({@link FlightRecorder#failed} writes that entry). Allocates: never on the hot path.
     */
    private void recordPendingArrival(long s) {
        FlightRecorder r = recorder;
        if (r != null && s >= 0 && r.lacksEntry(s) && sync.published(s)) {
            r.arrived(sync.publishedDescriptor(s), sync.opName());
        }
    }

    private void beginEvent(long s, String what) {
        CollectiveEvent e = new CollectiveEvent();
        e.begin();
        e.operation = what;
        e.sequence = s;
        e.rank = rank;
        e.worldSize = worldSize;
        e.count = -1;
        e.bufferBytes = -1;
        event = e;
    }

    private void eventStarted(Descriptor d) {
        CollectiveEvent e = event;
        if (e != null && e.sequence == d.seq()) {
            e.count = d.count();
            e.bufferBytes = d.bufferBytes();
            e.dtype = d.dtype() >= 0 && d.dtype() < DTYPES.length ? DTYPES[d.dtype()].name() : null;
            e.algorithm = d.algorithm() >= 0 && d.algorithm() < ALGORITHMS.length ? ALGORITHMS[d.algorithm()].name() : null;
        }
    }

    private void commitEvent(long s, String outcome, Throwable failure) {
        CollectiveEvent e = event;
        event = null;
        if (e.sequence == s) {
            e.end();
            if (e.shouldCommit()) {
                e.outcome = outcome;
                e.failure = failure == null ? null : String.valueOf(failure.getMessage());
                e.commit();
            }
        }
    }

    /**
     * Arrives at the entry barrier with this rank's descriptor and checks every rank's. All ranks
     * read the same descriptors, so all reach the same verdict: all proceed, or all get the same
     * message. The flight recorder's entry is written between this rank's publish and its wait by default
     * ({@link PadSynchronizer#arrive} says why), or here once the wait is over with {@code
     * symmem4j.flight.recorder.arrival=after-wait}.
     *
     * @param mine this rank's descriptor of the collective {@link #begin} numbered
     * @return null when every rank agrees and every buffer is large enough; else the mismatch's message,
     *         the same on every rank (the caller throws it as a {@link CollectiveMismatchException})
     */
    public String arriveAndCheck(Descriptor mine) {
        FlightRecorder rec = RECORD_ARRIVAL ? recorder : null;
        sync.arrive(mine, RECORD_IN_SHADOW ? rec : null);
        if (rec != null && !RECORD_IN_SHADOW) {
            // after-wait: the entry after the wait (the in-shadow default measured cheaper, PadSynchronizer.arrive); a
            // wait that throws leaves the entry to failed(), which writes it from this rank's published descriptor
            rec.arrived(mine, sync.opName());
        }
        if (mine.problem() == Problem.NONE && buffersLargeEnough(mine, mine.bufferBytes(), mine.recvBytes())) {
            boolean agree = true;
            MemorySegment pad = sync.ownPad();
            for (int r = 0; r < worldSize && agree; r++) {
                if (r != rank) {
                    long line = sync.entryLine(r, mine.seq());
                    agree = mine.sameCallAs(pad, line) && buffersLargeEnough(mine,
                            pad.get(ValueLayout.JAVA_LONG, line + OpDescriptorLayout.BUFFER_BYTES),
                            pad.get(ValueLayout.JAVA_LONG, line + OpDescriptorLayout.RECV_BYTES));
                }
            }
            if (agree) {
                return null; // the common case, decided without allocating
            }
        }
        List<Descriptor> all = new ArrayList<>(worldSize);
        for (int r = 0; r < worldSize; r++) {
            all.add(r == rank ? mine : Descriptor.read(sync.ownPad(), sync.entryLine(r, mine.seq())));
        }
        String error = DescriptorCheck.check(all);
        if (error == null) {
            throw Invariants.violated("descriptor fast check and full check disagree: " + all);
        }
        return error;
    }

    /**
     * {@link #arriveAndCheck}, throwing the mismatch.
     *
     * @param mine this rank's descriptor of the collective {@link #begin} numbered
     * @throws CollectiveMismatchException if any rank's arguments differ or report a problem
     */
    public void enter(Descriptor mine) {
        String error;
        try {
            error = arriveAndCheck(mine);
        } catch (RuntimeException | Error e) {
            failed(e);
            throw e;
        }
        if (error != null) {
            CollectiveMismatchException e = new CollectiveMismatchException(error);
            failed(e);
            throw e;
        }
        started(mine);
    }

    /**
     * Records that every rank agreed on {@code mine} at the entry barrier (for communicators that call
     * {@link #arriveAndCheck} themselves; {@link #enter} does it on its own).
     *
     * @param mine the agreed descriptor
     */
    public void started(Descriptor mine) {
        // the flight recorder stores nothing here: a STARTED state is derived on the message path (lastOps)
        if (event != null) {
            eventStarted(mine);
        }
    }

    /**
     * Whether buffers of these sizes hold the call's count (overflow counts as too small). No allocation.
     *
     * @param d           the call's descriptor
     * @param bufferBytes bytes of a rank's (send) buffer
     * @param recvBytes   bytes of a rank's receive buffer
     * @return true if both hold what the call moves
     */
    public boolean buffersLargeEnough(Descriptor d, long bufferBytes, long recvBytes) {
        if (d.kind() == Kind.BARRIER) {
            return true;
        }
        long count = d.count();
        int dsize = DTYPES[Math.max(0, d.dtype())].byteSize();
        if (count < 0 || count > Long.MAX_VALUE / dsize / worldSize) {
            return false;
        }
        long one = count * dsize;
        return switch (d.kind()) {
            case ALL_REDUCE, BROADCAST -> bufferBytes >= one;
            // in place (a symmetric region): count is the whole vector, which the region must hold
            case REDUCE_SCATTER -> d.memoryId() >= 0 ? bufferBytes >= one : bufferBytes >= one * worldSize && recvBytes >= one;
            case ALL_GATHER -> d.memoryId() >= 0 ? bufferBytes >= one : bufferBytes >= one && recvBytes >= one * worldSize;
            case BARRIER -> true;
        };
    }

    /**
     * Checks that every rank passes the same arguments, through the entry barrier, without moving
     * data: for communicators whose data path cannot check (GPU kernels would hang on a mismatch).
     * Throws {@link CollectiveMismatchException} on every rank, as the host collectives do.
     *
     * @param what         the collective's name for messages, for example "all-reduce"
     * @param kind         the collective kind
     * @param dtype        element type, or null
     * @param op           reduction, or null where there is none
     * @param algorithm    algorithm, or null where there is none
     * @param root         broadcast root, or -1
     * @param count        element count
     * @param bufferBytes  bytes this rank's (send) buffer holds
     * @param memoryId     SymmetricMemory id, or -1 for staged buffers
     * @param memoryOffset byte offset in that memory
     * @param recvBytes    bytes this rank's receive buffer holds
     * @param localProblem a problem this rank found with its own arguments, or null
     * @throws CollectiveMismatchException if any rank's arguments differ or report a problem
     */
    public void checkAgreement(String what, Kind kind, DType dtype, ReduceOp op, Algorithm algorithm, int root, long count,
                               long bufferBytes, long memoryId, long memoryOffset, long recvBytes, Problem localProblem) {
        long s = begin(what);
        enter(call.set(s, kind, ordinal(dtype), ordinal(op), ordinal(algorithm), root, count, bufferBytes, memoryId,
                memoryOffset, recvBytes, localProblem == null ? Problem.NONE : localProblem));
        completed(s); // agreed: the caller enqueues the device work next
    }

    /**
     * A barrier through the entry barrier: a collective of its own, numbered like the others.
     *
     * @throws org.symmem4j.parallel.PeerTimeoutException when a peer does not arrive in time, is gone, or the group
     *                                                    was aborted
     */
    public void barrier() {
        long s = begin("barrier");
        enter(call.set(s, Kind.BARRIER, -1, -1, -1, -1, 0, 0, -1, 0, 0, Problem.NONE));
        completed(s);
    }

    /**
     * Aborts the group through the pads: every rank waiting in a collective fails at once, naming this rank.
     *
     * @param reason what went wrong, for the peers' messages
     */
    public void abort(String reason) {
        sync.abort("rank=" + rank + " aborted: " + reason);
    }

    /** Collective where {@link #open} made the pads: frees them. Over another's memory, nothing. */
    @Override
    public void close() {
        if (owned != null) {
            owned.close();
        }
    }

    private static int ordinal(Enum<?> e) {
        return e == null ? -1 : e.ordinal();
    }
}
