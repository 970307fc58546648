package org.symmem4j.parallel.control;

import java.io.IOException;
import java.lang.management.ManagementFactory;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
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
 *  [2] BYTES          buffer bytes     | written by arguments(); meaningless while SHAPE is 0
 *  [3] MEMORY_ID      symmetric region | (the dump then shows -1, -1, -1, 0: never arrived)
 *  [4] MEMORY_OFFSET                  /
 *  [5] BEGUN          epoch ms when begun ({@link CoarseClock}: about 1 ms resolution)
 *  [6] TIMES          started &lt;&lt; 32 | ended: each ms since BEGUN plus 1, 0 while not yet reached
 *  [7] SHAPE_STATE    state &lt;&lt; 32 | shape, shape = kind+1 | dtype+1 &lt;&lt; 8 | op+1 &lt;&lt; 16 | algorithm+1 &lt;&lt; 24
 *                     (0: no arguments yet); state SCHEDULED (begun, at the entry barrier) -&gt; STARTED
 *                     (every rank arrived) -&gt; COMPLETED, or FAILED
 *  what[slot]         the operation's name ("all-reduce", "cuda all-gather", "barrier"), stored only when it
 *                     differs from the slot's last one (a constant: usually the same, and no GC barrier then)
 * </pre>
 *
 * <p>One array of entries rather than one array per field: a collective's four calls touch one or two
 * cache lines and one array bounds check instead of eleven arrays (the cost per collective is what
 * {@code FlightRecorderOpsBenchmark} measures). Times after the begin are kept as 32-bit deltas: an
 * operation that runs longer than 24 days, or a wall clock that stepped back, is clamped.
 *
 * <p><b>Per collective</b> the control plane makes four calls ({@link #begin}, {@link #arguments}, {@link #started},
 * {@link #completed}): plain stores into one or two cache lines of {@code ring}, three reads of the
 * {@link CoarseClock} (a volatile load each, no clock call: neither {@code System.nanoTime} nor
 * {@code currentTimeMillis}), no allocation. {@link #arguments} is called by the entry barrier itself
 * ({@link PadSynchronizer#arrive}) after this rank's descriptor is published and before it waits for the peers': the
 * stores then overlap the peers' lines' transfer instead of holding back the publish, and a rank that finds the group
 * aborted (it throws before publishing) is not recorded as having entered.
 * {@code FlightRecorderOpsBenchmark} measures the four calls alone, {@code FlightRecorderPairedBenchmark} an
 * all-reduce on one communicator whose recorder is switched off and on between blocks ({@link FlightRecording};
 * {@code FlightRecorderCostBench} runs both and reports the paired difference).
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
public final class FlightRecorder {

    /** Where a recorded collective got to. */
    public enum State {
        /** Begun: this rank is at the entry barrier (or checking its own arguments). */
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
    private static final State[] STATES = State.values();

    private final int rank;
    private final int worldSize;
    private final String communicator;
    private final int mask;
    private static final int STRIDE = 8;
    private static final int SEQ = 0;
    private static final int COUNT = 1;
    private static final int BYTES = 2;
    private static final int MEMORY_ID = 3;
    private static final int MEMORY_OFFSET = 4;
    private static final int BEGUN = 5;
    private static final int TIMES = 6;
    private static final int SHAPE_STATE = 7;
    private static final long SHAPE_MASK = 0xffff_ffffL;

    /** Every entry's 8 longs, entry after entry (see the class comment). */
    private final long[] ring;
    private final String[] what;
    private long recorded;
    /** The sequence number of the first collective recorded since creation or {@link #restartAt}. */
    private long firstSeq;
    private long lastDumpedFailureSeq = -1;

    private FlightRecorder(int rank, int worldSize, String communicator, int capacity) {
        this.rank = rank;
        this.worldSize = worldSize;
        this.communicator = communicator;
        this.mask = capacity - 1;
        this.ring = new long[capacity * STRIDE];
        this.what = new String[capacity];
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

    /** {@return the number of collectives recorded so far (since the last {@link #restartAt}, if any)} */
    public long recorded() {
        return recorded;
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
        recorded = 0;
    }

    /**
     * Collective {@code s} begins on this rank.
     *
     * @param s         its sequence number
     * @param operation its name, a constant ("all-reduce")
     */
    public void begin(long s, String operation) {
        int i = (int) (s & mask);
        int e = i * STRIDE;
        long[] r = ring;
        r[e + SEQ] = s;
        r[e + BEGUN] = CoarseClock.millis();
        r[e + TIMES] = 0;
        r[e + SHAPE_STATE] = (long) State.SCHEDULED.ordinal() << 32; // shape 0: no arguments yet
        if (what[i] != operation) {
            what[i] = operation;
        }
        recorded++;
    }

    /**
     * This rank's arguments of collective {@code d.seq()}, once it has published them at the entry barrier (recorded
     * before the verdict, so a mismatch's dump shows what each rank passed). An entry without arguments
     * never arrived: it failed before (the group was already aborted, or its own checks threw).
     *
     * @param d this rank's descriptor
     */
    public void arguments(OpDescriptorLayout.Descriptor d) {
        int e = (int) (d.seq() & mask) * STRIDE;
        long[] r = ring;
        if (r[e + SEQ] != d.seq()) {
            return; // not begun through this recorder
        }
        int shape = d.kind().ordinal() + 1 | (d.dtype() + 1) << 8 | (d.op() + 1) << 16 | (d.algorithm() + 1) << 24;
        r[e + COUNT] = d.count();
        r[e + BYTES] = d.bufferBytes();
        r[e + MEMORY_ID] = d.memoryId();
        r[e + MEMORY_OFFSET] = d.memoryOffset();
        r[e + SHAPE_STATE] = r[e + SHAPE_STATE] & ~SHAPE_MASK | shape & SHAPE_MASK;
    }

    /**
     * Collective {@code s} passed its entry barrier: every rank arrived with the same arguments.
     *
     * @param s its sequence number
     */
    public void started(long s) {
        int e = (int) (s & mask) * STRIDE;
        long[] r = ring;
        if (r[e + SEQ] == s && state(r[e + SHAPE_STATE]) == State.SCHEDULED.ordinal()) {
            r[e + SHAPE_STATE] = withState(r[e + SHAPE_STATE], State.STARTED);
            r[e + TIMES] = r[e + TIMES] & 0xffff_ffffL | (long) sinceBegun(r[e + BEGUN]) << 32;
        }
    }

    /**
     * Collective {@code s} returned on this rank; a failed one stays failed.
     *
     * @param s its sequence number
     */
    public void completed(long s) {
        int e = (int) (s & mask) * STRIDE;
        long[] r = ring;
        if (r[e + SEQ] == s && state(r[e + SHAPE_STATE]) != State.FAILED.ordinal()) {
            r[e + SHAPE_STATE] = withState(r[e + SHAPE_STATE], State.COMPLETED);
            r[e + TIMES] = r[e + TIMES] & ~0xffff_ffffL | sinceBegun(r[e + BEGUN]);
        }
    }

    private static int state(long shapeState) {
        return (int) (shapeState >>> 32);
    }

    private static long withState(long shapeState, State state) {
        return shapeState & SHAPE_MASK | (long) state.ordinal() << 32;
    }

    /** Now, as milliseconds since {@code begun} plus 1 (0 means "not reached"), clamped to [1, Integer.MAX_VALUE]. */
    private static int sinceBegun(long begun) {
        return (int) Math.clamp(CoarseClock.millis() - begun + 1, 1L, Integer.MAX_VALUE);
    }

    /** A TIMES half back to epoch milliseconds: 0 when not reached. */
    private static long millis(long begun, long delta) {
        return delta == 0 ? 0 : begun + delta - 1;
    }

    /**
     * Collective {@code s} failed on this rank: marks it and dumps the ring (once per failed collective).
     *
     * @param s      its sequence number
     * @param reason the failure
     * @return the dump's file, or null when it was dumped already or could not be written (logged)
     */
    public Path failed(long s, Throwable reason) {
        int e = (int) (s & mask) * STRIDE;
        long[] r = ring;
        if (r[e + SEQ] == s) {
            r[e + SHAPE_STATE] = withState(r[e + SHAPE_STATE], State.FAILED);
            r[e + TIMES] = r[e + TIMES] & ~0xffff_ffffL | sinceBegun(r[e + BEGUN]);
        }
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
                + System.currentTimeMillis() + ".json";
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
        long first = Math.max(0, recorded - Math.min(n, capacity()));
        for (long k = first; k < recorded; k++) {
            int i = slotOfRecorded(k);
            if (b.length() > 0) {
                b.append(", ");
            }
            int e = i * STRIDE;
            b.append(what[i]).append('#').append(ring[e + SEQ]).append(' ').append(STATES[state(ring[e + SHAPE_STATE])]);
        }
        return b.length() == 0 ? "none" : b.toString();
    }

    /**
     * The ring as JSON: {@code {"rank", "worldSize", "communicator", "runId", "generation", "pid",
     * "dumpedAtMillis", "reason", "recorded", "ops": [...]}}, oldest op first.
     *
     * @param reason why it is dumped
     * @return the JSON text
     */
    public String toJson(String reason) {
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
        long first = Math.max(0, recorded - capacity());
        for (long k = first; k < recorded; k++) {
            int i = slotOfRecorded(k);
            if (k > first) {
                b.append(',');
            }
            int e = i * STRIDE;
            long[] r = ring;
            int sh = (int) (r[e + SHAPE_STATE] & SHAPE_MASK);
            boolean hasShape = (sh & 0xff) != 0;
            long begun = r[e + BEGUN];
            b.append("{\"seq\":").append(r[e + SEQ])
                    .append(",\"op\":\"").append(ChromeTraceWriter.jsonEscape(what[i])).append('"')
                    .append(",\"kind\":").append(hasShape ? "\"" + KINDS[(sh & 0xff) - 1].name().toLowerCase(Locale.ROOT) + "\"" : "null")
                    .append(",\"dtype\":").append(name(DType.values(), (sh >>> 8 & 0xff) - 1))
                    .append(",\"reduceOp\":").append(name(ReduceOp.values(), (sh >>> 16 & 0xff) - 1))
                    .append(",\"algorithm\":").append(name(Algorithm.values(), (sh >>> 24 & 0xff) - 1))
                    .append(",\"count\":").append(hasShape ? r[e + COUNT] : -1)
                    .append(",\"bytes\":").append(hasShape ? r[e + BYTES] : -1)
                    .append(",\"memoryId\":").append(hasShape ? r[e + MEMORY_ID] : -1)
                    .append(",\"memoryOffset\":").append(hasShape ? r[e + MEMORY_OFFSET] : 0)
                    .append(",\"state\":\"").append(STATES[state(r[e + SHAPE_STATE])]).append('"')
                    .append(",\"begunMillis\":").append(begun)
                    .append(",\"startedMillis\":").append(millis(begun, r[e + TIMES] >>> 32))
                    .append(",\"endedMillis\":").append(millis(begun, r[e + TIMES] & 0xffff_ffffL))
                    .append('}');
        }
        return b.append("]}").toString();
    }

    /** The slot of the k-th recorded collective (0-based): sequence numbers are consecutive per control plane. */
    private int slotOfRecorded(long k) {
        // the control plane numbers collectives 0, 1, 2 ... and records each: the k-th recorded one since (re)start
        return (int) ((firstSeq + k) & mask);
    }

    private static String name(Enum<?>[] values, int ordinal) {
        return ordinal < 0 || ordinal >= values.length ? "null" : "\"" + values[ordinal].name() + "\"";
    }

    private static String safe(String s) {
        return s.replaceAll("[^A-Za-z0-9._-]", "_");
    }
}
