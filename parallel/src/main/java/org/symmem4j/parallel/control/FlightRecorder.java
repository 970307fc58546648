package org.symmem4j.parallel.control;

import java.io.IOException;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.VarHandle;
import java.lang.management.ManagementFactory;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Objects;
import java.util.function.LongSupplier;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.symmem4j.parallel.Algorithm;
import org.symmem4j.parallel.Configuration;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.ReduceOp;
import org.symmem4j.parallel.trace.ChromeTraceWriter;
import org.symmem4j.parallel.trace.CoarseClock;

/**
 * One rank's flight recorder for one communicator: a ring of its last {@code capacity} collectives
 * (sequence number, operation, element count, bytes, dtype, op, algorithm, symmetric region, state,
 * wall-clock times), written on the hot path without allocating or reading a clock, and dumped as JSON when a
 * collective fails, so that a hang or a dead rank can be attributed afterwards: {@code symmem4j-flight-report} merges
 * the dumps of every rank into one report that says where the ranks diverged. PyTorch's NCCL flight recorder is the
 * model; here the entry barrier already names the missing rank, and the dump adds what each rank did before.
 *
 * <p><b>The entry is the rank's own descriptor line.</b> The ring lives in one page-aligned off-heap segment per
 * recorder ({@link FlightRecorderLayout}); each entry is 128 bytes: the descriptor line this rank publishes at its
 * entry barrier ({@link OpDescriptorLayout}), followed by the recorder's own words. With the recorder on, {@link
 * PadSynchronizer#arrive} writes this rank's own line into the entry instead of into its own pad, so the arguments
 * are written once per collective, as with the recorder off, and the recorder adds <b>two plain stores</b> per
 * collective: the entry's name word at arrival ({@link #ownLineWritten}) and the completion count at return ({@link
 * #completed}, a padded field). No clock is read and nothing is stamped on the hot path: the times come from {@link
 * FlightRecorderTicks}, which samples how many collectives the rank has begun and completed once a millisecond on
 * {@link CoarseClock}'s thread. The stamps this replaced (a clock read and two stores at arrival, a store at the
 * verdict, a guarded stamp at return) cost 12 ns of a 1 KiB one-shot all-reduce (1.2 %) that the entry alone did not
 * ({@code bench/results/2026-11-30-recorder-ticks.md}). By long index:
 * <pre>
 *  slot = seq &amp; (capacity - 1); entry at byte {@link FlightRecorderLayout#ENTRIES_OFFSET} + 128 * slot of the segment
 *  [0]     SHAPE_FAILED  (the descriptor's epoch word, never written into an entry by arrive(); the recorder's):
 *                        name &lt;&lt; 33 | failed &lt;&lt; 32 | shape, shape = kind+1 | dtype+1 &lt;&lt; 8 | op+1 &lt;&lt; 16 |
 *                        algorithm+1 &lt;&lt; 24 (shape 0: failed before it arrived, no arguments), name an index
 *                        into the names seen (11 bits; 2047: the name is in {@code what[slot]}). Never 0 once the
 *                        entry is written for SEQ (an arrival has a shape, a failure its flag): 0 means none is
 *  [1]     SEQ           the control plane's sequence number (barriers inside collectives count too)
 *  [2..4]  kind, dtype, op, algorithm, root, problem (ints)            \
 *  [5]     COUNT         elements                                       |  the descriptor, as arrive() writes it
 *  [6]     BYTES         buffer bytes                                   |  into a peer's pad (meaningless while
 *  [7]     MEMORY_ID     symmetric region, -1 for staged buffers        |  SHAPE is 0: the dump then shows
 *  [8]     MEMORY_OFFSET                                                |  -1, -1, -1, 0)
 *  [9]     recv bytes                                                  /
 *  [10]    BEGUN         written by the failure path only: epoch ms of a collective that failed before it arrived;
 *                        0 (and for every other entry): the time comes from the ticks
 *  [11]    ENDED         written by the failure path only: epoch ms when it failed (FAILED entries only)
 *  [12]    STARTED       1 + the sequence number whose entry barrier was seen passed in this slot (0: none; written
 *                        by the message path, which reads it off the signal pads, never per collective)
 *  [13..15]              zero
 *  state, derived when read: FAILED if flagged; else COMPLETED if the completion count is past SEQ; else STARTED if
 *                        STARTED equals SEQ + 1; else SCHEDULED (arrived, waiting for the others)
 * </pre>
 * No sequence counter is written per collective: the newest recorded number is found by reading the entries ({@link
 * #lastSeq()}, failure and dump paths only). The hot path compares an operation's name by reference with the first
 * names seen, kept in fields, so it reads no per-slot array and stores no reference; the fields it reads sit between
 * 128-byte pads in this object ({@link FlightRecorderFields}).
 *
 * <p><b>Per collective, one write of its entry, in the entry barrier's shadow</b> (by default, {@link
 * Configuration#FLIGHT_RECORDER_ARRIVAL}; {@code after-wait}: {@link ControlPlane#arriveAndCheck} calls {@link #arrived}
 * once every peer's descriptor is here, measured dearer: +60 against +45 ns on 16 cores, {@code
 * bench/results/2026-11-29-recorder-placement-16core.md}, kept so that one run measures both), before the agreement
 * check and before any data moves; the return stores the completion count ({@link #completed}); the state is derived
 * when read. A rank whose wait throws (timeout, dead or aborting peer) has its entry written by the failure path from
 * the descriptor it published ({@link ControlPlane#failed}), and a timeout message built inside the wait writes it
 * first too, so the dump and the message show it arrived (SCHEDULED, with its arguments, or STARTED when the message
 * path finds every peer arrived). A rank that finds the group aborted throws before it publishes: {@link #failed}
 * writes its entry without arguments.
 *
 * <p>Five other storage layouts (copying off-heap entries, a heap array, padded, compact, runs of equal collectives)
 * were measured no cheaper and removed on 2026-11-30: their story is in {@code docs/flight-recorder.md}, their numbers
 * in {@code bench/results} (2026-11-28 to 30, {@code *recorder*}).
 *
 * <p><b>Memory ordering.</b> The entries need none, and there is no release store: every write and every read
 * ({@link #dump}, {@link #lastOps}, {@link #toJson}: the failure path and timeout messages) happen on the one thread
 * that runs the communicator's collectives, so program order is enough. The completion count is the one word another
 * thread reads: written with an opaque store here, read with an opaque load by the ticks (see {@link
 * FlightRecorderTicks}: it publishes nothing, a late value dates a collective one tick later). A reader of the entries
 * on another thread (a watchdog dumping a stuck rank) would need the writer to publish each entry with a release store
 * of its {@code SEQ} last and to read it with an acquire load first; none exists.
 *
 * <p>Size and dump directory: {@link Configuration#FLIGHT_RECORDER_ENTRIES},
 * {@link Configuration#FLIGHT_RECORDER_DIR}. Not thread-safe: written by the rank's thread that runs
 * the communicator; {@link #dump} runs on that thread too (from the failure path).
 */
