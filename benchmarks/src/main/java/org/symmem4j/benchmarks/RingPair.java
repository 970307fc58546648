package org.symmem4j.benchmarks;

import java.io.IOException;
import java.io.RandomAccessFile;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.MappedByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;

import io.aeron.Aeron;
import io.aeron.ChannelUriStringBuilder;
import io.aeron.CommonContext;
import io.aeron.Publication;
import io.aeron.Subscription;
import io.aeron.driver.MediaDriver;
import io.aeron.driver.ThreadingMode;
import io.aeron.logbuffer.FragmentHandler;
import org.agrona.IoUtil;
import org.agrona.concurrent.BusySpinIdleStrategy;
import org.agrona.concurrent.UnsafeBuffer;
import org.agrona.concurrent.ringbuffer.ManyToOneRingBuffer;
import org.agrona.concurrent.ringbuffer.OneToOneRingBuffer;
import org.agrona.concurrent.ringbuffer.RingBuffer;
import org.agrona.concurrent.ringbuffer.RingBufferDescriptor;
import org.symmem4j.parallel.Group;
import org.symmem4j.state.SymmetricRingBuffer;

/**
 * Two rings between rank 0 (the JMH fork) and rank 1 (a {@link BenchPeer}): {@code out} carries this rank's
 * messages to the other, {@code in} the other's to this one; symmem4j's {@link SymmetricRingBuffer} or Agrona's
 * ring buffers over files in {@code /dev/shm} that both processes map, the way Agrona's users share them, or Aeron
 * IPC publications and subscriptions through a media driver embedded in rank 0 ({@link #launchAeronDriver}).
 * {@link RingBenchmark} measures through it; every kind is driven by the same calls.
 */
public abstract class RingPair implements AutoCloseable {

    /** Message types of the benchmark protocol. */
    static final int DRAIN = 1;
    static final int ECHO = 2;
    static final int STOP = 3;

    /** What a received message is handed to: its type and length (the first byte is read, as a user would). */
    interface Sink {
        void accept(int type, int length);
    }

    /**
     * The ring kinds measured, in the order of the summary table. Aeron's one-to-one analogue is an
     * {@code ExclusivePublication} (one producer, no atomic claim), its many-to-one one a concurrent
     * {@code Publication} (producers claim by an atomic add). The {@code _CLAIM} kinds write the same bytes from the
     * same source array, in place: symmem4j's {@code tryClaim(type, length)} then {@code Claim.commit()}, Agrona's
     * {@code tryClaim(type, length)}, {@code putBytes} into its buffer, then {@code commit(index)}; the others copy
     * them in through {@code offer} / {@code write}.
     */
    public enum Kind {
        SYMMEM_ONE_TO_ONE, SYMMEM_ONE_TO_ONE_CLAIM, AGRONA_ONE_TO_ONE, AGRONA_ONE_TO_ONE_CLAIM, AERON_ONE_TO_ONE,
        SYMMEM_MANY_TO_ONE, SYMMEM_MANY_TO_ONE_CLAIM, AGRONA_MANY_TO_ONE, AGRONA_MANY_TO_ONE_CLAIM, AERON_MANY_TO_ONE;

        boolean agrona() {
            return name().startsWith("AGRONA");
        }

        boolean aeron() {
            return name().startsWith("AERON");
        }

        boolean symmem() {
            return name().startsWith("SYMMEM");
        }

        /** {@return whether it writes in place through a claim} */
        boolean claim() {
            return name().endsWith("_CLAIM");
        }

        /** {@return whether it is one of the one-to-one kinds} */
        boolean oneToOne() {
            return !name().contains("MANY_TO_ONE");
        }

        /** {@return who made it and how it is written: "symmem4j offer", "Agrona tryClaim", "Aeron offer"} */
        String maker() {
            return (agrona() ? "Agrona" : aeron() ? "Aeron" : "symmem4j") + (claim() ? " tryClaim"
                    : agrona() ? " write" : " offer");
        }
    }

    /** Aeron stream ids: messages to rank r travel on {@code AERON_STREAM + r}. */
    static final int AERON_STREAM = 1000;

