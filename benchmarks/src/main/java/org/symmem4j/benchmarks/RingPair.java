package org.symmem4j.benchmarks;

import java.io.IOException;
import java.io.RandomAccessFile;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.MappedByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;

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
 * ring buffers over files in {@code /dev/shm} that both processes map, the way Agrona's users share them.
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

    /** The ring kinds measured. */
    public enum Kind {
        SYMMEM_ONE_TO_ONE, SYMMEM_MANY_TO_ONE, AGRONA_ONE_TO_ONE, AGRONA_MANY_TO_ONE;

        boolean agrona() {
            return name().startsWith("AGRONA");
        }
    }

    /** Sends {@code length} bytes of a fixed source buffer as a message of {@code type}; false when full. */
    abstract boolean send(int type, int length);

    /** Hands every message in the inbound ring (up to a limit) to the sink; returns how many. */
    abstract int receive();

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
        return kind.agrona() ? new Agrona(kind, group.rank(), capacity, files, sink) : new Symmem(kind, group, capacity, sink);
    }

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
        private final MemorySegment src;
        private final org.symmem4j.state.MessageHandler handler;

        Symmem(Kind kind, Group group, int capacity, Sink sink) {
            int me = group.rank();
            SymmetricRingBuffer toRank1 = kind == Kind.SYMMEM_ONE_TO_ONE
                    ? SymmetricRingBuffer.oneToOne(group, 0, 1, capacity) : SymmetricRingBuffer.manyToOne(group, 1, capacity);
            SymmetricRingBuffer toRank0 = kind == Kind.SYMMEM_ONE_TO_ONE
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
            return out.offer(type, src, 0, length);
        }

        @Override
        int receive() {
            return in.poll(handler, 64);
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
        private final UnsafeBuffer src;
        private final org.agrona.concurrent.MessageHandler handler;

        Agrona(Kind kind, int rank, int capacity, Path files, Sink sink) throws IOException {
            out = ring(kind, map(file(files, 1 - rank), capacity));
            in = ring(kind, map(file(files, rank), capacity));
            src = new UnsafeBuffer(new byte[out.maxMsgLength()]);
            handler = (type, buf, index, len) -> {
                buf.getByte(index);
                sink.accept(type, len);
            };
        }

        private static RingBuffer ring(Kind kind, UnsafeBuffer buffer) {
            return kind == Kind.AGRONA_ONE_TO_ONE ? new OneToOneRingBuffer(buffer) : new ManyToOneRingBuffer(buffer);
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
            return out.write(type, src, 0, length);
        }

        @Override
        int receive() {
            return in.read(handler, 64);
        }

        @Override
        public void close() {
            // the mappings go with the buffers; rank 0 deletes the files
        }
    }

    /**
     * Rank 1's side: drains DRAIN messages, answers each ECHO with an ECHO of the same length, returns at STOP.
     *
     * @param kind     which rings
     * @param group    the 2-rank group
     * @param capacity ring bytes
     * @param files    Agrona's ring files
     */
    static void serve(Kind kind, Group group, int capacity, Path files) throws IOException {
        boolean[] stop = {false};
        RingPair[] self = new RingPair[1];
        try (RingPair pair = open(kind, group, capacity, files, (type, length) -> {
            if (type == ECHO) {
                while (!self[0].send(ECHO, length)) {
                    Thread.onSpinWait();
                }
            } else if (type == STOP) {
                stop[0] = true;
            }
        })) {
            self[0] = pair;
            group.allGatherBytes("ring-bench-ready", new byte[0]);
            while (!stop[0]) {
                if (pair.receive() == 0) {
                    Thread.onSpinWait();
                }
            }
            group.allGatherBytes("ring-bench-done", new byte[0]);
        }
    }
}
