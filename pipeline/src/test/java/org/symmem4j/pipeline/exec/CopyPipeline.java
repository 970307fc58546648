package org.symmem4j.pipeline.exec;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.SignalOp;
import org.symmem4j.parallel.SymmetricMemory;
import org.symmem4j.parallel.Transport;
import org.symmem4j.pipeline.channel.LinkPlan;
import org.symmem4j.pipeline.schedule.PipelineShape;
import org.symmem4j.pipeline.schedule.Schedule;
import org.symmem4j.pipeline.schedule.ScheduleGenerators;

/**
 * The GPU copy pipeline of {@link CudaPipelineExecutorTest} and {@link NvshmemPipelineWorker}: stages that are
 * device-to-device copies, enqueued on the rank's stream like any GPU stage's kernels; each forward copies its
 * input into a private buffer per microbatch and hands that on; the last stage keeps what arrived and sends it
 * back as the gradient; each backward copies and hands on; stage 0 keeps what came back. The copies are puts into
 * the rank's own buffer ({@link SymmetricMemory#putWithSignal}, enqueued like the links' own steps). Every
 * microbatch carries its own bytes, so a message delivered to the wrong microbatch, overwritten before its
 * receiver read it, or read before it landed shows as a byte mismatch. No JUnit here: rank processes run it.
 */
final class CopyPipeline {

    static final long MESSAGE_BYTES = 64 << 10;
    /** The signal slot of the stages' own buffers that their copies (puts adding 0) name. */
    static final int COPY_SLOT = 0;

    private CopyPipeline() {
    }

    /** A schedule to run: its name, shape and actions. */
    record Case(String name, PipelineShape shape, Schedule schedule) {
    }

    /** 1F1B, interleaved (2 stages per rank) and GPipe on {@code p} ranks. */
    static List<Case> cases(int p) {
        return List.of(new Case("1f1b", PipelineShape.of(p, 2 * p), ScheduleGenerators.oneFOneB(p, 2 * p)),
                new Case("interleaved", new PipelineShape(p, 2 * p, 2), ScheduleGenerators.interleavedOneFOneB(p, 2 * p, 2)),
                new Case("gpipe", PipelineShape.of(p, p), ScheduleGenerators.gpipe(p, p)));
    }

    /** Device buffers of one rank's stages: inputs per microbatch (stage 0), kept activations and gradients. */
    public static final class CopyStage implements StageCompute {
        final SymmetricMemory buffers;
        final int stage;
        final int lastStage;
        final long base;

        CopyStage(SymmetricMemory buffers, int stage, int lastStage, long base) {
            this.buffers = buffers;
            this.stage = stage;
            this.lastStage = lastStage;
            this.base = base;
        }

        /** Where, in the rank's buffer, this stage keeps microbatch mb's forward (kind 0) or backward (kind 1) message. */
        long kept(int kind, int mb, int microbatches) {
            return base + ((long) kind * microbatches + mb) * MESSAGE_BYTES;
        }

        /** The kept message as a device buffer. */
        MemorySegment keptBuffer(int kind, int mb) {
            return MemorySegment.ofAddress(buffers.local().address() + kept(kind, mb, microbatches)).reinterpret(MESSAGE_BYTES);
        }

        /** Enqueues the copy of MESSAGE_BYTES of {@code src} (a device buffer) to {@code dstOffset} of this rank's buffer. */
        void copyInto(long dstOffset, MemorySegment src) {
            buffers.putWithSignal(buffers.group().rank(), src.asSlice(0, MESSAGE_BYTES), dstOffset, COPY_SLOT, 0, SignalOp.ADD);
        }

        int microbatches;

        @Override
        public MemorySegment forward(int microbatch, MemorySegment input) {
            if (stage > 0) {
                copyInto(kept(0, microbatch, microbatches), input);
            } // stage 0: the test wrote its input there before the step
            return keptBuffer(0, microbatch);
        }