public final class FlightRecorder extends FlightRecorderFields.TailPad {

    /** Where a recorded collective got to. */
    public enum State {
        /** Arrived: this rank published its arguments at the entry barrier and waits for the others'. */
        SCHEDULED,
        /** Every rank arrived at the entry barrier and agreed: data moves. */
        STARTED,
        /** Returned on this rank (for device communicators: enqueued on the stream). */
        COMPLETED,
        /** Threw on this rank (mismatch, timeout, dead or aborting peer, local failure). */
        FAILED
    }

    private static final Logger LOG = LoggerFactory.getLogger(FlightRecorder.class);
    private static final OpDescriptorLayout.Kind[] KINDS = OpDescriptorLayout.Kind.values();

    /** The completion count ({@link FlightRecorderFields.Hot#completedThrough}), stored opaque, read by the ticks. */
    private static final VarHandle COMPLETED_THROUGH;
    /** {@link #arrivedThrough}, stored and read opaque (see there). */
    private static final VarHandle ARRIVED_THROUGH;

    static {
        try {
            COMPLETED_THROUGH = java.lang.invoke.MethodHandles.lookup().findVarHandle(FlightRecorderFields.Hot.class,
                    "completedThrough", long.class);
            ARRIVED_THROUGH = java.lang.invoke.MethodHandles.lookup().findVarHandle(FlightRecorder.class,
                    "arrivedThrough", long.class);
        } catch (ReflectiveOperationException e) {
            throw new ExceptionInInitializerError(e);
        }
    }

