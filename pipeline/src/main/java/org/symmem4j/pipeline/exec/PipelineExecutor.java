package org.symmem4j.pipeline.exec;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.TreeMap;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.SymmetricMemory;
import org.symmem4j.parallel.Transport;
import org.symmem4j.parallel.WorkClock;
import org.symmem4j.parallel.trace.Nvtx;
import org.symmem4j.pipeline.channel.ChannelLayout;
import org.symmem4j.pipeline.channel.LinkPlan;
import org.symmem4j.pipeline.channel.LinkReceiver;
import org.symmem4j.pipeline.channel.LinkSender;
import org.symmem4j.pipeline.channel.PipelineAbortedException;
import org.symmem4j.pipeline.channel.StageLink;
import org.symmem4j.pipeline.exec.TimelineEvent.Kind;
import org.symmem4j.pipeline.schedule.Action;
import org.symmem4j.pipeline.schedule.ActionType;
import org.symmem4j.pipeline.schedule.PipelineShape;
import org.symmem4j.pipeline.schedule.Schedule;

/**
 * Runs one rank's part of a pipeline schedule. It only interprets the schedule: for each action of
 * this rank's list, in order, it takes the input message from the link into the stage (waiting for
 * it if needed), calls the stage's {@link StageCompute#forward forward} or
 * {@link StageCompute#backward backward}, gives the input's slot back, and posts the output to the
 * next (forward) or previous (backward) stage's link (waiting for a free slot if the link is full).
 * After the list, every local stage takes one optimizer {@link StageCompute#step() step}, so gradients
 * accumulate over the step's microbatches.
 *
 * <p>Links between ranks are {@link StageLink}s in one {@link SymmetricMemory} allocation laid out by
 * {@link ChannelLayout}; hand-offs between two stages of the same rank (one rank, several virtual
 * stages) are copied through a local queue ({@link LocalHandoff}) into buffers it reuses. Neither
 * allocates per message: a step of stages that allocate nothing allocates only its timeline.
 *
 * <p>The executor drives every transport the same way, through {@link SymmetricMemory}: where the
 * memory's operations are enqueued ({@link SymmetricMemory#enqueued()}: GPUs, e.g.
 * {@link #create(Group, Transport, Schedule, PipelineShape, Map, int, long)} with the CUDA transport)
 * the host thread only enqueues — each receive, the stage's kernels (its {@link StageCompute}
 * enqueues them on the rank's stream, reading and writing device memory), each credit and each send
 * go onto the rank's stream in schedule order — and {@link #runStep()} then waits for that work
 * ({@link SymmetricMemory#awaitWork}), bounded by the group's timeout; on the host each is done at
 * once and the wait returns at once. The timeline's times come from the memory's
 * {@link SymmetricMemory#clock clock}: the host clock, or events on the stream placed on the host
 * clock from the step's start.
 *
 * <p>Everything that can be checked is checked at {@link #create} (collective), before training: the
 * group size against the shape, the schedule ({@code ScheduleValidator}), FIFO order and enough slots
 * per link ({@link LinkPlan}), and that the stages given are exactly this rank's. A stage that
 * throws during a step poisons every link ({@link StageLink#poisonAll}), so the other ranks stop
 * with a {@link PipelineAbortedException} instead of waiting out the timeout; the executor is then
 * unusable.
 */
public final class PipelineExecutor implements AutoCloseable {

    private static final MemorySegment EMPTY = MemorySegment.ofArray(new byte[0]);
    /** NVTX ranges by {@link ActionType} (payload: the microbatch), and of a stage's optimizer step (payload: the stage). */
    private static final Nvtx.Range[] NVTX_ACTIONS = nvtxActions();
    private static final Nvtx.Range NVTX_STEP = Nvtx.range("symmem4j pipeline optimizer_step");

    private final Group group;
    private final PipelineShape shape;
    private final List<Action> actions;
    private final ChannelLayout layout;
    private final SymmetricMemory memory;
    /**
     * The timeline's marks, made once before any rank's first step (on a GPU creating them could wait
     * for a peer's spinning kernel; see {@link WorkClock}) and restarted each step.
     */
    private final WorkClock clock;
    private final Arena arena = Arena.ofShared();
    /** By stage; null for stages of other ranks. */
    private final StageCompute[] stages;
    /** Steps begun by {@link #runStep}: the JFR events' step number is this less one. */
    private long stepsRun;
    /** The last action's input and output sizes, for its JFR event (plain fields: the executor runs on one thread). */
    private long lastInputBytes;
    private long lastOutputBytes;