    /**
     * Aeron's term buffer length for the benchmark's IPC publications, from {@code symmem4j.bench.aeronTermLength}
     * (bytes, a power of two from 64 KiB to 1 GiB); default 1 MiB, the rings' capacity, so that every anchor cycles
     * through the same bytes (Aeron's own IPC default, 64 MiB, streams through memory that no cache holds).
     */
    static int aeronTermLength() {
        String value = System.getProperty("symmem4j.bench.aeronTermLength", Integer.toString(RingBenchmark.CAPACITY));
        int length;
        try {
            length = Integer.parseInt(value.trim());
        } catch (NumberFormatException e) {
            length = -1;
        }
        if (length < 64 * 1024 || Integer.bitCount(length) != 1) {
            throw new IllegalArgumentException("symmem4j.bench.aeronTermLength=" + value + " expected a power of two"
                    + " of bytes from 65536 to 1073741824 (fix: pass e.g. -Dsymmem4j.bench.aeronTermLength=1048576)");
        }
        return length;
    }

    /**
     * Whether the benchmark's spinning loops pause between two empty polls ({@code Thread.onSpinWait()}, x86's
     * {@code PAUSE}: Agrona's {@code BusySpinIdleStrategy}, the default) or poll again at once (Agrona's
     * {@code NoOpIdleStrategy}: {@code -Dsymmem4j.bench.ring.idle=noop}). Every ring and both processes run under the
     * same one (the peer inherits the property). A pause delays the detection of a message by up to its own latency
     * (some 40 to 140 cycles, by the core), which in a round trip both sides pay and which is a large share of a
     * sub-microsecond trip.
     */
    static final boolean PAUSE_WHEN_IDLE = pauseWhenIdle(System.getProperty("symmem4j.bench.ring.idle"));

    static boolean pauseWhenIdle(String value) {
        if (value == null || value.isBlank() || value.trim().equals("pause")) {
            return true;
        }
        if (value.trim().equals("noop")) {
            return false;
        }
        throw new IllegalArgumentException("ring benchmark idle strategy (symmem4j.bench.ring.idle, RingPairedSuite"
                + " --idle)=" + value + " expected pause or noop (fix: noop to poll again at once, pause or nothing"
                + " for Thread.onSpinWait)");
    }

    /** What a spinning loop of the ring benchmarks does after an empty poll or a full ring: see {@link #PAUSE_WHEN_IDLE}. */
    static void idle() {
        if (PAUSE_WHEN_IDLE) {
            Thread.onSpinWait();
        }
    }

    /** Sends {@code length} bytes of a fixed source buffer as a message of {@code type}; false when full. */
    abstract boolean send(int type, int length);

    /** The most messages one {@link #receive()} hands out: the consumer's batch, the same for every kind. */
    static final int RECEIVE_LIMIT = 64;

    /** Hands every message in the inbound ring, up to {@link #RECEIVE_LIMIT}, to the sink; returns how many. */
    final int receive() {
        return receive(RECEIVE_LIMIT);
    }

    /**
     * Hands up to {@code limit} messages of the inbound ring to the sink in one poll ({@code poll(handler, limit)},
     * Agrona's {@code read(handler, limit)}, Aeron's {@code poll(handler, limit)}); returns how many.
     */
    abstract int receive(int limit);

    @Override
    public abstract void close();

    /**
     * Collective with the peer for the symmem4j kinds: the two rings.
     *
     * @param kind     which rings
     * @param group    the 2-rank group
     * @param capacity ring bytes
     * @param files    where Agrona's two ring files are ({@code <files>-0} read by rank 0, {@code <files>-1} by rank 1)
     * @param sink     receives each inbound message
     */
    static RingPair open(Kind kind, Group group, int capacity, Path files, Sink sink) throws IOException {
        if (kind.aeron()) {
            return new AeronIpc(kind, group.rank(), files, sink);
        }
        return kind.agrona() ? new Agrona(kind, group.rank(), capacity, files, sink) : new Symmem(kind, group, capacity, sink);
    }

    /**
     * Rank 0: starts Aeron's media driver embedded in this process, its directory {@code dir} (under
     * {@code /dev/shm}), in the configuration that gives Aeron's IPC its best numbers: {@link ThreadingMode#SHARED}
     * (the conductor, sender and receiver in one thread: IPC needs only the conductor, which moves each
     * publication's limit as its subscriber reads) with a busy-spinning idle strategy, so that a back-pressured
     * publisher sees room as soon as the subscriber has read; term buffers allocated whole (not sparse) so that no page
     * fault lands in a measurement; an IPC MTU of 8 KiB so that a 4 KiB message is one frame (Aeron's default, 1408
     * bytes, would fragment it). The driver thread is pinned to the third CPU of {@code symmem4j.bench.cpus}, if one is
     * named ({@link BenchCpus}). Close it after every client has closed: it deletes its directory.
     */
    static MediaDriver launchAeronDriver(Path dir) {
        MediaDriver.Context ctx = new MediaDriver.Context()
                .aeronDirectoryName(dir.toString())
                .dirDeleteOnStart(true)
                .dirDeleteOnShutdown(true)
                .threadingMode(ThreadingMode.SHARED)
                .sharedIdleStrategy(new BusySpinIdleStrategy())
                .sharedThreadFactory(task -> new Thread(() -> {
                    BenchCpus.pinCurrentThread(BenchCpus.AERON_DRIVER, "Aeron's media driver");
                    task.run();
                }, "aeron-driver"))
                .termBufferSparseFile(false)
                .ipcTermBufferLength(aeronTermLength())
                .ipcMtuLength(AERON_MTU);
        return MediaDriver.launchEmbedded(ctx);
    }

