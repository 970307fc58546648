package org.symmem4j.parallel.control;

import java.io.IOException;
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
 *  what[slot]         the operation's name ("all-reduce", "cuda all-gather", "barrier"), stored only when it
 *                     differs from the slot's last one (a constant: usually the same, and no GC barrier then)
 *  state, derived when read: FAILED if flagged; else COMPLETED if ENDED; else STARTED if the entry barrier
 *                     passed (startedSeq, one field); else SCHEDULED (arrived, waiting for the others)
 * </pre>
 *
 * <p>The layout above is the entry layout, the default ({@code symmem4j.flight.recorder.runs=false}); the runs setting
 * keeps runs of equal collectives instead and writes nothing at arrival (<b>Runs</b>, below). What follows up to there
 * is the account of the entry layout.
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
 * <p>Why after the wait and not in its shadow (between this rank's publish and its wait, where the entry was written
 * before, on the argument that the peers' lines travel then anyway). Measured on 16 cores ({@code
 * FlightRecorderCostBench}, the recorder switched on and off between blocks on one communicator): in the shadow, the
 * 1 KiB one-shot all-reduce on 2 ranks cost 20–30 ns more than the recorder's own 5 ns, with a ring of 64 entries as
 * with 1,024, while the two-shot one met 1 % ({@code bench/results/2026-11-29-recorder-shadow-16core.md}). The account
 * of it: on x86 an instruction holds a reorder-buffer entry from issue to retirement and a store also a store-buffer
 * entry until it commits, both in program order (512 and 114 entries on a Golden Cove / Raptor Cove core). At a
 * one-shot entry barrier both already hold work that waits on the other core: the previous reduction's stores into the
 * caller's buffer (their data comes from the peer's staged lines), the staged 1 KiB and the descriptor line (lines the
 * peer still shares, to be invalidated first), then the wait's own bookkeeping, by a count of the path some 90–110
 * stores. Whatever is added there (the entry's 9 stores and their 20-odd other instructions) queues behind it, and
 * once either buffer is full nothing behind it issues: not the wait loop's loads, not the first reads of the peer's
 * data. An in-place two-shot all-reduce (as measured) stages nothing and reaches its entry barrier right after its
 * previous call's closing barrier, whose wait drained both: there the shadow is one. After the wait they have
 * drained; the entry's stores hit L1 and commit at once, overlapping the reads of the peer's staged data. This is an
 * account, not a measurement (the lent machines have no hardware counters), and the measurement refuted it: on 16
 * idle cores, one-shot 1 KiB on 2 ranks, after the wait cost +60 ns against +45 ns in the shadow, intervals apart
 * ({@code bench/results/2026-11-29-recorder-placement-16core.md}). So the default stays in the shadow ({@code
 * symmem4j.flight.recorder.arrival=in-shadow}); {@code after-wait} is kept so that one run measures both ({@code
 * FlightRecorderCostBench --arrivals after-wait,in-shadow}). Where the one-shot cost comes from is still not found.
 *
 * <p>One array of entries rather than one array per field: a collective touches one cache line of {@code ring} and
 * one array bounds check instead of eight arrays.
 *
 * <p><b>Storage: one page-aligned off-heap segment per recorder (the default, {@link
 * Configuration#FLIGHT_RECORDER_STORAGE}).</b> The entries, {@code lastSeq} and {@code startedSeq} live in a segment of
 * their own ({@link FlightRecorderLayout}: the counters at page offset 3968, the entries from the next page, 128 bytes of
 * zero after them), so that in every JVM alike what the recorder writes per collective lies at the same page and line
 * offsets and shares no line with another rank's pad, data or heap object. Each entry carries its operation's name as
 * an index (SHAPE_FAILED's bits 33-43, as compact does), compared by reference with four names kept in fields, so the
 * hot path reads no per-slot array and stores no reference (no GC card mark). The fields it reads ({@code mask}, the
 * storage, the names) sit between 128-byte pads in this object ({@link FlightRecorderFields}) and are not written per
 * collective; the storage is accessed by address through a constant segment of all memory ({@code
 * FlightRecorderLayout.getAt}), so no heap object but this one's padded fields is read (not the {@code MemorySegment}
 * object, not its arena's session). Why: on 32 idle cores the one-shot cost was bimodal per fork (+4 to +61 ns against 6.6 ns of calls) and
 * not explained by the JIT ({@code bench/results/2026-11-29-ring-recorder-prewarm-32core.md}); the heap array's and
 * object's placement, which differs per JVM and moves with every collection, was the remaining per-fork variable
 * ({@code bench/results/2026-11-30-recorder-placement.md}). {@code heap} keeps the array of before, for comparison in
 * one run.
 *
 * <p><b>Padded (experimental, {@link Configuration#FLIGHT_RECORDER_PADDED}; a heap layout: it implies {@code
 * storage=heap}).</b> The one-shot cost on 2 ranks is
 * 20–40 ns more than these calls' own 4–5 ns, and a line this rank writes per collective that also holds an object a
 * peer rank reads or writes would cost a cache-line transfer per collective in one-shot's single synchronisation. With
 * the setting, nothing written per collective lies within 128 bytes (a line and its adjacent-line prefetch partner) of
 * another object: {@code ring} has 16 longs before its first entry and 16 after its last, the two counters
 * ({@code lastSeq}, {@code startedSeq}) live in the last line of the head padding instead of in this object (which
 * the hot path then only reads), and {@code what} has 32 references before and after its names. A local probe
 * (JOL, 2 ranks as the paired benchmark builds them) found the two ranks' rings adjacent after garbage
 * collections (rank 0's last entry in the line of rank 1's array header) and no other line shared between the
 * ranks' hot objects ({@code bench/results/2026-11-29-recorder-false-sharing-2core.md}). Off by default: the layout
 * is the one measured before until 16 idle cores say the padding pays.
 *
 * <p><b>Compact (experimental, {@link Configuration#FLIGHT_RECORDER_COMPACT}).</b> The layout above walks 68 KiB per lap
 * of 1,024 entries (64-byte entries and 4-byte name references), more than a 48 KiB L1, so every collective's entry
 * is a line the core no longer holds and evicts another. With the setting an entry is 4 longs, {@code [0] SEQ, [1]
 * BEGUN, [2] ENDED, [3] SHAPE_FAILED}, the last word also holding the name's index into {@code names} (bits 33-43)
 * and the slot of its arguments in {@code args} (bits 44-63), a second ring appended to only when a collective's
 * arguments differ from its newest record: 32 KiB per lap, and what a dump holds is the same. It is the cache-footprint
 * test of #36, measured against the layout above in one run ({@code FlightRecorderCostBench --arrivals
 * in-shadow,in-shadow+compact,in-shadow@256}); padded wins when both are set.
 *
 * <p><b>Runs (experimental, off by default, {@link Configuration#FLIGHT_RECORDER_RUNS}): the arrival write removed,
 * not moved; measured slower.</b> On 32 idle cores (2026-11-29, one run) the runs cost +20.7 ns per 1 KiB one-shot
 * all-reduce on 2 ranks against the entry layout's +7.1 ns, though their own calls are 3.0 ns against 10.4 ns: what
 * they add after the barrier sits on the path the peer waits for.
 * The probes of 2026-11-29 put the whole one-shot cost in the entry written at arrival ({@code +arrival} cost what the
 * whole recorder did), and every placement of that write so far (in the shadow, after the wait, padded, compact) cost
 * 20-60 ns. With the setting nothing is written at arrival: while a rank waits at its entry barrier, what the entry
 * would say is already in memory, the descriptor it published into its own pad ({@link PadSynchronizer#arrive} writes
 * it there as into the peers'), and the paths that need it (a failure, a timeout message) copy it in from there
 * ({@link ControlPlane#failed}, SCHEDULED with its arguments, as before). The ring holds runs ({@link FlightRuns}):
 * after the barrier passed ({@link #started(OpDescriptorLayout.Descriptor, String)}) a collective with the same name
 * and arguments as the newest run, numbered right after it, costs one store (the run's last number) after loads of a
 * line this core wrote the collective before; the return one store (the run's newest completed number); the begin and
 * end stamps are stored only when the coarse clock's millisecond moved. A collective that differs opens a run (a
 * barrier between all-reduces does, so such a loop writes two runs per pair: the old cost, after the wait). The
 * dump expands the runs to the same per-collective records (FlightRecorderRunsTest compares them with this layout's),
 * except that a collective inside a run has no times of its own (null: between its run's first and last, which keep
 * theirs, as does the one in flight); each record of a longer run names it ({@code "run": {"firstSeq", "lastSeq"}}).
 * A failure splits the failed collective off its run. Made the default because the helpers' loaded 2-core VM did not
 * show it slower (it resolves nothing there: +0.4 % with an interval of ±35 %); not measured on 16 cores yet:
 * {@code FlightRecorderCostBench --arrivals in-shadow,in-shadow+runs,in-shadow+none,in-shadow+runs+none} decides
 * whether it stays (the benchmark's cells set the layout explicitly, {@code in-shadow} being the entry layout).
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
     * Whether each entry is 4 longs (32 bytes) instead of 8 and a name reference: {@link
     * Configuration#FLIGHT_RECORDER_COMPACT}, read once per JVM (C2 folds every branch on it). Compact: {@code [0]
     * SEQ, [1] BEGUN, [2] ENDED, [3] SHAPE_FAILED} with bits 33-43 the name's index in {@link #names} and bits 44-63
     * the slot in {@link #args} of the entry's (count, bytes, memory id, memory offset), a ring of the same capacity
     * appended to only when they differ from its newest record (so a steady workload writes one 32-byte entry per
     * collective and nothing else). A record a live entry points at is never overwritten: each entry appends at most
     * one, so at most {@code capacity - 1} come after the oldest live entry's.
     */
    private static final boolean COMPACT = Configuration.FLIGHT_RECORDER_COMPACT.get() && !Configuration.FLIGHT_RECORDER_PADDED.get();
    /**
     * Whether the recorder keeps runs of equal consecutive collectives ({@link FlightRuns}) instead of an entry per
     * collective, and writes nothing at arrival: {@link Configuration#FLIGHT_RECORDER_RUNS}, read once per JVM (C2
     * folds every branch on it); it wins over padded and compact.
     */
    static final boolean RUNS = Configuration.FLIGHT_RECORDER_RUNS.get();
    private static final int STRIDE = COMPACT ? 4 : 8;
    private static final int SEQ = 0;
    private static final int COUNT = 1;
    private static final int BYTES = 2;
    private static final int MEMORY_ID = 3;
    private static final int MEMORY_OFFSET = 4;
    private static final int BEGUN = COMPACT ? 1 : 5;
    private static final int ENDED = COMPACT ? 2 : 6;
    private static final int SHAPE_FAILED = COMPACT ? 3 : 7;
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

    /**
     * Whether what the hot path writes is kept 128 bytes (a line and its adjacent-line prefetch partner) away from
     * every other heap object: {@link Configuration#FLIGHT_RECORDER_PADDED}, read once per JVM, so C2 folds every
     * branch on it and the unpadded layout runs the code it ran before the setting existed.
     */
    private static final boolean PADDED = Configuration.FLIGHT_RECORDER_PADDED.get();
    /**
     * Whether the entries and the two per-collective counters live in one page-aligned off-heap segment per recorder
     * ({@link FlightRecorderLayout}): {@link Configuration#FLIGHT_RECORDER_STORAGE} {@code off-heap}, the default,
     * unless padded (a heap layout) or runs; read once per JVM, so C2 folds every branch on it.
     */
    private static final boolean OFF_HEAP = "off-heap".equals(Configuration.FLIGHT_RECORDER_STORAGE.get()) && !PADDED
            && !RUNS;
    /**
     * Whether an entry carries its operation's name as an index into {@link #names} (SHAPE_FAILED's bits 33-43) instead
     * of a reference in {@link #what}: compact and off-heap, so that the hot path reads no per-slot heap array.
     */
    private static final boolean NAMED = COMPACT || OFF_HEAP;
    /** Whether the two counters live in the storage ({@link #LAST_SEQ_AT}, {@link #STARTED_SEQ_AT}), not in fields. */
    private static final boolean COUNTERS_IN_STORAGE = PADDED || OFF_HEAP;
    /**
     * Longs before the first entry in {@link #ring}: padded, 16 (the array's 16-byte header plus 128 bytes), the two
     * counters in the last line of it ({@link #LAST_SEQ_AT}, {@link #STARTED_SEQ_AT}), so no line this recorder writes
     * holds the array's header or any byte of the object before the array; else 0.
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
            return "recorder off-heap at " + FlightRecorderLayout.describe(storage.address()) + ", counters at +"
                    + FlightRecorderLayout.LAST_SEQ_OFFSET + ", entries at +" + FlightRecorderLayout.ENTRIES_OFFSET + " ("
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
        return COUNTERS_IN_STORAGE ? at(LAST_SEQ_AT) : lastSeq;
    }

    private void lastSeq(long s) {
        if (RUNS) {
            return; // derived from the newest run
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
        return s >= firstSeq && (s > lastSeq() || at(entryAt(s) + SEQ) != s);
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
        if (COUNTERS_IN_STORAGE) {
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
        if (RUNS) {
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
        if (at(e + SEQ) != s || s < firstSeq || s > lastSeq()) {
            put(e + SEQ, s);
            put(e + BEGUN, now);
            put(e + SHAPE_FAILED, 0); // no arguments: it never arrived
            if (NAMED) {
                put(e + SHAPE_FAILED, nameBits(operation, i));
            } else {
                what[i] = operation;
            }
            lastSeq(Math.max(lastSeq(), s));
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
            if (at(e + SEQ) != q) {
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