    /**
     * By [link type][stage] ({@link ActionType#link()}: an I's gradient uses its B's link): where the
     * action's input comes from and its output goes; null where there is none.
     */
    private final LinkReceiver[][] receivers;
    private final LinkSender[][] senders;
    /** By [type][receiving stage]: same-rank hand-offs (only with one rank). */
    private final LocalHandoff[][] localQueues;
    /** The largest message ({@code slotBytes}): a same-rank hand-off's buffers are at least this large. */
    private final long slotBytes;
    private final int localStageCount;
    private final long[] eventStart;
    private final long[] eventEnd;
    private final int[] eventCode;
    private boolean failed;

    private PipelineExecutor(Group group, Transport transport, Schedule schedule, PipelineShape shape,
                             Map<Integer, ? extends StageCompute> mine, int slots, long slotBytes) {
        this.group = group;
        this.shape = shape;
        this.actions = schedule.actions(group.rank());
        this.layout = new ChannelLayout(shape, slots, slotBytes);
        this.stages = new StageCompute[shape.stageCount()];
        mine.forEach((stage, compute) -> stages[stage] = compute);
        this.localStageCount = mine.size();
        int types = ActionType.values().length;
        this.receivers = new LinkReceiver[types][shape.stageCount()];
        this.senders = new LinkSender[types][shape.stageCount()];
        this.localQueues = new LocalHandoff[types][shape.stageCount()];
        this.slotBytes = slotBytes;
        this.memory = transport.allocate(group, layout.bytesPerRank());
        WorkClock madeClock = null;
        try {
            if (!memory.hostAddressable() && shape.ranks() == 1) {
                throw new IllegalArgumentException("a one-rank pipeline has no links between ranks: its stages hand off"
                        + " through host queues, which cannot copy the device memory of " + transport.name()
                        + " (fix: run it on the host transport, or use ranks >= 2)");
            }
            if (memory.signalSlots() < layout.signalSlotsNeeded()) {
                throw new IllegalArgumentException("the pipeline needs " + layout.signalSlotsNeeded()
                        + " signal slots per pad (4 per virtual stage) but the transport has " + memory.signalSlots()
                        + " (fix: use fewer virtual stages per rank: at most " + memory.signalSlots() / 4 + ")");
            }
            for (int stage : mine.keySet()) {
                wire(stage, ActionType.FORWARD, stage - 1, stage + 1);
                wire(stage, ActionType.BACKWARD, stage + 1, stage - 1);
            }
            // before the barrier: no rank creates its marks once any rank may have launched a wait
            madeClock = memory.clock(2 * eventCapacity(actions, localStageCount));
            // all links are fresh (counters zero) on every rank before anyone posts
            memory.barrier();
        } catch (RuntimeException e) {
            try {
                memory.close();
            } finally {
                if (madeClock != null) {
                    madeClock.close();
                }
                arena.close();
            }
            throw e;
        }
        this.clock = madeClock;
        int capacity = eventCapacity(actions, localStageCount);
        this.eventStart = new long[capacity];
        this.eventEnd = new long[capacity];
        this.eventCode = new int[capacity];
    }

    /** Timeline events of a step, at most: a receive, the compute and a send per action, plus one optimizer step per stage. */
    private static int eventCapacity(List<Action> actions, int localStageCount) {
        return 3 * actions.size() + localStageCount;
    }

    /**
     * Collective over the pipeline group (one rank per pipeline rank): checks everything and
     * allocates the links.
     *
     * @param group     the pipeline group; rank r runs {@code schedule.actions(r)}
     * @param schedule  the schedule every rank runs its part of
     * @param shape     the pipeline's ranks, microbatches and stages per rank
     * @param stages    this rank's stages, by stage index: exactly {@code r, r + p, r + 2p, ...}
     * @param slots     messages per link before its sender waits ({@link LinkPlan#minimumSlots()} at least)
     * @param slotBytes the largest message: one microbatch's activation or gradient, in bytes
     * @return the executor of this rank
     * @throws IllegalArgumentException when anything does not fit, naming what and how to fix it
     */
    public static PipelineExecutor create(Group group, Schedule schedule, PipelineShape shape,
                                          Map<Integer, ? extends StageCompute> stages, int slots, long slotBytes) {
        Objects.requireNonNull(group, "group");
        return create(group, group.transport(), schedule, shape, stages, slots, slotBytes);
    }