    /** Rank 0: removes what is left of an Aeron directory (the driver deletes it at close; a failed start may not). */
    static void deleteAeronDir(Path dir) {
        IoUtil.delete(dir.toFile(), true);
    }

    /** IPC frame size: a 4 KiB message and its 32-byte header in one frame. */
    static final int AERON_MTU = 8192;

    /** Rank 0: creates Agrona's two zeroed ring files before the peer maps them. */
    static void createAgronaFiles(Path files, int capacity) throws IOException {
        for (int r = 0; r < 2; r++) {
            try (RandomAccessFile f = new RandomAccessFile(file(files, r).toFile(), "rw")) {
                f.setLength(0);
                f.setLength(capacity + RingBufferDescriptor.TRAILER_LENGTH);
            }
        }
    }

    /** Rank 0: removes Agrona's ring files. */
    static void deleteAgronaFiles(Path files) throws IOException {
        for (int r = 0; r < 2; r++) {
            Files.deleteIfExists(file(files, r));
        }
    }

    private static Path file(Path files, int consumer) {
        return Path.of(files + "-" + consumer);
    }

    private static final class Symmem extends RingPair {
        private final SymmetricRingBuffer out;
        private final SymmetricRingBuffer in;
        /** Whether messages are written in place through a claim. */
        private final boolean claim;
        private final MemorySegment src;
        private final org.symmem4j.state.MessageHandler handler;

        Symmem(Kind kind, Group group, int capacity, Sink sink) {
            int me = group.rank();
            claim = kind.claim();
            SymmetricRingBuffer toRank1 = kind.oneToOne()
                    ? SymmetricRingBuffer.oneToOne(group, 0, 1, capacity) : SymmetricRingBuffer.manyToOne(group, 1, capacity);
            SymmetricRingBuffer toRank0 = kind.oneToOne()
                    ? SymmetricRingBuffer.oneToOne(group, 1, 0, capacity) : SymmetricRingBuffer.manyToOne(group, 0, capacity);
            out = me == 0 ? toRank1 : toRank0;
            in = me == 0 ? toRank0 : toRank1;
            src = MemorySegment.ofArray(new byte[out.maxPayload()]);
            handler = (type, buf, off, len) -> {
                buf.get(ValueLayout.JAVA_BYTE, off);
                sink.accept(type, len);
            };
        }

        @Override
        boolean send(int type, int length) {
            if (!claim) {
                return out.offer(type, src, 0, length);
            }
            SymmetricRingBuffer.Claim room = out.tryClaim(type, length);
            if (room == null) {
                return false;
            }
            MemorySegment.copy(src, 0, room.buffer(), room.offset(), length);
            room.commit();
            return true;
        }

        @Override
        int receive(int limit) {
            return in.poll(handler, limit);
        }

        @Override
        public void close() {
            // collective, in creation order on both ranks
            if (out.consumer() == 1) {
                out.close();
                in.close();
            } else {
                in.close();
                out.close();
            }
        }
    }

    private static final class Agrona extends RingPair {
        private final RingBuffer out;
        private final RingBuffer in;
        /** Whether messages are written in place through a claim. */
        private final boolean claim;
        private final UnsafeBuffer src;
        private final org.agrona.concurrent.MessageHandler handler;

        Agrona(Kind kind, int rank, int capacity, Path files, Sink sink) throws IOException {
            claim = kind.claim();
            out = ring(kind, map(file(files, 1 - rank), capacity));
            in = ring(kind, map(file(files, rank), capacity));
            src = new UnsafeBuffer(new byte[out.maxMsgLength()]);
            handler = (type, buf, index, len) -> {
                buf.getByte(index);
                sink.accept(type, len);
            };
        }

        private static RingBuffer ring(Kind kind, UnsafeBuffer buffer) {
            return kind.oneToOne() ? new OneToOneRingBuffer(buffer) : new ManyToOneRingBuffer(buffer);
        }