    private final int rank;
    private final int worldSize;
    private final String communicator;
    /** Longs per entry (the class comment's picture). */
    private static final int STRIDE = (int) (FlightRecorderLayout.ENTRY_BYTES / Long.BYTES);
    /** Longs before the first entry: the segment's first page ({@link FlightRecorderLayout}). */
    private static final int HEAD = (int) (FlightRecorderLayout.ENTRIES_OFFSET / Long.BYTES);
    private static final int SEQ = (int) (OpDescriptorLayout.SEQ / Long.BYTES);
    private static final int COUNT = (int) (OpDescriptorLayout.COUNT / Long.BYTES);
    private static final int BYTES = (int) (OpDescriptorLayout.BUFFER_BYTES / Long.BYTES);
    private static final int MEMORY_ID = (int) (OpDescriptorLayout.MEMORY_ID / Long.BYTES);
    private static final int MEMORY_OFFSET = (int) (OpDescriptorLayout.MEMORY_OFFSET / Long.BYTES);
    private static final int BEGUN = (int) (OpDescriptorLayout.BYTES / Long.BYTES);
    private static final int ENDED = BEGUN + 1;
    private static final int SHAPE_FAILED = (int) (OpDescriptorLayout.EPOCH / Long.BYTES);
    /** The entry's word holding the sequence number whose entry barrier passed in its slot. */
    private static final int STARTED = ENDED + 1;
    /**
     * The hot path accesses its entry through this handle directly in the methods the control plane calls, with
     * no helper method between ({@link #put}, {@link #at}): a VarHandle's invocation is force-inlined whatever the
     * profile, a helper only where C2 finds its call site frequent, which in a collective's compilation it often did
     * not (2026-11-30, a local JIT log: a copying layout's {@code put}s in {@code PadSynchronizer.arrive} left as
     * calls, "low call site frequency"). Plain: only this rank's thread reads and writes the storage.
     */
    private static final VarHandle LONG = ValueLayout.JAVA_LONG.varHandle();
    /** Bytes per entry, and the byte offsets of its words the hot path writes. */
    private static final long ENTRY_BYTES = FlightRecorderLayout.ENTRY_BYTES;
    private static final long STARTED_BYTE = (long) STARTED * Long.BYTES;
    private static final long SHAPE_FAILED_BYTE = (long) SHAPE_FAILED * Long.BYTES;
    private static final long SHAPE_MASK = 0xffff_ffffL;
    private static final long FAILED_FLAG = 1L << 32;
    /** Where the name's index sits in SHAPE_FAILED, and its width (index {@link #NAME_SPILLED}: in {@link #what}). */
    private static final int NAME_SHIFT = 33;
    private static final int NAME_MASK = (1 << 11) - 1;
    /** The name index meaning "more distinct names than the index holds: the name is in {@link #what}". */
    private static final int NAME_SPILLED = NAME_MASK;

    /** The sequence number of the first collective recorded since creation or {@link #restartAt}. */
    private long firstSeq;
    private long lastDumpedFailureSeq = -1;
    /**
     * How many collectives {@link #arrived} saw (the newest's number plus one): what a recorder made without a control
     * plane counts as begun ({@link #create(int, int, String, int)}); off the hot path (in-shadow arrivals do not
     * come here).
     */
    private long arrivedThrough;
    /** The times: the ticks' rows, sampled on {@link CoarseClock}'s thread, which holds them weakly. */
    private final FlightRecorderTicks ticks;
    /** Dumps written by this process, numbering the file names: two dumps in one millisecond must not overwrite. */
    private static final java.util.concurrent.atomic.AtomicLong DUMPS = new java.util.concurrent.atomic.AtomicLong();

    private FlightRecorder(int rank, int worldSize, String communicator, int capacity, LongSupplier begun) {
        // the hot fields, padded (FlightRecorderFields): the entries in a page-aligned segment of their own
        super(capacity - 1, FlightRecorderLayout.allocate(capacity), new String[8]);
        this.rank = rank;
        this.worldSize = worldSize;
        this.communicator = communicator;
        this.ticks = new FlightRecorderTicks(begun != null ? begun : () -> (long) ARRIVED_THROUGH.getOpaque(this),
                () -> (long) COMPLETED_THROUGH.getOpaque(this), capacity); // opaque: pairs with completed()'s store
        CoarseClock.addListener(ticks);
    }

