package org.symmem4j.benchmarks;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.SymmetricMemory;
import org.symmem4j.pipeline.channel.ChannelLayout;
import org.symmem4j.pipeline.channel.StageLink;
import org.symmem4j.pipeline.schedule.PipelineShape;

/**
 * One rank's end of a ping-pong over the stage links of a 2-rank pipeline with one stage per rank
 * ({@link #SHAPE}: stage 0 on rank 0, stage 1 on rank 1), wired as {@code PipelineExecutor} wires
 * them: the activation link 0 -> 1 and the gradient link 1 -> 0 in one symmetric allocation laid out
 * by {@link ChannelLayout}.
 *
 * <p>A hand-off is what passing a stage's output to the next stage costs: the sender's
 * {@code send} (payload and header put into the receiver's symmetric memory, then a release signal),
 * the receiver's {@code receive} (acquire-wait, header check), a copy of the payload out of the slot
 * into the receiving stage's private buffer, and {@code release()}. The copy-out is how a stage that
 * keeps its input past {@code release()} consumes it (a backward pass needs the forward's input
 * later), and it makes the data cross cores inside the measurement; it is also where Open MPI's
 * {@code MPI_Recv}, the baseline, delivers a message.
 *
 * <p>Rank 0 sends its payload ({@link #roundTrip()}); rank 1 receives it, copies it out, releases the
 * slot and sends its copy back ({@link #echo()}); rank 0 receives the echo and copies it out. A round
 * trip is two hand-offs, and the echo lets rank 0 check that the bytes arrived unchanged.
 */
final class StageLinkPingPong implements AutoCloseable {

    /**
     * Two ranks, one stage each. The microbatch count only numbers the messages (each link's receiver
     * checks the microbatch in every header, so the two ranks must stay in step); links do not depend on it.
     */
    static final PipelineShape SHAPE = PipelineShape.of(2, 4);

    /**
     * One slot per link: a ping-pong never has more than one message on a link, and with one slot
     * every send also waits for (here: reads) the credit of the previous message, the back-pressure
     * check a pipeline with full links pays on every send.
     */
    static final int SLOTS = 1;

    private final Group group;
    private final SymmetricMemory links;
    private final Arena arena = Arena.ofShared();
    private final StageLink.Sender sender;
    private final StageLink.Receiver receiver;
    private final long bytes;
    /** Rank 0: the stage output it sends. Rank 1 sends its copy of what it received instead: null. */
    private final MemorySegment payload;
    /** Where this rank copies every message it receives: its stage's private input buffer. */
    private final MemorySegment received;
    private long roundTrips;

    private StageLinkPingPong(Group group, long bytes) {
        if (group.worldSize() != SHAPE.ranks()) {
            throw new IllegalArgumentException("the hand-off ping-pong runs on worldSize=" + group.worldSize()
                    + " expected=" + SHAPE.ranks() + " (one pipeline stage per rank)");
        }
        if (bytes < 1) {
            throw new IllegalArgumentException("hand-off payload bytes=" + bytes + " expected=bytes >= 1");
        }
        this.group = group;
        this.bytes = bytes;
        ChannelLayout layout = new ChannelLayout(SHAPE, SLOTS, bytes);
        this.links = SymmetricMemory.allocate(group, layout.bytesPerRank());
        try {
            int stage = group.rank(); // one stage per rank
            int peerStage = 1 - stage;
            this.sender = new StageLink.Sender(links, layout, stage, peerStage, arena);
            this.receiver = new StageLink.Receiver(links, layout, peerStage, stage);
            // page-aligned like MemcpyBenchmark's buffers, so the baseline copies the same alignment
            this.received = arena.allocate(bytes, 4096);
            if (stage == 0) {
                this.payload = arena.allocate(bytes, 4096);
                for (long i = 0; i < bytes; i++) {
                    // bytes that vary along the buffer, so a misplaced or partial copy fails the echo check
                    payload.set(ValueLayout.JAVA_BYTE, i, (byte) (i % 251 + 1));
                }
            } else {
                this.payload = null;
            }
            // every counter of the fresh links is zero on every rank before either rank posts
            links.barrier();
        } catch (RuntimeException e) {
            links.close();
            arena.close();
            throw e;
        }
    }

    /** Collective over the 2-rank group: allocates the links and this rank's private buffers. */
    static StageLinkPingPong open(Group group, long bytes) {
        return new StageLinkPingPong(group, bytes);
    }

    /** Rank 1 until rank 0 stops it: echoes as many round trips as rank 0 requests through {@code control}. */
    static void serveEchoes(Group group, long bytes) {
        try (StageLinkPingPong end = open(group, bytes);
             SymmetricMemory control = SymmetricMemory.allocate(group, 0)) {
            PeerDriver.serve(new PeerDriver.SignalChannel(control), end::echo);
        }
    }

    /** Rank 0: one round trip, two hand-offs. */
    void roundTrip() {
        int microbatch = nextMicrobatch();
        sender.send(microbatch, payload);
        MemorySegment echoed = receiver.receive(microbatch);
        MemorySegment.copy(echoed, 0, received, 0, echoed.byteSize());
        receiver.release(); // the stage has its copy; the slot may be overwritten
    }

    /** Rank 1: receives rank 0's payload, copies it out, gives the slot back, and sends the copy back. */
    void echo() {
        int microbatch = nextMicrobatch();
        MemorySegment input = receiver.receive(microbatch);
        MemorySegment.copy(input, 0, received, 0, input.byteSize());
        receiver.release();
        sender.send(microbatch, received);
    }

    /**
     * Rank 0, after a round trip: throws unless the echo copied out last is byte for byte the payload
     * sent, that is, both hand-offs delivered every byte.
     */
    void requireEchoMatchesPayload() {
        if (payload == null) {
            throw new IllegalStateException("only rank 0 sends a payload and checks its echo; this is " + this);
        }
        long at = received.mismatch(payload);
        if (at >= 0) {
            throw new IllegalStateException("hand-off ping-pong delivered wrong bytes: roundTrips=" + roundTrips
                    + " bytes=" + bytes + " firstMismatchAt=" + at + " expected="
                    + payload.get(ValueLayout.JAVA_BYTE, at) + " found="
                    + received.get(ValueLayout.JAVA_BYTE, at)
                    + " (the stage links or the copy-out lost data)");
        }
    }

    private int nextMicrobatch() {
        return (int) (roundTrips++ % SHAPE.microbatches());
    }

    /** Collective: frees the links; both ranks must have run the same number of round trips. */
    @Override
    public void close() {
        try {
            links.close();
        } finally {
            arena.close();
        }
    }

    @Override
    public String toString() {
        return "stage-link ping-pong rank " + group.rank() + " bytes=" + bytes;
    }
}
