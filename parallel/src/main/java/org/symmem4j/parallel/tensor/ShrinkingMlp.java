package org.symmem4j.parallel.tensor;

import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Objects;
import java.util.function.Consumer;
import java.util.function.LongToDoubleFunction;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.PeerTimeoutException;
import org.symmem4j.parallel.SymmemException;
import org.symmem4j.parallel.tensor.FullyShardedMlp.Adam;
import org.symmem4j.parallel.tensor.FullyShardedMlp.Sharding;
import org.symmem4j.parallel.tensor.FullyShardedMlp.State;

/**
 * {@link FullyShardedMlp} with plain data parallelism ({@link Sharding#NONE}) over a GPU process group that shrinks in
 * place when a rank's process dies (the trainers' {@code onWorkerFailure(SHRINK)} for the GPU trainer without DL4J): the
 * job runs under {@code symmem4j-run --on-failure shrink}, one process per rank on a {@code CudaTransport}, and each
 * {@link #step} returns once the step completed on every rank that is still alive.
 *
 * <p>When a step fails because a peer's process is gone (a {@link PeerTimeoutException} at a collective's host entry
 * barrier, or the group aborted), each survivor, inside {@link #step}:
 * <ol>
 *   <li><b>agrees</b> on the new membership: {@link Group#shrink()} reads the launcher's membership file and forms the
 *       survivors' group (renumbered densely in their old order, a new store), and tells the CUDA transport, which keeps
 *       the old group's NCCL communicators for {@code ncclCommShrink};</li>
 *   <li><b>frees</b> the old model without meeting the peers ({@link FullyShardedMlp#abandon}): its streams waited for
 *       (at most the group's timeout), every buffer freed, its symmetric memories closed — this rank's exported memory
 *       and its mappings of every peer's, the dead rank's included — its communicators closed (NCCL's parked for the
 *       shrink), the old group's GPU state released on the transport; the caller's own memories of the old group are
 *       closed in {@link #onShrink}'s callback before that release;</li>
 *   <li><b>rebuilds</b> on the survivors' group: a new {@link FullyShardedMlp} (new symmetric memory, mapped among the
 *       survivors only; new communicators, NCCL's from {@code ncclCommShrink} where the bound NCCL has it and every
 *       survivor kept its GPU, else from a new unique id through the new store), after the survivors checked over the
 *       new group that they completed the same number of steps;</li>
 *   <li><b>goes on</b> from the last step every survivor completed: the replica's state at the failed step's start (a
 *       host copy each rank takes at every step's start, 12 bytes per parameter) is put into the new model, and the
 *       failed step is redone with the batches the {@link Batches} callback writes for the survivors' ranks and size.</li>
 * </ol>
 * From the failed step on, training equals, bitwise, a fresh {@code FullyShardedMlp} of the survivors' size started from
 * that state over the same batches: the same kernels reduce the same bits in the same rank order (the all-reduce picked
 * for the survivors' size, as a fresh model of that size picks it). It does not equal a run on N − 1 ranks from the
 * start, whose steps before the failure reduced over other ranks.
 *
 * <p><b>Bounded.</b> Every wait is bounded by the group's timeout and names the missing rank: the failed collective's
 * entry barrier, the membership file, the survivors' join, the streams' drain (a stream that still runs then has a
 * kernel that waits for the dead rank on the GPU — the rank died inside a collective rather than between its host entry
 * barriers — which the host cannot stop: the step throws, naming the dead rank, and the process should exit; restart
 * the job from its checkpoints instead). A rank whose own step fails (not a peer's death) throws as without SHRINK.
 *
 * <p><b>Refused</b> at {@link #create}: {@link Sharding#FULL} — each rank holds the only copy of its 1/N of the weights
 * and Adam's moments, which a dead rank takes with it, and {@code FullyShardedMlp} has no checkpoint to go back to — and a
 * group that cannot shrink ({@link Group#canShrink()} false: not started by {@code symmem4j-run --on-failure shrink}, or
 * on a transport that does not survive a shrink, or across machines).
 */
public final class ShrinkingMlp implements AutoCloseable {

    /** Writes one rank's batch of one step. */
    @FunctionalInterface
    public interface Batches {
        /**
         * Writes rank {@code rank}'s batch of step {@code step} into {@code mlp}'s {@link FullyShardedMlp#input()} and
         * {@link FullyShardedMlp#outputGradient()} (through {@link FullyShardedMlp#device()}); after a shrink it is asked
         * again for the failed step, for the survivors' ranks and size.
         *
         * @param mlp       the model of the current group
         * @param step      the step, counted from 0 (the steps completed before it)
         * @param rank      this rank in the current group
         * @param worldSize the current group's size
         */
        void write(FullyShardedMlp mlp, long step, int rank, int worldSize);
    }

    /**
     * One in-place shrink.
     *
     * @param step   the step that failed and was redone on the survivors (counted from 0; the steps completed before it)
     * @param dead   the old group's ranks that were gone
     * @param before the old group's size
     * @param after  the survivors' group's size
     * @param nanos  from the failure seen on this rank to the survivors' model holding the agreed state
     */
    public record Shrink(long step, List<Integer> dead, int before, int after, long nanos) {
    }