    /** {@return the long at index {@code i} of the storage} (plain: only this rank's thread reads and writes it) */
    private long at(int i) {
        return storage.getAtIndex(ValueLayout.JAVA_LONG, i);
    }

    /** Stores {@code v} at index {@code i} of the storage (plain: only this rank's thread reads and writes it). */
    private void put(int i, long v) {
        storage.setAtIndex(ValueLayout.JAVA_LONG, i, v);
    }

    /**
     * {@return where this recorder's storage lies}, for placement reports ({@link FlightRecording#placement}): the
     * segment's address and its offsets in a page and a line
     */
    public String placement() {
        return "recorder own-line at " + FlightRecorderLayout.describe(storage.address()) + ", no counters, entries at +"
                + FlightRecorderLayout.ENTRIES_OFFSET + " (" + ENTRY_BYTES + " bytes each)";
    }

    /**
     * {@return the newest collective recorded: the newest whose entry is written (SHAPE_FAILED not 0) at or after {@link
     * #firstSeq}, found by reading every entry (the hot path keeps no counter); firstSeq - 1 while none} Failure and
     * dump paths only.
     */
    private long lastSeq() {
        long newest = firstSeq - 1;
        for (int slot = 0; slot <= mask; slot++) {
            int e = HEAD + slot * STRIDE;
            long q = at(e + SEQ);
            if (q > newest && at(e + SHAPE_FAILED) != 0) {
                newest = q;
            }
        }
        return newest;
    }

    /** Whether the entry at {@code e} records collective {@code s}: written for it, since {@link #firstSeq}. */
    private boolean holds(int e, long s) {
        return s >= firstSeq && at(e + SEQ) == s && at(e + SHAPE_FAILED) != 0;
    }

    /** {@return where the entry of collective {@code s} begins in the storage, in longs} */
    private int entryAt(long s) {
        return HEAD + (int) (s & mask) * STRIDE;
    }

    /**
     * A recorder of {@link Configuration#FLIGHT_RECORDER_ENTRIES} entries (rounded up to a power of
     * two), or null when that setting is 0 (recording off).
     *
     * @param rank      this rank
     * @param worldSize the group's size
     * @param communicator the communicator's name, equal on every rank ("host-m3": its scratch memory's id)
     * @return the recorder, or null when recording is off
     */
    public static FlightRecorder create(int rank, int worldSize, String communicator) {
        return create(rank, worldSize, communicator, Configuration.FLIGHT_RECORDER_ENTRIES.get(), null);
    }

    /**
     * A recorder of {@link Configuration#FLIGHT_RECORDER_ENTRIES} entries whose times come from {@code begun}, how many
     * collectives the rank has begun (its control plane's next sequence number), read on the ticks' thread; null when
     * that setting is 0.
     *
     * @param rank         this rank
     * @param worldSize    the group's size
     * @param communicator the communicator's name, equal on every rank
     * @param begun        the rank's begun count, safe to read from another thread (an opaque load)
     * @return the recorder, or null when recording is off
     */
    public static FlightRecorder create(int rank, int worldSize, String communicator, LongSupplier begun) {
        return create(rank, worldSize, communicator, Configuration.FLIGHT_RECORDER_ENTRIES.get(),
                Objects.requireNonNull(begun, "begun"));
    }

    /**
     * A recorder of {@code entries} entries (rounded up to a power of two), or null when it is 0.
     *
     * @param rank      this rank
     * @param worldSize the group's size
     * @param communicator the communicator's name, equal on every rank
     * @param entries      how many collectives to keep, 0 for none
     * @return the recorder, or null
     */
    public static FlightRecorder create(int rank, int worldSize, String communicator, int entries) {
        return create(rank, worldSize, communicator, entries, null);
    }

    /** {@link #create(int, int, String, int)} with a begun count, or null for the arrivals {@link #arrived} saw. */
    private static FlightRecorder create(int rank, int worldSize, String communicator, int entries, LongSupplier begun) {
        if (entries < 0) {
            throw new IllegalArgumentException("flight recorder entries=" + entries + ", expected >= 0 (0 turns"
                    + " it off; fix: pass a count >= 0, or leave it unset)");
        }
        if (entries == 0) {
            return null;
        }
        int capacity = Integer.highestOneBit(Math.min(entries, 1 << 20));
        if (capacity < entries) {
            capacity <<= 1;
        }
        return new FlightRecorder(rank, worldSize, communicator, capacity, begun);
    }