    /**
     * As {@link #create(Group, Schedule, PipelineShape, Map, int, long)}, with the links allocated on
     * {@code transport}: a GPU transport puts them in GPU memory (at least 2 ranks), and the stages
     * then enqueue their work on the rank's stream.
     *
     * @param group the pipeline group; rank r runs {@code schedule.actions(r)}
     * @param transport the transport the links' symmetric memory is allocated on
     * @param schedule the schedule every rank runs its part of
     * @param shape the pipeline's ranks, microbatches and stages per rank
     * @param stages this rank's stages, by stage index
     * @param slots messages per link before its sender waits
     * @param slotBytes the largest message, in bytes
     * @return the executor of this rank
     * @throws IllegalArgumentException when anything does not fit, naming what and how to fix it
     */
    public static PipelineExecutor create(Group group, Transport transport, Schedule schedule, PipelineShape shape,
                                          Map<Integer, ? extends StageCompute> stages, int slots, long slotBytes) {
        Objects.requireNonNull(group, "group");
        Objects.requireNonNull(transport, "transport");
        Objects.requireNonNull(stages, "stages");
        if (group.worldSize() != shape.ranks()) {
            throw new IllegalArgumentException("the pipeline group has worldSize=" + group.worldSize() + " expected="
                    + shape.ranks() + " ranks (" + shape + "; fix: make the group of one rank per pipeline rank)");
        }
        LinkPlan.of(schedule, shape).requireSlots(slots);
        List<Integer> expected = new ArrayList<>();
        for (int stage = group.rank(); stage < shape.stageCount(); stage += shape.ranks()) {
            expected.add(stage);
        }
        List<Integer> given = new ArrayList<>(new TreeMap<>(stages).keySet());
        if (!given.equals(expected) || stages.values().stream().anyMatch(Objects::isNull)) {
            throw new IllegalArgumentException("rank " + group.rank() + " was given stages " + given + " expected="
                    + expected + " (stage s runs on rank s % " + shape.ranks() + "; fix: give every rank a"
                    + " StageCompute for each of its stages)");
        }
        return new PipelineExecutor(group, transport, schedule, shape, Map.copyOf(stages), slots, slotBytes);
    }

    /** Sets up where {@code type} actions of {@code stage} read from ({@code from}) and write to ({@code to}). */
    private void wire(int stage, ActionType type, int from, int to) {
        int t = type.ordinal();
        if (from >= 0 && from < shape.stageCount()) {
            if (shape.rankOf(from) == group.rank()) {
                localQueues[t][stage] = new LocalHandoff(slotBytes);
            } else {
                receivers[t][stage] = new StageLink.Receiver(memory, layout, from, stage);
            }
        }
        if (to >= 0 && to < shape.stageCount() && shape.rankOf(to) != group.rank()) {
            senders[t][stage] = new StageLink.Sender(memory, layout, stage, to, arena);
        }
    }

    /**
     * Runs this rank's list once (one training step of every microbatch), then one optimizer step
     * per local stage. Every rank of the group calls it the same number of times.
     *
     * @return this rank's timeline of the step
     * @throws PipelineAbortedException when another rank failed
     * @throws IllegalStateException    when an earlier step of this executor failed (here or on another
     *                                  rank): its links are poisoned, so a new executor (on a new group)
     *                                  must run the next step
     */
    public StepTimeline runStep() {
        if (failed) {
            throw new IllegalStateException("the pipeline executor of rank " + group.rank()
                    + " failed in an earlier step (fix: create a new one, and a new group)");
        }
        int events = 0;
        stepsRun++;
        clock.restart();
        try {
            for (int index = 0; index < actions.size(); index++) {
                events = run(index, events);
            }
            for (int stage = group.rank(); stage < shape.stageCount(); stage += shape.ranks()) {
                long start = mark();
                Nvtx.push(NVTX_STEP, stage);
                try {
                    stages[stage].step();
                } finally {
                    Nvtx.pop();
                }
                events = record(events, -1 - stage, start);
            }
            awaitWork();
        } catch (RuntimeException | Error e) {
            failed = true;
            RuntimeException aborted = e instanceof PipelineAbortedException pa ? pa : abortedFirstByAPeer(e);
            if (aborted == null) {
                // This rank failed first: poison every link so every rank stops now. On enqueued memory
                // this rank's own waits return too: let its queue drain before the error leaves (bounded).
                StageLink.poisonAll(memory, layout);
                memory.awaitWork(group.options().timeout());
            }
            // Every rank learns of the failure from the poisoned links: tearing the links down must not
            // wait for peers again, nor look to them like a rank that left before failing.
            group.abortState().noteAbortedElsewhere("pipeline aborted: " + e);
            if (aborted != null && aborted != e) {
                throw aborted;
            }
            throw e;
        }
        return timeline(events);
    }