    private final int tokens;
    private final int[] widths;
    private final Adam adam;
    private final int minRanks;
    private final List<Shrink> shrinks = new ArrayList<>();
    /** Groups this object formed by shrinking (it closes them); the first group stays the caller's. */
    private final List<Group> formed = new ArrayList<>();
    private Consumer<Group> onShrink = old -> { };
    private Group group;
    private FullyShardedMlp mlp;
    private long completed;
    private boolean closed;

    private ShrinkingMlp(Group group, int tokens, int[] widths, Adam adam, int minRanks) {
        this.group = group;
        this.tokens = tokens;
        this.widths = widths.clone();
        this.adam = adam;
        this.minRanks = minRanks;
        this.mlp = new FullyShardedMlp(group, tokens, widths, Sharding.NONE, adam);
    }

    /**
     * Collective over {@code group}: checks that it can shrink, then builds the model ({@link FullyShardedMlp}'s
     * constructor).
     *
     * @param group    a process group on a GPU transport, started by {@code symmem4j-run --on-failure shrink}
     * @param tokens   rows of each rank's batch
     * @param widths   the layers' widths
     * @param sharding {@link Sharding#NONE}; {@link Sharding#FULL} is refused
     * @param adam     the optimizer's hyper-parameters
     * @param minRanks the fewest ranks worth training on: a shrink below it fails the step instead
     * @return the trainer
     * @throws IllegalArgumentException before anything collective, when {@code sharding} is FULL, the group cannot
     *                                  shrink, or {@code minRanks} is outside [1, worldSize]
     */
    public static ShrinkingMlp create(Group group, int tokens, int[] widths, Sharding sharding, Adam adam, int minRanks) {
        Objects.requireNonNull(group, "group");
        Objects.requireNonNull(widths, "widths");
        Objects.requireNonNull(adam, "adam");
        if (sharding == Sharding.FULL) {
            throw new IllegalArgumentException("onWorkerFailure=SHRINK with Sharding.FULL: each rank holds the only copy of"
                    + " its 1/N of the weights and Adam's moments, a dead rank takes its shard with it, and FullyShardedMlp"
                    + " keeps no checkpoint to go back to; expected Sharding.NONE (fix: Sharding.NONE with SHRINK, whose"
                    + " every rank holds the whole replica, or keep Sharding.FULL and recover by restarting the job:"
                    + " symmem4j-run --max-restarts N)");
        }
        Objects.requireNonNull(sharding, "sharding");
        if (minRanks < 1 || minRanks > group.worldSize()) {
            throw new IllegalArgumentException("minRanks=" + minRanks + " with worldSize=" + group.worldSize()
                    + ": expected 1 <= minRanks <= worldSize (fix: the fewest ranks worth training on, e.g. "
                    + Math.max(1, group.worldSize() - 1) + ")");
        }
        if (!group.canShrink()) {
            throw new IllegalArgumentException("onWorkerFailure=SHRINK with " + group + ", which cannot shrink in place:"
                    + " expected a process group on a GPU transport that survives a shrink (the CUDA transport), on one"
                    + " machine, started by symmem4j-run --on-failure shrink (SYMMEM4J_MEMBERSHIP_FILE names the dead"
                    + " ranks); fix: start the job with symmem4j-run --on-failure shrink and join with"
                    + " ProcessGroup.fromEnvironment(options, CudaTransport.create())");
        }
        return new ShrinkingMlp(group, tokens, widths, adam, minRanks);
    }

    /**
     * Sets the callback that closes the caller's own memories and communicators of the old group after a shrink, called
     * on each survivor once the old model is freed and before the old group's GPU state is released (a memory of the
     * old group must be closed before that release; closing it then frees without meeting the peers).
     *
     * @param closeOldGroupResources gets the old group
     * @return this
     */
    public ShrinkingMlp onShrink(Consumer<Group> closeOldGroupResources) {
        this.onShrink = Objects.requireNonNull(closeOldGroupResources, "closeOldGroupResources");
        return this;
    }

    /**
     * Sets layer {@code layer}'s weight ({@link FullyShardedMlp#setWeights}); before the first step.
     *
     * @param layer   the layer
     * @param valueAt the weight's element at a flat row-major index
     */
    public void setWeights(int layer, LongToDoubleFunction valueAt) {
        checkOpen();
        mlp.setWeights(layer, valueAt);
    }

