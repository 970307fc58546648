package org.symmem4j.pipeline.exec;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.lang.management.ManagementFactory;
import java.time.Duration;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.SymmetricMemory;
import org.symmem4j.parallel.group.InJvmWorld;
import org.symmem4j.pipeline.channel.ChannelLayout;
import org.symmem4j.pipeline.channel.LinkPlan;
import org.symmem4j.pipeline.channel.StageLink;
import org.symmem4j.pipeline.schedule.PipelineShape;
import org.symmem4j.pipeline.schedule.Schedule;
import org.symmem4j.pipeline.schedule.ScheduleGenerators;

/**
 * A microbatch hand-off allocates nothing in steady state: a link's receive gives the slot in place (no view object
 * per message), and a same-rank hand-off copies into buffers the executor reuses (no array per message). What a step
 * still allocates is its timeline (a few objects per action), not a copy of any message, so a step of a stage that
 * itself allocates nothing stays under one message's size. Measured in allocated bytes of the rank's thread
 * ({@code com.sun.management.ThreadMXBean}), never in time; the best of a few rounds, so a JIT that has not finished
 * compiling (on a loaded machine) does not count, while an allocation made per message shows in every round.
 */
class HandoffAllocationTest {

    private static final GroupOptions OPTIONS = GroupOptions.defaults().withTimeout(Duration.ofSeconds(60));
    private static final int MESSAGE_BYTES = 16 << 10;
    private static final int ROUNDS = 8;

    private static com.sun.management.ThreadMXBean threads() {
        return (com.sun.management.ThreadMXBean) ManagementFactory.getThreadMXBean();
    }

    /** Both ends of a link, in both directions at once: no bytes per message once compiled. */
    @Test
    void aLinkRoundTripAllocatesNothingPerMessage() {
        PipelineShape shape = PipelineShape.of(2, 8);
        ChannelLayout layout = new ChannelLayout(shape, 3, 256);
        int warmup = 30_000;
        int measured = 5_000;
        List<Double> perRank = InJvmWorld.runOnEveryRank(2, OPTIONS, group -> {
            try (SymmetricMemory memory = SymmetricMemory.allocate(group, layout.bytesPerRank());
                 Arena arena = Arena.ofConfined()) {
                memory.barrier();
                int me = group.rank();
                StageLink.Sender sender = new StageLink.Sender(memory, layout, me, 1 - me, arena);
                StageLink.Receiver receiver = new StageLink.Receiver(memory, layout, 1 - me, me);
                MemorySegment payload = arena.allocate(256, 64);
                long checksum = exchange(sender, receiver, payload, 0, warmup);
                double best = Double.MAX_VALUE;
                // every rank runs every round (no early stop): a rank that stopped alone would leave its peer waiting
                for (int round = 0; round < ROUNDS; round++) {
                    long before = threads().getCurrentThreadAllocatedBytes();
                    checksum += exchange(sender, receiver, payload, warmup + (long) round * measured, measured);
                    best = Math.min(best, (threads().getCurrentThreadAllocatedBytes() - before) / (double) measured);
                }
                assertTrue(checksum != Long.MIN_VALUE);
                return best;
            }
        });
        System.out.printf("link round trip: %s bytes per message by rank%n", perRank);
        for (int rank = 0; rank < perRank.size(); rank++) {
            assertTrue(perRank.get(rank) < 1.0, "rank " + rank + " allocated " + perRank.get(rank)
                    + " bytes per message sent and received (expected none in steady state)");
        }
    }

    /** Sends and receives {@code count} messages; returns a sum of what arrived, so nothing is optimised away. */
    private static long exchange(StageLink.Sender sender, StageLink.Receiver receiver, MemorySegment payload, long first,
                                 int count) {
        long sum = 0;
        for (long n = first; n < first + count; n++) {
            int microbatch = (int) (n % 8);
            payload.set(ValueLayout.JAVA_LONG, 0, n);
            sender.send(microbatch, payload);
            MemorySegment got = receiver.receive(microbatch);
            sum += got.get(ValueLayout.JAVA_LONG, 0) + got.byteSize();
            receiver.release();
        }
        return sum;
    }

    /** One rank, three stages: every hand-off is a same-rank copy, into a reused buffer. */
    @Test
    void sameRankHandoffsCopyIntoReusedBuffers() {
        assertStepAllocatesLessThanAMessage(new PipelineShape(1, 4, 3), ScheduleGenerators.interleavedOneFOneB(1, 4, 3));
    }