    /**
     * When a host step failed with {@code e} after another rank had already poisoned the links (a
     * peer that failed first may free what this rank was still writing into), the peer's abort is
     * what to report: returns it with {@code e} attached. Null when this rank failed first. On
     * enqueued memory the host never touches the links' memory, so a failure of this rank's host code
     * is its own (and reading the counters would be one more driver call at a time peers may spin).
     */
    private PipelineAbortedException abortedFirstByAPeer(Throwable e) {
        if (memory.enqueued() || !StageLink.poisoned(memory, layout)) {
            return null;
        }
        PipelineAbortedException aborted = new PipelineAbortedException("pipeline aborted by another rank while rank "
                + group.rank() + " ran its step (the failing rank reports the cause; this rank then failed with " + e
                + "; fix: correct what the failing rank's error names, then create a new executor and a new group)");
        aborted.addSuppressed(e);
        return aborted;
    }

    /**
     * Waits for the work the step enqueued ({@link SymmetricMemory#awaitWork}; at once on the host),
     * bounded by the group's timeout, then, on enqueued memory, checks for another rank's abort: there
     * a poisoned wait let the queue run on past a message that never came, and only the counters tell.
     * A timeout means a peer never sent or released: abort.
     */
    private void awaitWork() {
        if (!memory.awaitWork(group.options().timeout())) {
            boolean landed = StageLink.poisonAll(memory, layout); // releases every waiting queue, this rank's too
            memory.awaitWork(group.options().timeout());
            throw new PipelineAbortedException("rank " + group.rank() + ": the step's enqueued work did not finish within "
                    + group.options().timeout() + " (a peer stopped sending or releasing); aborting the pipeline"
                    + (landed ? "" : " (the abort signal itself did not land within the timeout either: a device queue is"
                    + " blocked; peers stop at their own timeout)")
                    + "; fix: read the other ranks' errors for the one that stopped (a crash, an exception, a schedule"
                    + " that differs), or, when a stage legitimately takes longer, raise the group's timeout"
                    + " (GroupOptions, or -Dsymmem4j.timeout.ms), then create a new executor and a new group");
        }
        if (memory.enqueued() && StageLink.poisoned(memory, layout)) {
            throw new PipelineAbortedException("pipeline aborted by another rank during the step of rank "
                    + group.rank() + " (the failing rank reports the cause; fix: correct what the failing rank's error"
                    + " names, then create a new executor and a new group)");
        }
    }

    private static Nvtx.Range[] nvtxActions() {
        Nvtx.Range[] ranges = new Nvtx.Range[ActionType.values().length];
        for (ActionType type : ActionType.values()) {
            ranges[type.ordinal()] = Nvtx.range("symmem4j pipeline " + type.name().toLowerCase(java.util.Locale.ROOT));
        }
        return ranges;
    }

    /** Now, as a timeline mark of the memory's clock (host nanoseconds, or an event on the stream). */
    private long mark() {
        return clock.mark();
    }

    /**
     * Runs action {@code index} inside an NVTX range of its type (payload: the microbatch; nothing without NVTX); a
     * {@link PipelineActionEvent} spans it while a JFR recording enables one.
     */
    private int run(int index, int events) {
        Action action = actions.get(index);
        Nvtx.push(NVTX_ACTIONS[action.type().ordinal()], action.microbatch());
        try {
            return runTraced(index, events);
        } finally {
            Nvtx.pop();
        }
    }

    private int runTraced(int index, int events) {
        if (!PipelineActionEvent.TYPE.isEnabled()) {
            return runAction(index, events);
        }
        PipelineActionEvent e = new PipelineActionEvent();
        e.begin();
        int recorded = runAction(index, events);
        e.end();
        Action action = actions.get(index);
        e.action = action.toString();
        e.rank = group.rank();
        e.stage = action.stage();
        e.type = action.type().name();
        e.microbatch = action.microbatch();
        e.step = stepsRun - 1;
        e.inputBytes = lastInputBytes;
        e.outputBytes = lastOutputBytes;
        e.commit();
        return recorded;
    }

