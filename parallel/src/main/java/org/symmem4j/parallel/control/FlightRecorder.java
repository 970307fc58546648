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
 * wall-clock times), written on the hot path without allocating or reading a clock (a
 * {@link CoarseClock} stamp is a volatile load), and dumped as JSON when a collective fails, so that
 * a hang or a dead rank can be attributed afterwards: {@code symmem4j-flight-report} merges the dumps
 * of every rank into one report that says where the ranks diverged. PyTorch's NCCL flight recorder is
 * the model; here the entry barrier already names the missing rank, and the dump adds what each rank
 * did before.
 *
 * <pre>
 *  slot = seq &amp; (capacity - 1)    one entry per collective, overwritten capacity calls later; entry
 *                                  slot is the 8 longs (64 bytes) ring[8 * slot .. 8 * slot + 7]:
 *  [0] SEQ            the control plane's sequence number (barriers inside collectives count too)
 *  [1] COUNT          elements        \
 *  [2] BYTES          buffer bytes     | written by arrived(); meaningless while SHAPE is 0
 *  [3] MEMORY_ID      symmetric region | (the dump then shows -1, -1, -1, 0: failed before arriving)
 *  [4] MEMORY_OFFSET                  /
 *  [5] BEGUN          epoch ms when this rank arrived ({@link CoarseClock}: about 1 ms resolution)
 *  [6] ENDED          epoch ms when it returned or failed here, 0 while neither
 *  [7] SHAPE_FAILED   failed &lt;&lt; 32 | shape, shape = kind+1 | dtype+1 &lt;&lt; 8 | op+1 &lt;&lt; 16 | algorithm+1 &lt;&lt; 24
 *                     (shape 0: failed before it arrived)
 *  what[slot]         the operation's name (heap storage; the off-heap ones keep its index in SHAPE_FAILED)
 *  state, derived when read: FAILED if flagged; else COMPLETED if ENDED; else STARTED if the entry barrier
 *                     passed (startedSeq, one field); else SCHEDULED (arrived, waiting for the others)
 * </pre>
 *
 * <p>The layout above is the copying entry layout ({@code storage=off-heap} or {@code heap}); the default,
 * {@code own-line}, holds the same words in a 128-byte entry ({@link #OWN_LINE}); runs: below.
 *
 * <p><b>Per collective, one write of its entry, in the entry barrier's shadow</b> (by default, {@link
 * Configuration#FLIGHT_RECORDER_ARRIVAL}; {@code after-wait}: {@link ControlPlane#arriveAndCheck} calls {@link #arrived}
 * once every peer's descriptor is here), before the agreement check and before any data moves;
 * the barrier's verdict then costs one field store ({@link #started}) and the return one guarded store of a clock stamp
 * ({@link #completed}); the state is derived when read. A rank whose wait throws (timeout, dead or aborting peer) has
 * its entry written by the failure path from the descriptor it published ({@link ControlPlane#failed}), and a timeout
 * message built inside the wait writes it first too, so the dump and the message show it arrived (SCHEDULED, with its
 * arguments). A rank that finds the group aborted throws before it publishes: {@link #failed} writes its entry
 * without arguments.
 *
 * <p>Why in the shadow: measured on 16 idle cores, one-shot 1 KiB on 2 ranks, after the wait cost +60 ns against +45 ns
 * in the shadow, intervals apart ({@code bench/results/2026-11-29-recorder-placement-16core.md}), which refuted the
 * account (in-order reorder and store buffers full at a one-shot entry barrier) that had moved it after the wait;
 * {@code after-wait} is kept so that one run measures both ({@code FlightRecorderCostBench --arrivals
 * after-wait,in-shadow}). The history is in {@code docs/flight-recorder.md}.
 *
 * <p><b>Own line (the default since 2026-11-30, {@link #OWN_LINE}).</b> The entry is 128 bytes, the rank's own
 * descriptor line followed by the recorder's words, and with the recorder on the rank writes its own line there
 * instead of into its own pad: the arguments are written once per collective as with the recorder off, and the
 * recorder adds 5 stores (begin, end, name word at arrival; started; the end stamp) and no counter. The layout below
 * ({@code storage=off-heap}) copies the descriptor into a 64-byte entry after the rank wrote it into its own pad too.
 *
 * <p><b>Storage: one page-aligned off-heap segment per recorder ({@link Configuration#FLIGHT_RECORDER_STORAGE} {@code
 * own-line} or {@code off-heap}).</b> The entries (and, copying, {@code lastSeq} and {@code startedSeq}) live in a
 * segment of their own ({@link FlightRecorderLayout}), at the same page and line offsets in every JVM, sharing no line
 * with another rank's pad, data or heap object. Each entry carries its operation's name as an index (SHAPE_FAILED's
 * bits 33-43), compared by reference with four names kept in fields, so the hot path reads no per-slot array and
 * stores no reference. The fields it reads ({@code mask}, the storage, the names) sit between 128-byte pads in this
 * object ({@link FlightRecorderFields}) and are not written per collective ({@code
 * bench/results/2026-11-30-recorder-placement.md}). {@code heap} keeps the array of before, for comparison in one run.
 *
 * <p><b>Padded (experimental, {@link Configuration#FLIGHT_RECORDER_PADDED}; a heap layout: it implies {@code
 * storage=heap}).</b> Nothing written per collective lies within 128 bytes of another heap object: {@code ring} has
 * 16 longs before its first entry and 16 after its last, the two counters live in the last line of the head padding,
 * and {@code what} has 32 references before and after its names (the false-sharing test of #36, {@code
 * bench/results/2026-11-29-recorder-false-sharing-2core.md}; measured slower on 16 cores).
 *
 * <p><b>Compact (experimental, {@link Configuration#FLIGHT_RECORDER_COMPACT}).</b> An entry is 4 longs, {@code [0] SEQ,
 * [1] BEGUN, [2] ENDED, [3] SHAPE_FAILED}, the last word also holding the name's index (bits 33-43) and the slot of
 * its arguments in {@code args} (bits 44-63), a ring appended to only when a collective's arguments differ from its
 * newest record: the cache-footprint test of #36; padded wins when both are set.
 *
 * <p><b>Runs (experimental, off by default, {@link Configuration#FLIGHT_RECORDER_RUNS}): the arrival write removed,
 * not moved; measured slower</b> (32 idle cores, 2026-11-29: +20.7 ns per 1 KiB one-shot all-reduce on 2 ranks against
 * the entry layout's +7.1 ns). Nothing is written at arrival: a waiting rank's arguments are the descriptor it
 * published into its own pad, which the failure and message paths copy in ({@link ControlPlane#failed}). The ring
 * holds runs ({@link FlightRuns}): after the barrier passed ({@link #started(OpDescriptorLayout.Descriptor, String)})
 * a collective equal to the newest run and numbered right after it costs one store, the return one store, the stamps
 * only when the coarse clock's millisecond moved. The dump expands the runs to the same per-collective records
 * (FlightRecorderRunsTest), except that a collective inside a run has no times of its own (null); each record of a
 * longer run names it ({@code "run": {"firstSeq", "lastSeq"}}). A failure splits the failed collective off its run.
 *
 * <p><b>Memory ordering.</b> None is needed, and there is no release store: every write and every read
 * ({@link #dump}, {@link #lastOps}, {@link #toJson}: the failure path and timeout messages) happen on the one thread
 * that runs the communicator's collectives, so program order is enough. A reader on another thread (a watchdog
 * dumping a stuck rank) would need the writer to publish each entry with a release store of its {@code SEQ} last and
 * to read it with an acquire load first; none exists.
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

    private final int rank;
    private final int worldSize;
    private final String communicator;
    /**
     * Whether each entry is 4 longs (32 bytes) and its arguments in {@link #args}, a ring of records appended to only
     * when they change: {@link Configuration#FLIGHT_RECORDER_COMPACT}, read once per JVM (C2 folds every branch on it).
     */
    private static final boolean COMPACT = Configuration.FLIGHT_RECORDER_COMPACT.get() && !Configuration.FLIGHT_RECORDER_PADDED.get();
    /**
     * Whether the recorder keeps runs of equal consecutive collectives ({@link FlightRuns}) instead of an entry per
     * collective, and writes nothing at arrival: {@link Configuration#FLIGHT_RECORDER_RUNS}, read once per JVM (C2
     * folds every branch on it); it wins over padded and compact.
     */
    static final boolean RUNS = Configuration.FLIGHT_RECORDER_RUNS.get();
    /**
     * Whether each entry is the 128-byte descriptor line this rank publishes at its entry barrier ({@link
     * Configuration#FLIGHT_RECORDER_STORAGE} {@code own-line}, the default; not with padded, compact or runs): with
     * the recorder on, {@link PadSynchronizer#arrive} writes this rank's own line into the entry instead of into its
     * own pad ({@link #arrived} writes it there, in {@link OpDescriptorLayout}'s layout), so the arguments are
     * written once, as with the recorder off, and the entry adds only its other words. By long index:
     * <pre>
     *  [0] SHAPE_FAILED (the descriptor's epoch word, unused in an entry)   [1] SEQ
     *  [2..4] kind, dtype, op, algorithm, root, problem (ints)   [5] COUNT   [6] BYTES   [7] MEMORY_ID
     *  [8] MEMORY_OFFSET   [9] recv bytes   [10] BEGUN   [11] ENDED   [12] STARTED: the sequence number whose entry
     *  barrier passed in this slot (the entry is STARTED when it equals SEQ)   [13..15] zero
     * </pre>
     * No counter is written per collective: the newest recorded number is found by reading the entries
     * ({@link #lastSeq()}, failure paths only), an entry being recorded when its BEGUN is not 0.
     */
    static final boolean OWN_LINE = "own-line".equals(Configuration.FLIGHT_RECORDER_STORAGE.get())
            && !Configuration.FLIGHT_RECORDER_PADDED.get() && !COMPACT && !RUNS;
    private static final int STRIDE = OWN_LINE ? 16 : COMPACT ? 4 : 8;
    private static final int SEQ = OWN_LINE ? (int) (OpDescriptorLayout.SEQ / Long.BYTES) : 0;
    private static final int COUNT = OWN_LINE ? (int) (OpDescriptorLayout.COUNT / Long.BYTES) : 1;
    private static final int BYTES = OWN_LINE ? (int) (OpDescriptorLayout.BUFFER_BYTES / Long.BYTES) : 2;
    private static final int MEMORY_ID = OWN_LINE ? (int) (OpDescriptorLayout.MEMORY_ID / Long.BYTES) : 3;
    private static final int MEMORY_OFFSET = OWN_LINE ? (int) (OpDescriptorLayout.MEMORY_OFFSET / Long.BYTES) : 4;
    private static final int BEGUN = OWN_LINE ? (int) (OpDescriptorLayout.BYTES / Long.BYTES) : COMPACT ? 1 : 5;
    private static final int ENDED = OWN_LINE ? BEGUN + 1 : COMPACT ? 2 : 6;
    private static final int SHAPE_FAILED = OWN_LINE ? (int) (OpDescriptorLayout.EPOCH / Long.BYTES) : COMPACT ? 3 : 7;
    /** Own-line: the entry's word holding the sequence number whose entry barrier passed in its slot. */
    private static final int STARTED = ENDED + 1;
    /**
     * Own-line's hot path accesses its entry through this handle directly in the methods the control plane calls, with
     * no helper method between ({@link #put}, {@link #at}): a VarHandle's invocation is force-inlined whatever the
     * profile, a helper only where C2 finds its call site frequent, which in a collective's compilation it often did
     * not (2026-11-30, a local JIT log: the copying layout's {@code put}s in {@code PadSynchronizer.arrive} left as
     * calls, "low call site frequency"). Plain: only this rank's thread reads and writes the storage.
     */
    private static final VarHandle LONG = ValueLayout.JAVA_LONG.varHandle();
    /** Own-line: bytes per entry, and the byte offsets of its words the hot path writes. */
    private static final long ENTRY_BYTES = 16 * Long.BYTES;
    private static final long SEQ_BYTE = (long) SEQ * Long.BYTES;
    private static final long BEGUN_BYTE = (long) BEGUN * Long.BYTES;
    private static final long ENDED_BYTE = (long) ENDED * Long.BYTES;
    private static final long STARTED_BYTE = (long) STARTED * Long.BYTES;
    private static final long SHAPE_FAILED_BYTE = (long) SHAPE_FAILED * Long.BYTES;
    private static final long SHAPE_MASK = 0xffff_ffffL;
    private static final long FAILED_FLAG = 1L << 32;
    /**
     * Compact or off-heap ({@link #NAMED}): where the name's index sits in SHAPE_FAILED, and its width (index {@link
     * #NAME_SPILLED}: in {@link #what}).
     */
    private static final int NAME_SHIFT = 33;
    private static final int NAME_MASK = (1 << 11) - 1;
    /** Named: the name index meaning "more distinct names than the index holds: the name is in {@link #what}". */
    private static final int NAME_SPILLED = NAME_MASK;
    /** Compact: where the arguments' slot in {@link #args} sits in SHAPE_FAILED (20 bits: capacity is at most 2^20). */
    private static final int ARGS_SHIFT = 44;

    /** {@link Configuration#FLIGHT_RECORDER_PADDED}, read once per JVM (C2 folds every branch on it). */
    private static final boolean PADDED = Configuration.FLIGHT_RECORDER_PADDED.get();
    /**
     * Whether the entries and the two per-collective counters live in one page-aligned off-heap segment per recorder
     * ({@link FlightRecorderLayout}): {@link Configuration#FLIGHT_RECORDER_STORAGE} {@code off-heap}, the default,
     * unless padded (a heap layout) or runs; read once per JVM, so C2 folds every branch on it.
     */
    private static final boolean OFF_HEAP = !"heap".equals(Configuration.FLIGHT_RECORDER_STORAGE.get()) && !PADDED
            && !RUNS;
    /**
     * Whether an entry carries its operation's name as an index into {@link #names} (SHAPE_FAILED's bits 33-43) instead
     * of a reference in {@link #what}: compact and off-heap, so that the hot path reads no per-slot heap array.
     */
    private static final boolean NAMED = COMPACT || OFF_HEAP;
    /** Whether the two counters live in the storage ({@link #LAST_SEQ_AT}, {@link #STARTED_SEQ_AT}), not in fields. */
    private static final boolean COUNTERS_IN_STORAGE = PADDED || OFF_HEAP;
    /**
     * Longs before the first entry: off-heap, the first page; padded, 16 (the array's header plus 128 bytes, the two
     * counters in its last line); else 0.
     */
    private static final int HEAD = OFF_HEAP ? (int) (FlightRecorderLayout.ENTRIES_OFFSET / Long.BYTES) : PADDED ? 16 : 0;
    /** Longs after the last entry in {@link #ring}: padded, 16 (128 bytes from the next object); else 0. */
    private static final int TAIL = PADDED ? 16 : 0;
    /** Where the storage holds the newest recorded sequence number when padded or off-heap (else {@link #lastSeq}). */
    private static final int LAST_SEQ_AT = OFF_HEAP ? (int) (FlightRecorderLayout.LAST_SEQ_OFFSET / Long.BYTES) : 14;
    /** Where the storage holds the newest started sequence number when padded or off-heap (else {@link #startedSeq}). */
    private static final int STARTED_SEQ_AT = OFF_HEAP ? (int) (FlightRecorderLayout.STARTED_SEQ_OFFSET / Long.BYTES) : 15;
    /** References before the first name in {@link #what}: padded, 32 (at least 128 bytes); else 0. */
    private static final int WHAT_HEAD = PADDED ? 32 : 0;

    /** The run-length layout's ring when {@link #RUNS}; else null. */
    private final FlightRuns runs;
    /** The sequence number of the first collective recorded since creation or {@link #restartAt}. */
    private long firstSeq;
    /** Unpadded: the newest collective recorded; firstSeq - 1 while none ({@link #lastSeq()}). */
    private long lastSeq = -1;
    /** Unpadded: the newest collective whose entry barrier passed; -1 while none ({@link #startedSeq()}). */
    private long startedSeq = -1;
    private long lastDumpedFailureSeq = -1;
    /** Dumps written by this process, numbering the file names: two dumps in one millisecond must not overwrite. */
    private static final java.util.concurrent.atomic.AtomicLong DUMPS = new java.util.concurrent.atomic.AtomicLong();

    private FlightRecorder(int rank, int worldSize, String communicator, int capacity) {
        // the hot fields, padded (FlightRecorderFields): the entries in a page-aligned segment of their own (off-heap,
        // the default, whose allocate() sets both counters to -1) or in a heap array
        super(capacity - 1, RUNS || OFF_HEAP ? null : new long[HEAD + capacity * STRIDE + TAIL],
                OFF_HEAP ? FlightRecorderLayout.allocate(capacity, STRIDE) : null,
                NAMED || RUNS ? null : new String[WHAT_HEAD + capacity + WHAT_HEAD],
                NAMED ? new String[8] : null, COMPACT && !RUNS ? new long[4 * capacity] : null);
        this.rank = rank;
        this.worldSize = worldSize;
        this.communicator = communicator;
        this.runs = RUNS ? new FlightRuns(capacity) : null;
        if (PADDED && !RUNS) {
            ring[LAST_SEQ_AT] = -1;
            ring[STARTED_SEQ_AT] = -1;
        }
    }

    /** {@return the long at index {@code i} of the storage} (plain: only this rank's thread reads and writes it) */
    private long at(int i) {
        return OFF_HEAP ? FlightRecorderLayout.getAt(base, i) : ring[i];
    }

    /** Stores {@code v} at index {@code i} of the storage (plain: only this rank's thread reads and writes it). */
    private void put(int i, long v) {
        if (OFF_HEAP) {
            FlightRecorderLayout.putAt(base, i, v);
        } else {
            ring[i] = v;
        }
    }

    /**
     * {@return where this recorder's storage lies}, for placement reports ({@link FlightRecording#placement}): the
     * off-heap segment's address and its offsets in a page and a line, or that the heap array's address is not
     * visible (without {@code Unsafe})
     */
    public String placement() {
        if (OFF_HEAP) {
            return "recorder " + (OWN_LINE ? "own-line" : "off-heap") + " at "
                    + FlightRecorderLayout.describe(storage.address()) + (OWN_LINE ? ", no counters" : ", counters at +"
                    + FlightRecorderLayout.LAST_SEQ_OFFSET) + ", entries at +" + FlightRecorderLayout.ENTRIES_OFFSET + " ("
                    + STRIDE * Long.BYTES + " bytes each)";
        }
        return "recorder on the heap (" + (RUNS ? "runs" : PADDED ? "padded" : COMPACT ? "compact" : "entries")
                + "; its address is not visible without Unsafe)";
    }

    /** {@return the newest collective recorded; firstSeq - 1 while none} */
    private long lastSeq() {
        if (RUNS) {
            return Math.max(runs.lastSeq(), firstSeq - 1);
        }
        if (OWN_LINE) {
            return newestEntry();
        }
        return COUNTERS_IN_STORAGE ? at(LAST_SEQ_AT) : lastSeq;
    }

    /**
     * Own-line: the newest collective whose entry is written (BEGUN not 0) at or after {@link #firstSeq}, found by
     * reading every entry (the hot path keeps no counter); firstSeq - 1 while none. Failure and dump paths only.
     */
    private long newestEntry() {
        long newest = firstSeq - 1;
        for (int slot = 0; slot <= mask; slot++) {
            int e = HEAD + slot * STRIDE;
            long q = at(e + SEQ);
            if (q > newest && at(e + BEGUN) != 0) {
                newest = q;
            }
        }
        return newest;
    }

    /** Whether the entry at {@code e} records collective {@code s}: written for it, since {@link #firstSeq}. */
    private boolean holds(int e, long s) {
        if (OWN_LINE) {
            return s >= firstSeq && at(e + SEQ) == s && at(e + BEGUN) != 0;
        }
        return s >= firstSeq && s <= lastSeq() && at(e + SEQ) == s;
    }

    private void lastSeq(long s) {
        if (RUNS || OWN_LINE) {
            return; // derived from the newest run, or from the entries
        }
        if (COUNTERS_IN_STORAGE) {
            put(LAST_SEQ_AT, s);
        } else {
            lastSeq = s;
        }
    }

    /** {@return the newest collective whose entry barrier passed (every rank agreed); -1 while none} */
    private long startedSeq() {
        return COUNTERS_IN_STORAGE ? at(STARTED_SEQ_AT) : startedSeq;
    }

    /** {@return where the entry of collective {@code s} begins in {@link #ring}} */
    private int entryAt(long s) {
        return HEAD + (int) (s & mask) * STRIDE;
    }

    /**
     * {@return whether this JVM's recorders take the place of a rank's own descriptor line} ({@link #OWN_LINE}): with a
     * recorder on, {@link PadSynchronizer#arrive} writes no line into the rank's own pad and {@link #arrived} writes
     * the descriptor into the entry instead. For benchmarks whose baseline must do the work the recorder replaces.
     */
    public static boolean takesOwnLine() {
        return OWN_LINE;
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
        return create(rank, worldSize, communicator, Configuration.FLIGHT_RECORDER_ENTRIES.get());
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
        return new FlightRecorder(rank, worldSize, communicator, capacity);
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
        lastSeq(seq - 1);
    }

    /**
     * This rank arrived at collective {@code d.seq()}'s entry barrier with these arguments: its entry, written once
     * (before the verdict, so a mismatch's dump shows what each rank passed). Called by
     * {@link ControlPlane#arriveAndCheck} once the entry barrier's wait is over, or by the failure path when the wait
     * threw after this rank published (see the class comment).
     *
     * @param d         this rank's descriptor
     * @param operation the collective's name, a constant ("all-reduce")
     */
    public void arrived(OpDescriptorLayout.Descriptor d, String operation) {
        if (RUNS) {
            runs.scheduled(d, operation); // only off the hot path: the failure and message paths
            return;
        }
        long s = d.seq();
        int i = WHAT_HEAD + (int) (s & mask);
        int e = entryAt(s);
        int shape = shapeOf(d);
        if (OWN_LINE) {
            // a copy of the line (after-wait, failure and message paths): the in-shadow path has the synchronizer write
            // it here in the first place (ownLineWritten); plain: only this rank's thread reads and writes the storage
            d.write(storage, ownLineOffset(s));
            ownLineWritten(d, operation);
            return;
        }
        if (COMPACT) {
            put(e + SEQ, s);
            put(e + BEGUN, CoarseClock.millis());
            put(e + ENDED, 0);
            put(e + SHAPE_FAILED, shape & SHAPE_MASK | nameBits(operation, i) | argsBits(d));
            lastSeq(s);
            return;
        }
        put(e + SEQ, s);
        put(e + COUNT, d.count());
        put(e + BYTES, d.bufferBytes());
        put(e + MEMORY_ID, d.memoryId());
        put(e + MEMORY_OFFSET, d.memoryOffset());
        put(e + BEGUN, CoarseClock.millis());
        put(e + ENDED, 0);
        if (NAMED) {
            put(e + SHAPE_FAILED, shape & SHAPE_MASK | nameBits(operation, i));
        } else {
            put(e + SHAPE_FAILED, shape & SHAPE_MASK);
            if (what[i] != operation) {
                what[i] = operation;
            }
        }
        lastSeq(s);
    }

    /**
     * Own-line: this rank's own descriptor line of collective {@code d.seq()} is in its entry ({@link
     * PadSynchronizer#arrive} wrote it at {@link #ownLineOffset} of {@link #ownLineSegment}, in the entry barrier's
     * shadow): stamps the entry's own words, 3 plain stores into the line just written (only this rank's thread
     * reads and writes the storage).
     *
     * @param d         this rank's descriptor, as written
     * @param operation the collective's name, a constant ("all-reduce")
     */
    public void ownLineWritten(OpDescriptorLayout.Descriptor d, String operation) {
        long s = d.seq();
        long at = FlightRecorderLayout.ENTRIES_OFFSET + (s & mask) * ENTRY_BYTES;
        MemorySegment m = storage;
        int shape = d.kind().ordinal() + 1 | (d.dtype() + 1) << 8 | (d.op() + 1) << 16 | (d.algorithm() + 1) << 24;
        // plain stores (one thread), no helper call between (LONG says why); shapeOf's value, computed here
        LONG.set(m, at + BEGUN_BYTE, CoarseClock.millis());
        LONG.set(m, at + ENDED_BYTE, 0L);
        LONG.set(m, at + SHAPE_FAILED_BYTE, shape & SHAPE_MASK | (operation == name0 ? 0L
                : operation == name1 ? 1L << NAME_SHIFT : nameBits(operation, (int) (s & mask)))); // 2 names inline
    }

    /** {@return own-line: the segment whose entries take this rank's own descriptor lines ({@link #ownLineOffset})} */
    public MemorySegment ownLineSegment() {
        return storage;
    }

    /**
     * {@return own-line: where collective {@code s}'s entry, and so this rank's own descriptor line, starts in {@link
     * #ownLineSegment}}
     *
     * @param s the collective's sequence number
     */
    public long ownLineOffset(long s) {
        return (long) entryAt(s) * Long.BYTES;
    }

    /**
     * {@return a descriptor's kind, dtype, op and algorithm in one int}: kind+1 | dtype+1 &lt;&lt; 8 | op+1 &lt;&lt; 16 |
     * algorithm+1 &lt;&lt; 24 (0: no arguments).
     *
     * @param d the descriptor
     */
    static int shapeOf(OpDescriptorLayout.Descriptor d) {
        return d.kind().ordinal() + 1 | (d.dtype() + 1) << 8 | (d.op() + 1) << 16 | (d.algorithm() + 1) << 24;
    }

    /**
     * A collective began on this rank (the control plane's {@code begin}): the run-length layout keeps its begin
     * time, stored only when the coarse clock's millisecond moved; nothing in the other layouts.
     */
    public void begun() {
        if (RUNS) {
            runs.begun();
        }
    }

    /** Compact: the arguments' slot in {@link #args}, shifted into place, appending a record when they changed. */
    private long argsBits(OpDescriptorLayout.Descriptor d) {
        long[] a = args;
        int k = lastArgs;
        long count = d.count();
        long bytes = d.bufferBytes();
        long id = d.memoryId();
        long offset = d.memoryOffset();
        if (k < 0 || a[k] != count || a[k + 1] != bytes || a[k + 2] != id || a[k + 3] != offset) {
            k = (k + 4) & (4 * mask + 3);
            a[k] = count;
            a[k + 1] = bytes;
            a[k + 2] = id;
            a[k + 3] = offset;
            lastArgs = k;
        }
        return (long) (k >>> 2) << ARGS_SHIFT;
    }

    /**
     * Named: the name's index, shifted into place; a name past the index's range goes to {@link #what}'s slot i. The
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

    /** Named, off the hot path: the index of a name compared by value, added when new, spilled past the range. */
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
        if (!NAMED) {
            return what[i];
        }
        int n = (int) (at(e + SHAPE_FAILED) >>> NAME_SHIFT) & NAME_MASK;
        return n == NAME_SPILLED ? what[i] : names[n];
    }

    /** {@return argument {@code field} (COUNT, BYTES, MEMORY_ID, MEMORY_OFFSET) of the entry at {@code e}} */
    private long argument(int e, int field) {
        if (!COMPACT) {
            return at(e + field);
        }
        int k = 4 * (int) (at(e + SHAPE_FAILED) >>> ARGS_SHIFT);
        return args[k + field - COUNT];
    }

    /**
     * Whether collective {@code s} belongs to what this recorder records (at or after {@link #restartAt}) but has no
     * entry yet: it began and has neither arrived nor failed here.
     *
     * @param s a sequence number
     * @return true when {@code s}'s entry is still to be written
     */
    boolean lacksEntry(long s) {
        if (RUNS) {
            return s >= firstSeq && runs.find(s) < 0;
        }
        return s >= firstSeq && !holds(entryAt(s), s);
    }

    /**
     * Collective {@code s} passed its entry barrier: every rank arrived with the same arguments.
     *
     * @param s its sequence number
     */
    public void started(long s) {
        if (RUNS) {
            runs.startScheduled(s); // without its arguments: only a run copied in at arrival can start here
            return;
        }
        if (OWN_LINE) {
            // one plain store into the line arrival wrote (an older lap's entry never equals s), no helper call
            LONG.set(storage, FlightRecorderLayout.ENTRIES_OFFSET + (s & mask) * ENTRY_BYTES + STARTED_BYTE, s);
        } else if (COUNTERS_IN_STORAGE) {
            put(STARTED_SEQ_AT, s);
        } else {
            startedSeq = s;
        }
    }

    /**
     * Collective {@code d.seq()} passed its entry barrier with these arguments (the control plane's call): in the
     * run-length layout the collective's one write ({@link FlightRuns#started}); else {@link #started(long)}.
     *
     * @param d         its descriptor, as every rank agreed on it
     * @param operation its name, a constant ("all-reduce")
     */
    public void started(OpDescriptorLayout.Descriptor d, String operation) {
        if (OWN_LINE) {
            long s = d.seq(); // started(long)'s store, written out here: one call level less on the hot path
            LONG.set(storage, FlightRecorderLayout.ENTRIES_OFFSET + (s & mask) * ENTRY_BYTES + STARTED_BYTE, s);
        } else if (RUNS) {
            runs.started(d, operation);
        } else {
            started(d.seq());
        }
    }

    /**
     * Collective {@code s} returned on this rank; a failed one stays failed.
     *
     * @param s its sequence number
     */
    public void completed(long s) {
        if (OWN_LINE) {
            long at = FlightRecorderLayout.ENTRIES_OFFSET + (s & mask) * ENTRY_BYTES;
            // plain (one thread), no helper call (LONG says why): the entry is s's, and neither failed nor ended
            if ((long) LONG.get(storage, at + SEQ_BYTE) == s && (long) LONG.get(storage, at + ENDED_BYTE) == 0) {
                LONG.set(storage, at + ENDED_BYTE, CoarseClock.millis());
            }
            return;
        }
        if (RUNS) {
            runs.completed(s);
            return;
        }
        int e = entryAt(s);
        if (at(e + SEQ) == s && at(e + ENDED) == 0) {
            put(e + ENDED, CoarseClock.millis());
        }
    }

    /** The state of the entry at {@code e} (see the class comment). */
    private State stateOf(int e) {
        if ((at(e + SHAPE_FAILED) & FAILED_FLAG) != 0) {
            return State.FAILED;
        }
        if (at(e + ENDED) != 0) {
            return State.COMPLETED;
        }
        if (OWN_LINE) {
            return at(e + STARTED) == at(e + SEQ) ? State.STARTED : State.SCHEDULED;
        }
        return at(e + SEQ) <= startedSeq() ? State.STARTED : State.SCHEDULED;
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
        if (RUNS) {
            runs.failed(s, operation, CoarseClock.millis(), firstSeq);
            return dumpOnce(s, reason);
        }
        int i = WHAT_HEAD + (int) (s & mask);
        int e = entryAt(s);
        long now = CoarseClock.millis();
        if (!holds(e, s)) {
            put(e + SEQ, s);
            put(e + BEGUN, now);
            put(e + SHAPE_FAILED, 0); // no arguments: it never arrived
            if (NAMED) {
                put(e + SHAPE_FAILED, nameBits(operation, i));
            } else {
                what[i] = operation;
            }
            if (!OWN_LINE) {
                lastSeq(Math.max(lastSeq(), s));
            }
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
     * One recorded collective as a dump shows it, whatever the layout keeps.
     *
     * @param seq      its sequence number
     * @param name     its name
     * @param shape    kind, dtype, op, algorithm ({@link #shapeOf}; 0: failed before it arrived)
     * @param count    elements
     * @param bytes    buffer bytes
     * @param memoryId symmetric region, -1 for staged buffers
     * @param memoryOffset offset in it
     * @param state    where it got to
     * @param begun    epoch ms it began, null where not kept (inside a run)
     * @param ended    epoch ms it ended, 0 while it has not, null where not kept (inside a run)
     * @param runFirst the first collective of its run (run-length layout), else seq
     * @param runLast  the last of its run, else seq
     */
    record Op(long seq, String name, int shape, long count, long bytes, long memoryId, long memoryOffset, State state,
              Long begun, Long ended, long runFirst, long runLast) {
    }

    /** The recorded collectives among the newest {@code n} numbers (at most the ring's capacity), oldest first. */
    private List<Op> ops(int n) {
        long last = lastSeq();
        long from = Math.max(firstSeq, last - Math.min(n, capacity()) + 1);
        if (RUNS) {
            return runs.ops(from, Math.min(n, capacity()));
        }
        List<Op> out = new ArrayList<>();
        for (long q = from; q <= last; q++) {
            int i = WHAT_HEAD + (int) (q & mask);
            int e = entryAt(q);
            if (at(e + SEQ) != q || OWN_LINE && at(e + BEGUN) == 0) {
                continue; // began but neither arrived nor failed: not recorded
            }
            int sh = (int) (at(e + SHAPE_FAILED) & SHAPE_MASK);
            boolean hasShape = (sh & 0xff) != 0;
            out.add(new Op(q, nameOf(e, i), sh, hasShape ? argument(e, COUNT) : -1, hasShape ? argument(e, BYTES) : -1,
                    hasShape ? argument(e, MEMORY_ID) : -1, hasShape ? argument(e, MEMORY_OFFSET) : 0, stateOf(e),
                    at(e + BEGUN), at(e + ENDED), q, q));
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
                    .append(",\"endedMillis\":").append(o.ended());
            if (o.runFirst() != o.runLast()) {
                b.append(",\"run\":{\"firstSeq\":").append(o.runFirst()).append(",\"lastSeq\":").append(o.runLast())
                        .append('}');
            }
            b.append('}');
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