    /** Two ranks, 1F1B: every hand-off goes through a link. */
    @Test
    void linkHandoffsCopyNothingPerStep() {
        assertStepAllocatesLessThanAMessage(PipelineShape.of(2, 4), ScheduleGenerators.oneFOneB(2, 4));
    }

    private static void assertStepAllocatesLessThanAMessage(PipelineShape shape, Schedule schedule) {
        int slots = LinkPlan.of(schedule, shape).minimumSlots();
        int warmupSteps = 3_000;
        int measuredSteps = 100;
        List<Double> perRank = InJvmWorld.runOnEveryRank(shape.ranks(), OPTIONS, group -> {
            Map<Integer, CopyingStage> mine = new HashMap<>();
            for (int stage = group.rank(); stage < shape.stageCount(); stage += shape.ranks()) {
                mine.put(stage, new CopyingStage(stage, shape.stageCount()));
            }
            try (PipelineExecutor executor = PipelineExecutor.create(group, schedule, shape, mine, slots, MESSAGE_BYTES)) {
                for (int step = 0; step < warmupSteps; step++) {
                    executor.runStep();
                }
                double best = Double.MAX_VALUE;
                for (int round = 0; round < ROUNDS; round++) {
                    long before = threads().getCurrentThreadAllocatedBytes();
                    for (int step = 0; step < measuredSteps; step++) {
                        executor.runStep();
                    }
                    best = Math.min(best, (threads().getCurrentThreadAllocatedBytes() - before) / (double) measuredSteps);
                }
                for (CopyingStage stage : mine.values()) {
                    assertEquals(0, stage.mismatches, "stage " + stage.stage + " received a message that was not its own");
                }
                return best;
            }
        });
        System.out.printf("%s: %s bytes per step by rank (messages of %d bytes)%n", shape, perRank, MESSAGE_BYTES);
        for (int rank = 0; rank < perRank.size(); rank++) {
            assertTrue(perRank.get(rank) < MESSAGE_BYTES, "rank " + rank + " allocated " + perRank.get(rank) + " bytes per"
                    + " step of " + shape + " (expected less than one message of " + MESSAGE_BYTES + " bytes: a copy per"
                    + " hand-off allocates " + MESSAGE_BYTES + " per message)");
        }
    }

    /**
     * A stage that allocates nothing: its output is one buffer it reuses, whose first long names the stage, the
     * microbatch and the pass; it checks that what it receives came from its neighbour for the right microbatch.
     */
    private static final class CopyingStage implements StageCompute {
        final int stage;
        final int stageCount;
        final MemorySegment out = Arena.ofAuto().allocate(MESSAGE_BYTES, 64);
        long mismatches;

        CopyingStage(int stage, int stageCount) {
            this.stage = stage;
            this.stageCount = stageCount;
        }

        private static long tag(int stage, int microbatch, int pass) {
            return stage * 1_000_000L + microbatch * 10L + pass;
        }

        private void check(MemorySegment input, long expected) {
            if (input.byteSize() != MESSAGE_BYTES || input.get(ValueLayout.JAVA_LONG, 0) != expected
                    || input.get(ValueLayout.JAVA_LONG, MESSAGE_BYTES - 8) != expected) {
                mismatches++;
            }
        }

        @Override
        public MemorySegment forward(int microbatch, MemorySegment input) {
            if (stage > 0) {
                check(input, tag(stage - 1, microbatch, 0));
            }
            out.set(ValueLayout.JAVA_LONG, 0, tag(stage, microbatch, 0));
            out.set(ValueLayout.JAVA_LONG, MESSAGE_BYTES - 8, tag(stage, microbatch, 0));
            return out;
        }

        @Override
        public MemorySegment backward(int microbatch, MemorySegment outputGradient) {
            if (stage < stageCount - 1) {
                check(outputGradient, tag(stage + 1, microbatch, 1));
            }
            out.set(ValueLayout.JAVA_LONG, 0, tag(stage, microbatch, 1));
            out.set(ValueLayout.JAVA_LONG, MESSAGE_BYTES - 8, tag(stage, microbatch, 1));
            return out;
        }

        @Override
        public void step() {
        }
    }
}