    /** {@return how many entries the ring keeps} */
    public int capacity() {
        return mask + 1;
    }

    /**
     * {@return the number of collectives recorded so far (since the last {@link #restartAt}, if any)}: those that
     * arrived at their entry barrier or failed before.
     */
    public long recorded() {
        return Math.max(0, lastSeq() - firstSeq + 1);
    }

    /**
     * Recording resumes at collective {@code seq} after a pause ({@link FlightRecording#setRecording}): the entries
     * before the pause are dropped from {@link #lastOps} and the dumps, since the collectives during it are missing.
     * The ring itself is not cleared: its entries carry their sequence numbers, and every read goes through them.
     *
     * @param seq the control plane's next sequence number
     */
    void restartAt(long seq) {
        firstSeq = seq;
    }

    /**
     * This rank arrived at collective {@code d.seq()}'s entry barrier with these arguments: its entry, written once
     * (before the verdict, so a mismatch's dump shows what each rank passed). Called by
     * {@link ControlPlane#arriveAndCheck} once the entry barrier's wait is over ({@code after-wait}), or by the failure
     * and message paths when the wait threw or is not over after this rank published (see the class comment); the
     * in-shadow path has the synchronizer write the line into the entry in the first place ({@link #ownLineWritten}).
     *
     * @param d         this rank's descriptor
     * @param operation the collective's name, a constant ("all-reduce")
     */
    public void arrived(OpDescriptorLayout.Descriptor d, String operation) {
        // a copy of the line; plain: only this rank's thread reads and writes the storage
        d.write(storage, ownLineOffset(d.seq()));
        ownLineWritten(d, operation);
        // opaque: read by the ticks of a recorder made without a control plane; it publishes nothing
        ARRIVED_THROUGH.setOpaque(this, Math.max(arrivedThrough, d.seq() + 1));
    }

    /**
     * This rank's own descriptor line of collective {@code d.seq()} is in its entry ({@link
     * PadSynchronizer#arrive} wrote it at {@link #ownLineOffset} of {@link #ownLineSegment}, in the entry barrier's
     * shadow): its name word, one plain store into the line just written (only this rank's thread reads and writes the
     * storage); no clock, no stamp (the ticks time it).
     *
     * @param d         this rank's descriptor, as written
     * @param operation the collective's name, a constant ("all-reduce")
     */
    public void ownLineWritten(OpDescriptorLayout.Descriptor d, String operation) {
        long s = d.seq();
        long at = FlightRecorderLayout.ENTRIES_OFFSET + (s & mask) * ENTRY_BYTES;
        MemorySegment m = storage;
        int shape = d.kind().ordinal() + 1 | (d.dtype() + 1) << 8 | (d.op() + 1) << 16 | (d.algorithm() + 1) << 24;
        // plain store (one thread), no helper call (LONG says why); never 0: the shape's kind is at least 1
        LONG.set(m, at + SHAPE_FAILED_BYTE, shape & SHAPE_MASK | (operation == name0 ? 0L
                : operation == name1 ? 1L << NAME_SHIFT : nameBits(operation, (int) (s & mask)))); // 2 names inline
    }

    /** {@return the segment whose entries take this rank's own descriptor lines ({@link #ownLineOffset})} */
    public MemorySegment ownLineSegment() {
        return storage;
    }

    /**
     * {@return where collective {@code s}'s entry, and so this rank's own descriptor line, starts in {@link
     * #ownLineSegment}}
     *
     * @param s the collective's sequence number
     */
    public long ownLineOffset(long s) {
        return (long) entryAt(s) * Long.BYTES;
    }

    /**
     * The name's index, shifted into place; a name past the index's range goes to {@link #what}'s slot i. The
     * hot path compares the first four names' references (fields between the pads) and writes nothing (names are
     * constants); a new name, a fifth one, or an equal string that is not the same object takes {@link #newNameBits}.
     */
    private long nameBits(String operation, int i) {
        if (operation == name0) {
            return 0;
        }
        if (operation == name1) {
            return 1L << NAME_SHIFT;
        }
        if (operation == name2) {
            return 2L << NAME_SHIFT;
        }
        if (operation == name3) {
            return 3L << NAME_SHIFT;
        }
        return newNameBits(operation, i);
    }