        private static UnsafeBuffer map(Path file, int capacity) throws IOException {
            try (FileChannel ch = FileChannel.open(file, java.nio.file.StandardOpenOption.READ,
                    java.nio.file.StandardOpenOption.WRITE)) {
                MappedByteBuffer mapped = ch.map(FileChannel.MapMode.READ_WRITE, 0,
                        capacity + RingBufferDescriptor.TRAILER_LENGTH);
                return new UnsafeBuffer(mapped);
            }
        }

        @Override
        boolean send(int type, int length) {
            if (!claim) {
                return out.write(type, src, 0, length);
            }
            int index = out.tryClaim(type, length);
            if (index < 0) {
                return false; // RingBuffer.INSUFFICIENT_CAPACITY
            }
            out.buffer().putBytes(index, src, 0, length);
            out.commit(index);
            return true;
        }

        @Override
        int receive(int limit) {
            return in.read(handler, limit);
        }

        @Override
        public void close() {
            // the mappings go with the buffers; rank 0 deletes the files
        }
    }

    /**
     * Aeron IPC: a publication to the other rank's stream and a subscription to this rank's, through the media
     * driver in {@code dir}. Aeron frames carry no message type, so the type travels in the payload's first 4 bytes
     * (the handler reads it, as a user reads the first field of a message); a message shorter than 4 bytes (STOP)
     * is sent as 4.
     */
    private static final class AeronIpc extends RingPair {
        private static final long CONNECT_TIMEOUT_NANOS = 30_000_000_000L;
        private final Aeron aeron;
        private final Publication out;
        private final Subscription in;
        private final UnsafeBuffer src;
        private final FragmentHandler handler;

        AeronIpc(Kind kind, int rank, Path dir, Sink sink) {
            aeron = Aeron.connect(new Aeron.Context().aeronDirectoryName(dir.toString()));
            try {
                String channel = new ChannelUriStringBuilder().media(CommonContext.IPC_MEDIA).build();
                int toOther = AERON_STREAM + 1 - rank;
                out = kind == Kind.AERON_ONE_TO_ONE ? aeron.addExclusivePublication(channel, toOther)
                        : aeron.addPublication(channel, toOther);
                in = aeron.addSubscription(channel, AERON_STREAM + rank);
                if (out.maxPayloadLength() < 4096) {
                    throw new IllegalStateException("Aeron IPC publication: maxPayloadLength=" + out.maxPayloadLength()
                            + " expected >= 4096 so that a 4 KiB message is one frame (fix: ipcMtuLength >= "
                            + (4096 + 32) + ")");
                }
                long deadline = System.nanoTime() + CONNECT_TIMEOUT_NANOS;
                while (!out.isConnected() || !in.isConnected()) {
                    if (System.nanoTime() - deadline > 0) {
                        throw new IllegalStateException("Aeron IPC: rank " + rank + " found no peer on its streams after"
                                + " 30 s (publication connected=" + out.isConnected() + ", subscription connected="
                                + in.isConnected() + "; fix: check bench-peer.log for the peer's error)");
                    }
                    idle();
                }
            } catch (RuntimeException | Error e) {
                aeron.close();
                throw e;
            }
            src = new UnsafeBuffer(new byte[out.maxMessageLength()]);
            handler = (buffer, offset, length, header) -> sink.accept(buffer.getInt(offset), length);
        }

        @Override
        boolean send(int type, int length) {
            src.putInt(0, type);
            long result = out.offer(src, 0, Math.max(Integer.BYTES, length));
            if (result > 0) {
                return true;
            }
            if (result == Publication.BACK_PRESSURED || result == Publication.ADMIN_ACTION) {
                return false;
            }
            throw new IllegalStateException("Aeron IPC offer: result=" + result + " (" + (result == Publication.CLOSED
                    ? "closed" : result == Publication.NOT_CONNECTED ? "the peer's subscription is gone"
                    : "the publication's maximum position is reached") + "), expected a position or back-pressure"
                    + " (fix: check bench-peer.log for the peer's error)");
        }

        @Override
        int receive(int limit) {
            return in.poll(handler, limit);
        }

        @Override
        public void close() {
            aeron.close(); // its publication and subscription with it
        }
    }

    /**
     * The peer's variant argument of {@link RingBenchmark}: one kind (Aeron's too), or {@code KIND+AGAINST} in paired
     * mode ({@link RingFillBenchmark#parseVariant}).
     */
    static java.util.List<Kind> lanes(String variant) {
        return variant.contains("+") ? RingFillBenchmark.parseVariant(variant) : java.util.List.of(Kind.valueOf(variant));
    }

