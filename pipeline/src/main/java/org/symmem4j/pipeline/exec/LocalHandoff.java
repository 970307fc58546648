package org.symmem4j.pipeline.exec;

import java.lang.foreign.MemorySegment;
import java.util.ArrayDeque;
import org.symmem4j.parallel.Invariants;

/**
 * A hand-off between two stages of the same rank (a one-rank pipeline): a FIFO of messages, each copied into a
 * buffer that the hand-off reuses once the receiving stage has read it. The copy is needed because a stage may
 * reuse its output buffer for its next call ({@link StageCompute}); the buffer is not, so in steady state a
 * hand-off allocates nothing. Single-threaded, as the executor.
 */
final class LocalHandoff {

    /** One reusable buffer: 8-byte aligned (a long[]), so a stage can read floats or doubles from it. */
    private static final class Buffer {
        final MemorySegment whole;
        /** The last message's bytes within {@link #whole}; remade only when the length changes. */
        MemorySegment message;

        Buffer(long capacity) {
            this.whole = MemorySegment.ofArray(new long[Math.toIntExact((capacity + 7) / 8)]);
        }

        MemorySegment fill(MemorySegment payload) {
            long bytes = payload.byteSize();
            if (message == null || message.byteSize() != bytes) {
                message = whole.asSlice(0, bytes);
            }
            message.copyFrom(payload);
            return message;
        }
    }

    /** Capacity of a new buffer at least: the executor's largest message, so that one buffer fits every message. */
    private final long minimumCapacity;
    private final ArrayDeque<Buffer> queued = new ArrayDeque<>();
    private final ArrayDeque<Buffer> spare = new ArrayDeque<>();
    /** The message the receiving stage is reading, or null. */
    private Buffer held;

    LocalHandoff(long minimumCapacity) {
        this.minimumCapacity = minimumCapacity;
    }

    /** Copies {@code payload} into a spare buffer (a new one only when none is spare or large enough) and queues it. */
    void send(MemorySegment payload) {
        long bytes = payload.byteSize();
        Buffer buffer = spare.pollFirst();
        if (buffer == null || buffer.whole.byteSize() < bytes) {
            buffer = new Buffer(Math.max(bytes, minimumCapacity)); // a too-small spare is dropped
        }
        buffer.fill(payload);
        queued.addLast(buffer);
    }

    /** The oldest queued message, valid until {@link #release()}. */
    MemorySegment receive() {
        if (held != null) {
            throw Invariants.violated("receive on a same-rank hand-off before release() of the previous message");
        }
        held = queued.removeFirst();
        return held.message;
    }

    /** The receiving stage has read the message: its buffer is spare again. */
    void release() {
        spare.addLast(held);
        held = null;
    }
}