    /** Off the hot path: the index of a name compared by value, added when new, spilled past the range. */
    private long newNameBits(String operation, int i) {
        int n = 0;
        while (n < nameCount && !names[n].equals(operation)) {
            n++;
        }
        if (n == nameCount && n < NAME_SPILLED) {
            if (n == names.length) {
                names = java.util.Arrays.copyOf(names, 2 * n);
            }
            names[nameCount++] = operation;
            switch (n) {
                case 0 -> name0 = operation;
                case 1 -> name1 = operation;
                case 2 -> name2 = operation;
                case 3 -> name3 = operation;
                default -> { } // compared by value in names
            }
        }
        if (n >= NAME_SPILLED) {
            if (what == null) {
                what = new String[capacity()];
            }
            what[i] = operation; // not cached: every such entry stores its name
            return (long) NAME_SPILLED << NAME_SHIFT;
        }
        return (long) n << NAME_SHIFT;
    }

    /** {@return the name of the entry at {@code e}, slot {@code i}} */
    private String nameOf(int e, int i) {
        int n = (int) (at(e + SHAPE_FAILED) >>> NAME_SHIFT) & NAME_MASK;
        return n == NAME_SPILLED ? what[i] : names[n];
    }

    /**
     * Whether collective {@code s} belongs to what this recorder records (at or after {@link #restartAt}) but has no
     * entry yet: it began and has neither arrived nor failed here.
     *
     * @param s a sequence number
     * @return true when {@code s}'s entry is still to be written
     */
    boolean lacksEntry(long s) {
        return s >= firstSeq && !holds(entryAt(s), s);
    }

    /**
     * Whether collective {@code s} has its entry: it arrived here (or failed) since {@link #restartAt}.
     *
     * @param s a sequence number
     * @return true when the entry is written for {@code s}
     */
    boolean hasEntry(long s) {
        return holds(entryAt(s), s);
    }

    /**
     * Collective {@code s} was seen past its entry barrier: every rank arrived. Not called per collective: the message
     * and failure paths call it when they find every peer's entry line for {@code s} in this rank's pad ({@link
     * ControlPlane}), so that a timeout inside the collective shows it STARTED rather than SCHEDULED.
     *
     * @param s its sequence number
     */
    public void started(long s) {
        // one plain store into the line arrival wrote; s + 1, so that a zeroed word never reads as collective 0's (an
        // older lap's entry never equals it)
        LONG.set(storage, FlightRecorderLayout.ENTRIES_OFFSET + (s & mask) * ENTRY_BYTES + STARTED_BYTE, s + 1);
    }

    /**
     * Collective {@code s} returned on this rank: the completion count moves past it (collectives of one communicator
     * return in order on its thread); a failed one stays failed (the flag wins when read). One store, the hot path's
     * second and last.
     *
     * @param s its sequence number
     */
    public void completed(long s) {
        // opaque: read by the ticks on CoarseClock's thread (FlightRecorderTicks); it publishes nothing
        COMPLETED_THROUGH.setOpaque(this, s + 1);
    }

    /** The state of the entry at {@code e} (see the class comment). */
    private State stateOf(int e) {
        if ((at(e + SHAPE_FAILED) & FAILED_FLAG) != 0) {
            return State.FAILED;
        }
        if (completedThrough > at(e + SEQ)) {
            return State.COMPLETED; // plain: this thread wrote it
        }
        return at(e + STARTED) == at(e + SEQ) + 1 ? State.STARTED : State.SCHEDULED;
    }

    /**
     * Collective {@code s} failed on this rank: marks it (writing its entry, without arguments, when it failed
     * before arriving) and dumps the ring (once per failed collective).
     *
     * @param s         its sequence number
     * @param operation its name, a constant ("all-reduce")
     * @param reason    the failure
     * @return the dump's file, or null when it was dumped already or could not be written (logged)
     */
    public Path failed(long s, String operation, Throwable reason) {
        int e = entryAt(s);
        long now = System.currentTimeMillis(); // the failure path: a clock call is fine here
        if (!holds(e, s)) {
            put(e + SEQ, s);
            put(e + BEGUN, now); // it never arrived: no tick counts it begun for sure, the failure dates it
            put(e + SHAPE_FAILED, nameBits(operation, (int) (s & mask))); // shape 0: no arguments, it never arrived
        } else {
            put(e + BEGUN, 0); // arrived: the ticks date its begin (the word may hold an older lap's failure)
        }
        put(e + SHAPE_FAILED, at(e + SHAPE_FAILED) | FAILED_FLAG);
        put(e + ENDED, now);
        return dumpOnce(s, reason);
    }