        @Override
        public MemorySegment backward(int microbatch, MemorySegment outputGradient) {
            copyInto(kept(1, microbatch, microbatches), stage == lastStage ? keptBuffer(0, microbatch) : outputGradient);
            return keptBuffer(1, microbatch);
        }

        @Override
        public void step() {
        }
    }

    static byte pattern(int step, int mb, long i) {
        return (byte) ((step * 131 + mb * 17 + i) % 251 + 1);
    }

    /**
     * One rank's part of the copy pipeline: {@code steps} steps of {@code schedule} with the links on
     * {@code transport} (the rank's group's), every microbatch's bytes checked where they arrive.
     *
     * @return what arrived wrong, a line each; empty when every byte was right
     */
    static String run(Group group, Transport transport, String name, PipelineShape shape, Schedule schedule,
                                  int steps) {
        int microbatches = shape.microbatches();
        int lastStage = shape.stageCount() - 1;
        long perStage = 2L * microbatches * MESSAGE_BYTES;
        List<String> found = new ArrayList<>();
        try (SymmetricMemory buffers = transport.allocate(group, perStage * shape.stagesPerRank());
             Arena arena = Arena.ofConfined()) {
            Map<Integer, CopyStage> mine = new HashMap<>();
            int local = 0;
            for (int stage = group.rank(); stage < shape.stageCount(); stage += shape.ranks()) {
                CopyStage s = new CopyStage(buffers, stage, lastStage, local++ * perStage);
                s.microbatches = microbatches;
                mine.put(stage, s);
            }
            // one slot per link: every send after the first waits for its credit
            int slots = LinkPlan.of(schedule, shape).minimumSlots();
            try (PipelineExecutor executor = PipelineExecutor.create(group, transport, schedule, shape, new HashMap<>(mine),
                    slots, MESSAGE_BYTES)) {
                MemorySegment host = arena.allocate(MESSAGE_BYTES);
                for (int step = 0; step < steps; step++) {
                    CopyStage first = mine.get(0);
                    if (first != null) {
                        for (int mb = 0; mb < microbatches; mb++) {
                            for (long i = 0; i < MESSAGE_BYTES; i++) {
                                host.set(ValueLayout.JAVA_BYTE, i, pattern(step, mb, i));
                            }
                            buffers.copyFromHost(host, first.kept(0, mb, microbatches));
                        }
                    }
                    executor.barrier();
                    StepTimeline timeline = executor.runStep();
                    long computeEvents = timeline.events().stream()
                            .filter(e -> e.kind() == TimelineEvent.Kind.FORWARD || e.kind() == TimelineEvent.Kind.BACKWARD).count();
                    if (computeEvents != schedule.actions(group.rank()).size()) {
                        found.add(name + " step " + step + ": " + computeEvents + " compute events, expected one per action ("
                                + schedule.actions(group.rank()).size() + ")");
                    }
                    if (!timeline.events().stream().allMatch(e -> e.endNanos() >= e.startNanos())) {
                        found.add(name + " step " + step + ": an event ends before it starts (CUDA event times must run forward)");
                    }
                    for (CopyStage s : mine.values()) {
                        // every stage saw every microbatch's bytes forward; stage 0 got them back
                        for (int mb = 0; mb < microbatches; mb++) {
                            for (int kind = 0; kind < 2; kind++) {
                                if (kind == 1 && s.stage != 0 && s.stage != lastStage) {
                                    continue; // middle stages: the forward copy already proves delivery
                                }
                                buffers.copyToHost(s.kept(kind, mb, microbatches), host);
                                for (long i = 0; i < MESSAGE_BYTES; i++) {
                                    if (host.get(ValueLayout.JAVA_BYTE, i) != pattern(step, mb, i)) {
                                        found.add(name + " step " + step + " stage " + s.stage + (kind == 0 ? " forward" : " backward")
                                                + " microbatch " + mb + " byte " + i + ": expected " + pattern(step, mb, i)
                                                + " found " + host.get(ValueLayout.JAVA_BYTE, i));
                                        break;
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        return String.join("\n", found);
    }

}
