package org.symmem4j.benchmarks;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.VarHandle;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;

/**
 * The pacing counters of {@link RingFillBenchmark}, in a small file in {@code /dev/shm} that the producer's and the
 * consumer's processes both map: messages sent (written by the producer), messages consumed (written by the consumer)
 * and a stop flag, each on a 128-byte line of its own (no false sharing, and none through the adjacent-line
 * prefetcher), then the fill level and the batch, written once by the producer before the consumer starts. The
 * counters are written with release and read with acquire, so that a count read covers the messages it counts. The
 * same file paces every ring kind: nothing of a ring's own layout is read.
 */
final class FillPacer implements AutoCloseable {

    private static final long SENT = 0;
    private static final long CONSUMED = 128;
    private static final long STOP = 256;
    private static final long TARGET = 384;
    private static final long BATCH = 392;
    private static final long BYTES = 512;
    private static final VarHandle LONG = ValueLayout.JAVA_LONG.varHandle();

    private final Arena arena;
    private final MemorySegment words;

    private FillPacer(Arena arena, MemorySegment words) {
        this.arena = arena;
        this.words = words;
    }

    /** The pacing file beside a ring's files. */
    static Path path(Path files) {
        return Path.of(files + "-pace");
    }

    /** Rank 0: creates the file, zeroed, with the fill level and the batch, before the consumer opens it. */
    static FillPacer create(Path file, long target, long batch) throws IOException {
        Files.deleteIfExists(file);
        FillPacer pacer = map(file, true);
        LONG.set(pacer.words, TARGET, target);
        LONG.set(pacer.words, BATCH, batch);
        return pacer;
    }

    /** Rank 1: maps the file rank 0 created (the peer starts after it). */
    static FillPacer open(Path file) throws IOException {
        if (!Files.isRegularFile(file) || Files.size(file) != BYTES) {
            throw new IOException("ring fill pacing file " + file + ": expected a file of " + BYTES + " bytes created"
                    + " by rank 0, found " + (Files.exists(file) ? Files.size(file) + " bytes" : "none") + " (fix: start"
                    + " the peer through RingFillBenchmark, which creates it first)");
        }
        return map(file, false);
    }

    private static FillPacer map(Path file, boolean create) throws IOException {
        Arena arena = Arena.ofShared();
        try (FileChannel ch = create
                ? FileChannel.open(file, StandardOpenOption.CREATE_NEW, StandardOpenOption.READ, StandardOpenOption.WRITE)
                : FileChannel.open(file, StandardOpenOption.READ, StandardOpenOption.WRITE)) {
            if (create) {
                ch.truncate(0);
                ch.write(java.nio.ByteBuffer.allocate((int) BYTES));
            }
            return new FillPacer(arena, ch.map(FileChannel.MapMode.READ_WRITE, 0, BYTES, arena));
        } catch (IOException | RuntimeException e) {
            arena.close();
            throw e;
        }
    }

    /** Rank 0: removes the file, if there is one. */
    static void delete(Path file) throws IOException {
        Files.deleteIfExists(file);
    }

    long target() {
        return (long) LONG.get(words, TARGET);
    }

    long batch() {
        return (long) LONG.get(words, BATCH);
    }

    /** {@return the producer's published count} (acquire: the messages it counts are committed) */
    long sent() {
        return (long) LONG.getAcquire(words, SENT);
    }

    /** Producer: publishes its count (release, after the messages' commits). */
    void publishSent(long count) {
        LONG.setRelease(words, SENT, count);
    }

    /** {@return the consumer's published count} (acquire: the room of the messages it counts is free) */
    long consumed() {
        return (long) LONG.getAcquire(words, CONSUMED);
    }

    /** Consumer: publishes its count (release, after the batch is read and its room freed). */
    void publishConsumed(long count) {
        LONG.setRelease(words, CONSUMED, count);
    }

    /** Producer: tells the consumer to drain up to the last published count and leave. */
    void stop() {
        LONG.setRelease(words, STOP, 1L);
    }

    /** {@return whether the producer has stopped} (acquire: its final count is published before) */
    boolean stopped() {
        return (long) LONG.getAcquire(words, STOP) != 0;
    }

    @Override
    public void close() {
        arena.close();
    }
}