    /** Dumps the ring for failed collective {@code s}, once per collective; null when it was dumped already. */
    private Path dumpOnce(long s, Throwable reason) {
        if (s == lastDumpedFailureSeq) {
            return null;
        }
        lastDumpedFailureSeq = s;
        return dump(String.valueOf(reason));
    }

    /**
     * Writes the ring as JSON into {@link Configuration#FLIGHT_RECORDER_DIR} (atomically: a temporary
     * file renamed) and logs where, with this rank's last collectives.
     *
     * @param reason why (the failure's message)
     * @return the file, or null when it could not be written (logged)
     */
    public Path dump(String reason) {
        String json = toJson(reason);
        Path dir = Configuration.FLIGHT_RECORDER_DIR.get();
        String run = Configuration.RUN_ID.get();
        Integer generation = Configuration.RESTART_GENERATION.get();
        String name = "flight-" + safe(run == null ? "local" : run) + (generation == null ? "" : "-g" + generation)
                + "-" + communicator + "-n" + worldSize + "-rank" + rank + "-pid" + ProcessHandle.current().pid() + "-t"
                + System.currentTimeMillis() + "-d" + DUMPS.incrementAndGet() + ".json"; // -d: two in one ms differ
        try {
            Files.createDirectories(dir);
            Path file = dir.resolve(name);
            Path tmp = Files.createTempFile(dir, name, ".tmp");
            Files.writeString(tmp, json, StandardCharsets.UTF_8);
            Files.move(tmp, file, StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
            LOG.warn("rank={} flight recorder: last collectives {}; dump {} (merge every rank's dumps with"
                    + " symmem4j-flight-report {})", rank, lastOps(4), file, dir);
            return file;
        } catch (IOException | RuntimeException e) {
            LOG.warn("rank={} flight recorder: last collectives {}; could not write the dump into {}: {} (set {} to a"
                    + " writable directory)", rank, lastOps(4), dir, e, Configuration.FLIGHT_RECORDER_DIR.property());
            return null;
        }
    }

    /**
     * This rank's last {@code n} collectives in words, newest last: "all-reduce#12 COMPLETED,
     * all-reduce#13 STARTED".
     *
     * @param n how many
     * @return the list, or "none" when nothing was recorded
     */
    public String lastOps(int n) {
        StringBuilder b = new StringBuilder();
        for (Op o : ops(n)) {
            if (b.length() > 0) {
                b.append(", ");
            }
            b.append(o.name()).append('#').append(o.seq()).append(' ').append(o.state());
        }
        return b.length() == 0 ? "none" : b.toString();
    }

    /**
     * One recorded collective as a dump shows it.
     *
     * @param seq      its sequence number
     * @param name     its name
     * @param shape    kind, dtype, op, algorithm (the class comment; 0: failed before it arrived)
     * @param count    elements
     * @param bytes    buffer bytes
     * @param memoryId symmetric region, -1 for staged buffers
     * @param memoryOffset offset in it
     * @param state    where it got to
     * @param begun    epoch ms it began
     * @param ended    epoch ms it ended, 0 while it has not
     */
    private record Op(long seq, String name, int shape, long count, long bytes, long memoryId, long memoryOffset,
                      State state, long begun, long ended) {
    }

    /** The recorded collectives among the newest {@code n} numbers (at most the ring's capacity), oldest first. */
    private List<Op> ops(int n) {
        ticks.tick(System.currentTimeMillis()); // this thread's counters as of now: every collective so far has its row
        long last = lastSeq();
        long from = Math.max(firstSeq, last - Math.min(n, capacity()) + 1);
        List<Op> out = new ArrayList<>();
        for (long q = from; q <= last; q++) {
            int i = (int) (q & mask);
            int e = entryAt(q);
            if (at(e + SEQ) != q || at(e + SHAPE_FAILED) == 0) {
                continue; // began but neither arrived nor failed: not recorded
            }
            State state = stateOf(e);
            boolean failed = state == State.FAILED;
            long begun = failed && at(e + BEGUN) != 0 ? at(e + BEGUN) : ticks.begunMillis(q);
            long ended = failed ? at(e + ENDED) : state == State.COMPLETED ? ticks.completedMillis(q) : 0;
            int sh = (int) (at(e + SHAPE_FAILED) & SHAPE_MASK);
            boolean hasShape = (sh & 0xff) != 0;
            out.add(new Op(q, nameOf(e, i), sh, hasShape ? at(e + COUNT) : -1, hasShape ? at(e + BYTES) : -1,
                    hasShape ? at(e + MEMORY_ID) : -1, hasShape ? at(e + MEMORY_OFFSET) : 0, state, begun, ended));
        }
        return out;
    }

    /**
     * The ring as JSON: {@code {"rank", "worldSize", "communicator", "runId", "generation", "pid",
     * "dumpedAtMillis", "reason", "recorded", "ops": [...]}}, oldest op first.
     *
     * @param reason why it is dumped
     * @return the JSON text
     */
    public String toJson(String reason) {
        long recorded = recorded();
        StringBuilder b = new StringBuilder(256 + 200 * (int) Math.min(recorded, capacity()));
        String run = Configuration.RUN_ID.get();
        Integer generation = Configuration.RESTART_GENERATION.get();
        b.append("{\"format\":\"symmem4j-flight-recorder/1\",\"rank\":").append(rank)
                .append(",\"worldSize\":").append(worldSize)
                .append(",\"communicator\":\"").append(ChromeTraceWriter.jsonEscape(communicator)).append('"')
                .append(",\"runId\":").append(run == null ? "null" : "\"" + ChromeTraceWriter.jsonEscape(run) + "\"")
                .append(",\"generation\":").append(generation == null ? "null" : generation.toString())
                .append(",\"pid\":").append(ProcessHandle.current().pid())
                .append(",\"jvm\":\"").append(ChromeTraceWriter.jsonEscape(ManagementFactory.getRuntimeMXBean().getName()))
                .append('"')
                .append(",\"dumpedAtMillis\":").append(System.currentTimeMillis())
                .append(",\"reason\":\"").append(ChromeTraceWriter.jsonEscape(reason == null ? "" : reason)).append('"')
                .append(",\"recorded\":").append(recorded)
                .append(",\"ops\":[");
        boolean first = true;
        for (Op o : ops(capacity())) {
            if (!first) {
                b.append(',');
            }
            first = false;
            int sh = o.shape();
            boolean hasShape = (sh & 0xff) != 0;
            b.append("{\"seq\":").append(o.seq())
                    .append(",\"op\":\"").append(ChromeTraceWriter.jsonEscape(o.name())).append('"')
                    .append(",\"kind\":").append(hasShape ? "\"" + KINDS[(sh & 0xff) - 1].name().toLowerCase(Locale.ROOT) + "\"" : "null")
                    .append(",\"dtype\":").append(name(DType.values(), (sh >>> 8 & 0xff) - 1))
                    .append(",\"reduceOp\":").append(name(ReduceOp.values(), (sh >>> 16 & 0xff) - 1))
                    .append(",\"algorithm\":").append(name(Algorithm.values(), (sh >>> 24 & 0xff) - 1))
                    .append(",\"count\":").append(hasShape ? o.count() : -1)
                    .append(",\"bytes\":").append(hasShape ? o.bytes() : -1)
                    .append(",\"memoryId\":").append(hasShape ? o.memoryId() : -1)
                    .append(",\"memoryOffset\":").append(hasShape ? o.memoryOffset() : 0)
                    .append(",\"state\":\"").append(o.state()).append('"')
                    .append(",\"begunMillis\":").append(o.begun())
                    .append(",\"endedMillis\":").append(o.ended())
                    .append('}');
        }
        return b.append("]}").toString();
    }

    private static String name(Enum<?>[] values, int ordinal) {
        return ordinal < 0 || ordinal >= values.length ? "null" : "\"" + values[ordinal].name() + "\"";
    }

    private static String safe(String s) {
        return s.replaceAll("[^A-Za-z0-9._-]", "_");
    }
}