    private int runAction(int index, int events) {
        Action action = actions.get(index);
        int stage = action.stage();
        int mb = action.microbatch();
        ActionType link = action.type().link();
        StageCompute compute = stages[stage];
        if (link == null) { // a weight gradient: no message in or out
            lastInputBytes = 0;
            lastOutputBytes = 0;
            long start = mark();
            compute.backwardWeight(mb);
            return record(events, encode(Kind.WEIGHT_GRADIENT, index), start);
        }
        int t = link.ordinal();
        LinkReceiver receiver = receivers[t][stage];
        LocalHandoff local = localQueues[t][stage];
        MemorySegment input = EMPTY;
        long start = mark();
        if (receiver != null) {
            input = receiver.receive(mb);
            events = record(events, encode(Kind.RECEIVE, index), start);
        } else if (local != null) {
            input = local.receive();
        }
        lastInputBytes = input.byteSize();
        lastOutputBytes = 0;
        start = mark();
        MemorySegment output = switch (action.type()) {
            case FORWARD -> compute.forward(mb, input);
            case INPUT_GRADIENT -> compute.backwardInput(mb, input);
            default -> compute.backward(mb, input);
        };
        Kind kind = switch (action.type()) {
            case FORWARD -> Kind.FORWARD;
            case INPUT_GRADIENT -> Kind.INPUT_GRADIENT;
            default -> Kind.BACKWARD;
        };
        events = record(events, encode(kind, index), start);
        if (receiver != null) {
            receiver.release(); // the stage has read its input
        } else if (local != null) {
            local.release();
        }
        int to = link == ActionType.FORWARD ? stage + 1 : stage - 1;
        if (to < 0 || to >= shape.stageCount()) {
            return events;
        }
        if (output == null) { // no capturing lambda (requireNonNull's supplier): the hot path allocates nothing
            throw new NullPointerException("stage " + stage + " returned no output for " + action + " (fix: return the"
                    + " stage's output for the next stage, or its input gradient for the previous one)");
        }
        lastOutputBytes = output.byteSize();
        LinkSender sender = senders[t][stage];
        if (sender != null) {
            start = mark();
            sender.send(mb, output);
            events = record(events, encode(Kind.SEND, index), start);
        } else {
            // same rank (one-rank pipeline): copy, because the stage may reuse its output buffer, into a
            // buffer the hand-off reuses once the receiving stage has read it
            localQueues[t][to].send(output);
        }
        return events;
    }

    /**
     * Event codes in {@link #eventCode}: {@code kind.ordinal() + 8 * (index of the action in the list)}
     * for action events, {@code -1 - stage} for optimizer steps. Keeps the hot path allocation-free;
     * {@link #timeline} turns them into {@link TimelineEvent}s once per step.
     */
    private static int encode(Kind kind, int actionIndex) {
        return kind.ordinal() + 8 * actionIndex;
    }

    private int record(int events, int code, long start) {
        eventStart[events] = start;
        eventEnd[events] = mark();
        eventCode[events] = code;
        return events + 1;
    }

    private StepTimeline timeline(int events) {
        // marks become host nanoseconds (on the host they already are; GPU events have run by now)
        for (int i = 0; i < events; i++) {
            eventStart[i] = clock.nanos(eventStart[i]);
            eventEnd[i] = clock.nanos(eventEnd[i]);
        }
        List<TimelineEvent> list = new ArrayList<>(events);
        for (int i = 0; i < events; i++) {
            int code = eventCode[i];
            if (code < 0) {
                list.add(new TimelineEvent(group.rank(), Kind.OPTIMIZER_STEP, -1 - code, -1, -1, eventStart[i], eventEnd[i]));
                continue;
            }
            Kind kind = Kind.values()[code % 8];
            Action action = actions.get(code / 8);
            int peer = switch (kind) {
                case RECEIVE -> action.type() == ActionType.FORWARD ? action.stage() - 1 : action.stage() + 1;
                case SEND -> action.type() == ActionType.FORWARD ? action.stage() + 1 : action.stage() - 1;
                default -> -1;
            };
            list.add(new TimelineEvent(group.rank(), kind, action.stage(), peer, action.microbatch(), eventStart[i],
                    eventEnd[i]));
        }
        return new StepTimeline(group.rank(), list);
    }

    /**
     * Collective: returns once every rank of the pipeline has called it. Not needed for training
     * (links order everything); for measurements that want all ranks to start a step together, as
     * the simulator's time 0 assumes.
     */
    public void barrier() {
        memory.barrier();
    }

    /**
     * Where the links lie in the executor's symmetric memory.
     *
     * @return the channel layout
     */
    public ChannelLayout layout() {
        return layout;
    }

    /** Collective: frees the links. */
    @Override
    public void close() {
        try {
            memory.close();
        } finally {
            try {
                clock.close(); // after the collective close: no peer's step is running
            } finally {
                arena.close();
            }
        }
    }
}