    /**
     * Collective over the ranks still alive: one training step, redone on the survivors after an in-place shrink when a
     * peer's process died during it; returns once it completed.
     *
     * @param batches writes this rank's batch of the step
     * @throws SymmemException when a shrink is not possible (fewer than {@code minRanks} survivors, the membership file
     *                         names no dead rank within the timeout, a stream that does not drain, survivors that
     *                         completed different steps), with the step's failure as suppressed; the model is then unusable
     * @throws PeerTimeoutException when this group cannot shrink and a peer did not arrive
     */
    public void step(Batches batches) {
        checkOpen();
        Objects.requireNonNull(batches, "batches");
        while (true) {
            State start = mlp.state(); // the step's start: where a failure of this step goes back to
            try {
                batches.write(mlp, completed, group.rank(), group.worldSize());
                mlp.step();
                if (!mlp.synchronize(group.options().timeout())) {
                    throw new PeerTimeoutException("rank=" + group.rank() + " step " + completed + ": its GPU streams still"
                            + " run after timeout=" + group.options().timeout() + " (a collective's kernel waits for "
                            + gone(group) + " on the GPU; fix: see that rank's own error or exit status)", group.rank(),
                            deadRanks(group), "step", PeerTimeoutException.Reason.DEADLINE_PASSED,
                            group.options().timeout());
                }
                completed++;
                return;
            } catch (SymmemException e) {
                if (!(e instanceof PeerTimeoutException || group.abortState().isRaised()) || !group.canShrink()) {
                    throw e;
                }
                shrink(e, start);
            }
        }
    }

    /** The step failed on a peer's death: agree, free, rebuild, and put the step's start back (the class comment). */
    private void shrink(SymmemException failure, State start) {
        long t0 = System.nanoTime();
        Group old = group;
        Group.Survivors survivors;
        try {
            survivors = old.shrink();
        } catch (RuntimeException e) {
            e.addSuppressed(failure);
            throw e;
        }
        String gone = "rank(s) " + survivors.dead() + " of the old group";
        Group next = survivors.group();
        try {
            mlp.abandon(old.options().timeout(), gone);
            onShrink.accept(old);
            // every memory and communicator of the old group is closed: its GPU state goes (a stream that did not
            // drain was refused by abandon above: releasing would wait for it)
            old.transport().release(old);
        } catch (RuntimeException e) {
            e.addSuppressed(failure);
            next.close();
            throw e;
        } finally {
            if (formed.remove(old)) {
                old.close(); // aborted: waits for nobody
            }
        }
        formed.add(next);
        group = next;
        try {
            if (next.worldSize() < minRanks) {
                throw withCause(new SymmemException("rank=" + next.rank() + ": " + next.worldSize() + " ranks left after "
                        + gone + " died, fewer than minRanks=" + minRanks + " (the model of the old group is freed; fix: restart"
                        + " the job from its checkpoints, or lower minRanks)"), failure);
            }
            // the survivors completed the same steps (a collective completes on every rank or on none); checked, not assumed
            List<byte[]> counts = next.allGatherBytes("shrink-completed", ByteBuffer.allocate(Long.BYTES).putLong(completed)
                    .array());
            long[] all = counts.stream().mapToLong(b -> ByteBuffer.wrap(b).getLong()).toArray();
            if (Arrays.stream(all).anyMatch(c -> c != completed)) {
                throw withCause(new SymmemException("rank=" + next.rank() + ": the survivors completed different steps "
                        + Arrays.toString(all) + " (by new rank) when " + gone + " died; each holds only its own step's"
                        + " start, so they cannot go on from one state (fix: restart the job from its checkpoints)"), failure);
            }
            mlp = new FullyShardedMlp(next, tokens, widths, Sharding.NONE, adam);
        } finally {
            next.transport().rebuilt(next); // what the old group left for the rebuild and nobody took goes now
        }
        mlp.restore(start);
        shrinks.add(new Shrink(completed, survivors.dead(), old.worldSize(), next.worldSize(), System.nanoTime() - t0));
    }

    private static SymmemException withCause(SymmemException e, Throwable cause) {
        e.initCause(cause);
        return e;
    }

    /** The ranks of {@code g} whose processes are known gone, for messages. */
    private static List<Integer> deadRanks(Group g) {
        List<Integer> dead = new ArrayList<>();
        for (int p = 0; p < g.worldSize(); p++) {
            if (!g.isAlive(p)) {
                dead.add(p);
            }
        }
        return dead;
    }

    private static String gone(Group g) {
        List<Integer> dead = deadRanks(g);
        return dead.isEmpty() ? "a peer" : "ranks " + dead + " (exited)";
    }

    /** {@return the current group: the first one, or the survivors' after a shrink} */
    public Group group() {
        return group;
    }

    /** {@return the current model (a new one after each shrink)} */
    public FullyShardedMlp model() {
        return mlp;
    }

    /** {@return the steps completed} */
    public long steps() {
        return completed;
    }

    /** {@return the shrinks so far, oldest first} */
    public List<Shrink> shrinks() {
        return List.copyOf(shrinks);
    }

    private void checkOpen() {
        if (closed) {
            throw new IllegalStateException("ShrinkingMlp is closed (fix: use it before close(), or create a new one)");
        }
    }

    /**
     * Collective over the current group: closes the model; the groups formed by shrinking are released on their
     * transport and closed (the first group stays the caller's).
     */
    @Override
    public void close() {
        if (closed) {
            return;
        }
        closed = true;
        try {
            mlp.close();
        } finally {
            for (Group g : formed) {
                g.transport().release(g);
                g.close();
            }
            formed.clear();
        }
    }
}