    /**
     * Whether the peer of a paired round trip polls the lane that delivered last, and the others only every
     * {@link #OTHER_LANES_EVERY} empty polls ({@code active}, the default), or every lane in turn on every pass
     * ({@code all}, {@code -Dsymmem4j.bench.ring.peerLanes=all}, the order before 2026-11-30). In turn, the ring under
     * measurement shares each pass of the spinning loop with the other ring's empty poll, in a fixed order: lane 0's
     * messages wait behind lane 1's empty poll and its pause, lane 1's behind lane 0's, and the phase at which a
     * message meets the loop differs between the lanes. A block's messages all go to one lane, so polling that lane
     * alone serves each ring as an unpaired peer does.
     */
    static final boolean PEER_POLLS_ACTIVE_LANE = peerPollsActiveLane(System.getProperty("symmem4j.bench.ring.peerLanes"));

    /** Empty polls of the active lane between two polls of the other lanes (a lane switch waits at most this many). */
    static final int OTHER_LANES_EVERY = 64;

    static boolean peerPollsActiveLane(String value) {
        if (value == null || value.isBlank() || value.trim().equals("active")) {
            return true;
        }
        if (value.trim().equals("all")) {
            return false;
        }
        throw new IllegalArgumentException("ring benchmark peer's lanes (symmem4j.bench.ring.peerLanes)=" + value
                + " expected active or all (fix: all to poll every lane on every pass, active or nothing for the lane"
                + " that delivered last)");
    }

    /**
     * Rank 1's side: drains DRAIN messages, answers each ECHO with an ECHO of the same length on the rings it came on,
     * returns once every ring had its STOP. One ring, or two in {@link RingBenchmark}'s paired mode (their files under
     * {@link RingFillBenchmark#laneFiles}), polled as {@link #PEER_POLLS_ACTIVE_LANE} says.
     *
     * @param kinds    which rings, one lane each
     * @param group    the 2-rank group
     * @param capacity ring bytes
     * @param files    Agrona's ring files (Aeron's directory), or the prefix of the lanes' files
     */
    static void serve(java.util.List<Kind> kinds, Group group, int capacity, Path files) throws IOException {
        BenchCpus.pinCurrentThread(BenchCpus.CONSUMER, "the peer's consumer thread");
        int n = kinds.size();
        boolean[] stop = new boolean[n];
        RingPair[] self = new RingPair[n];
        try {
            for (int i = 0; i < n; i++) {
                int lane = i;
                self[i] = open(kinds.get(i), group, capacity, n == 1 ? files : RingFillBenchmark.laneFiles(files, i),
                        (type, length) -> {
                            if (type == ECHO) {
                                while (!self[lane].send(ECHO, length)) {
                                    idle();
                                }
                            } else if (type == STOP) {
                                stop[lane] = true;
                            }
                        });
            }
            group.allGatherBytes("ring-bench-ready", new byte[0]);
            if (n > 1 && PEER_POLLS_ACTIVE_LANE) {
                serveActiveLane(self, stop);
            } else {
                int stopped = 0;
                while (stopped < n) {
                    int got = 0;
                    stopped = 0;
                    for (int i = 0; i < n; i++) {
                        got += self[i].receive();
                        stopped += stop[i] ? 1 : 0;
                    }
                    if (got == 0) {
                        idle();
                    }
                }
            }
            group.allGatherBytes("ring-bench-done", new byte[0]);
        } finally {
            for (RingPair pair : self) {
                if (pair != null) {
                    pair.close(); // collective, in rank 0's order
                }
            }
        }
    }

    /**
     * The paired peer's loop ({@link #PEER_POLLS_ACTIVE_LANE}): polls the lane that delivered last, pausing after each
     * empty poll as an unpaired peer does; every {@link #OTHER_LANES_EVERY} empty polls it polls the other lanes once,
     * and a lane that delivers becomes the active one. Returns once every lane had its STOP.
     */
    static void serveActiveLane(RingPair[] lanes, boolean[] stop) {
        int active = 0;
        int emptyPolls = 0;
        while (true) {
            if (lanes[active].receive() > 0) {
                emptyPolls = 0;
                continue;
            }
            if (++emptyPolls < OTHER_LANES_EVERY) {
                idle();
                continue;
            }
            emptyPolls = 0;
            boolean delivered = false;
            int stopped = 0;
            for (int i = 0; i < lanes.length; i++) {
                if (i != active && lanes[i].receive() > 0) {
                    active = i;
                    delivered = true;
                }
                stopped += stop[i] ? 1 : 0;
            }
            if (stopped == lanes.length) {
                return;
            }
            if (!delivered) {
                idle();
            }
        }
    }
}
