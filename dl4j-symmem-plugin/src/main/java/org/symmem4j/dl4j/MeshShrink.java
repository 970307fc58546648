package org.symmem4j.dl4j;

import java.util.ArrayList;
import java.util.List;
import org.deeplearning4j.nn.api.Model;
import org.deeplearning4j.nn.graph.ComputationGraph;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.symmem4j.dl4j.tensor.TensorParallel;
import org.symmem4j.dl4j.train.RankRuntime;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.DeviceMesh;
import org.symmem4j.parallel.Group;

/**
 * {@link WorkerFailure#SHRINK} on a {@code dp x tp} mesh ({@code group(mesh, "dp")}, docs/shrink.md): a dead rank takes
 * its whole data-parallel replica with it, since its tensor-parallel peers cannot compute a layer without its shard.
 * After a step failed on a peer's death, every rank shrinks the mesh along the data-parallel dimension
 * ({@link DeviceMesh#shrink(String)}): the dead replica's live ranks leave ({@link ReplicaLostException} from their
 * {@code fit()}), the others form the survivors' world and its mesh, with new data-parallel groups over the remaining
 * replicas and new tensor-parallel groups of the same ranks as before; the network is attached to a communicator over
 * its new tensor-parallel group. The survivors' agreement on the step to go on from spans the whole new world (every
 * replica's tp ranks must go on from the same step), not just one data-parallel group.
 *
 * <p>What this holds: the mesh the wrapper trains on now, and what the shrinks formed (the survivors' world, its
 * mesh, the tensor-parallel communicator), which it closes: at the next shrink (after the network was attached to the
 * new one), or with the wrapper (the network detached from it first). The mesh and the communicator given by the
 * caller stay the caller's (aborted after a shrink: their close waits for nobody).
 */
final class MeshShrink implements AutoCloseable {

    private final String dataParallel;
    private final String tensorParallel;
    /** The mesh trained on now: the caller's, then the one the last shrink formed. */
    private DeviceMesh mesh;
    /** Formed by a shrink (null before): closed by the next one or {@link #close()}, the communicator first. */
    private Communicator formedCommunicator;
    private DeviceMesh formedMesh;
    /** The network a shrink attached to {@link #formedCommunicator}: detached before {@link #close()} closes it. */
    private Model attached;

    MeshShrink(DeviceMesh mesh, String dataParallel, String tensorParallel) {
        this.mesh = mesh;
        this.dataParallel = dataParallel;
        this.tensorParallel = tensorParallel;
    }

    /** What a survivor goes on with: the world (for the agreement), its data-parallel group, the lost replicas. */
    record Formed(Group world, Group dataParallelGroup, List<Integer> deadReplicas) {
    }

    /**
     * The {@code build()} checks of SHRINK on a mesh; null when there is none to shrink (no mesh given). Refused, each
     * with the fix: a tensor-parallel network in group mode without the mesh, a mesh of other than two dimensions, a
     * network not attached to the mesh's other dimension, and a mesh whose world cannot shrink (threads of one JVM, or
     * processes not started by {@code symmem4j-run --on-failure shrink}). ZeRO stages 1 to 3 go back to the tp shards'
     * checkpoint ({@link ShardedShrink}).
     */
    static MeshShrink checkBuild(DeviceMesh mesh, String dataParallel, Group group, Model model) {
        Group tpGroup = TensorParallel.groupOrNull(model);
        String restart = "recover by RESTART: onWorkerFailure(FAIL) with checkpointEvery(k, dir).resumeFrom(dir) under"
                + " symmem4j-run --max-restarts N, which resumes every tp shard from the newest complete checkpoint";
        if (mesh == null) {
            if (tpGroup != null && group != null) {
                throw new IllegalArgumentException("onWorkerFailure=SHRINK with a tensor-parallel network on group(" + group
                        + ") alone: a dead rank takes its whole data-parallel replica with it (its tp peers cannot go on"
                        + " without its shard), so the wrapper must drop the replica from the mesh and rebuild the dp"
                        + " and tp groups; expected the mesh (fix: builder(network).group(mesh, \"dp\") with the"
                        + " DeviceMesh the dp group comes from, or " + restart + ")");
            }
            return null;
        }
        List<String> names = mesh.dimensionNames();
        if (names.size() != 2) {
            throw new IllegalArgumentException("onWorkerFailure=SHRINK on mesh " + mesh + ": expected a dp x tp mesh of"
                    + " two dimensions, found " + names + " (the wrapper rebuilds the data-parallel and tensor-parallel"
                    + " groups only; fix: DeviceMesh.of(world, \"dp\", d, \"tp\", t), or " + restart + ")");
        }
        String other = names.get(0).equals(dataParallel) ? names.get(1) : names.get(0);
        if (tpGroup != mesh.group(other)) {
            throw new IllegalArgumentException("onWorkerFailure=SHRINK on mesh " + mesh + " with dp dimension '"
                    + dataParallel + "': expected the network's tensor-parallel layers attached to a communicator over"
                    + " mesh.group(\"" + other + "\"), found " + (tpGroup == null ? "no tensor-parallel layer attached"
                    : "them attached to " + tpGroup) + " (a dead rank takes out its replica: the ranks of its '" + other
                    + "' group; fix: TensorParallel.attach(network, Communicator.create(mesh.group(\"" + other
                    + "\"))) before build(), or group(mesh.group(\"" + dataParallel + "\")) with onWorkerFailure(FAIL))");
        }
        if (!mesh.group().canShrink()) {
            throw new IllegalArgumentException("onWorkerFailure=SHRINK on mesh " + mesh + " whose group " + mesh.group()
                    + " cannot shrink in place: expected processes on their host transport started by symmem4j-run"
                    + " --on-failure shrink (the launcher names the dead ranks), or threads of one JVM whose world"
                    + " InJvmWorld.createShrinking made (it names the ranks whose tasks failed) (fix: one process per"
                    + " rank under symmem4j-run --on-failure shrink, InJvmWorld.createShrinking(n, options) for thread"
                    + " ranks, or " + restart + ")");
        }
        return new MeshShrink(mesh, dataParallel, other);
    }

    /**
     * After a step failed on a peer's death, this rank's worker stopped: shrinks the mesh, and on a survivor attaches
     * the network to its new tensor-parallel group.
     *
     * @return the survivors' world and data-parallel group (owned here)
     * @throws ReplicaLostException on a rank whose replica was lost (it leaves)
     * @throws DataParallelTrainingException when the mesh could not shrink, or fewer than {@code minWorkers} replicas
     *                                       are left
     */
    Formed shrink(ModelReplica model, DataParallelSteps.LostWorkers lost, Throwable cause, int minWorkers) {
        int before = mesh.size(dataParallel);
        int replica = mesh.coordinate(dataParallel);
        DeviceMesh.Shrunk s;
        try {
            s = mesh.shrink(dataParallel);
        } catch (RuntimeException e) {
            DataParallelTrainingException t = new DataParallelTrainingException("data-parallel fit failed: step "
                    + lost.step() + " failed (" + cause + ") and the dp x tp mesh " + mesh + " could not shrink in"
                    + " place: " + e.getMessage() + "; the model is as it was before this fit (fix: restart the run,"
                    + " building with checkpointEvery(k, dir).resumeFrom(dir) under symmem4j-run --max-restarts N so it"
                    + " resumes from the newest complete checkpoint)", mesh.group().rank(), lost.step(), e);
            t.addSuppressed(lost.failure());
            throw t;
        }
        if (s.left()) {
            ReplicaLostException e = new ReplicaLostException("data-parallel fit: world rank " + mesh.group().rank()
                    + " (" + dataParallel + "=" + replica + ", " + tensorParallel + "=" + mesh.coordinate(tensorParallel)
                    + ") leaves at step " + lost.step() + ": rank(s) " + s.dead() + " of its replica died, and its "
                    + tensorParallel + " peers cannot go on without their shards; the other " + (before - 1)
                    + " replica(s) go on without this one; the model is as it was before this fit (fix: nothing to fix"
                    + " here; end this process, with status 0, so the launcher's job ends when the survivors finish)",
                    replica, lost.step(), s.dead(), cause);
            e.addSuppressed(lost.failure());
            throw e;
        }
        DeviceMesh next = s.mesh();
        Communicator communicator = null;
        try {
            ShardedShrink.requireMinWorkers(lost, s.lostCoordinates(), next.size(dataParallel), before, cause, minWorkers);
            communicator = Communicator.create(next.group(tensorParallel));
            attach(model.model(), communicator);
        } catch (RuntimeException e) {
            RankRuntime.closeQuietly(communicator);
            Group world = next.group();
            RankRuntime.closeQuietly(next);
            RankRuntime.closeQuietly(world);
            throw e;
        }
        adopt(model.model(), communicator, next);
        return new Formed(next.group(), next.group(dataParallel), s.lostCoordinates());
    }

    /**
     * Takes what a shrink formed, once {@code network} was attached to {@code communicator} over {@code next}'s
     * tensor-parallel group: the mesh trained on from now, owned here with its world and the communicator. An earlier
     * shrink's are closed now (the network no longer uses them); the caller's stay the caller's.
     */
    void adopt(Model network, Communicator communicator, DeviceMesh next) {
        closeFormed();
        formedCommunicator = communicator;
        formedMesh = next;
        attached = network;
        mesh = next;
    }

    /**
     * The survivors' agreed iteration count is this rank's failed step's start or end. On a mesh it may not be: a rank
     * that dies after its tp peers' last collective of a step's backward pass lets its peers' dp group complete that
     * step while the dead rank's own dp group fails it, so the first group fails the next step, one step later, and
     * holds no copy of the earlier step's start. Fails the fit with that reason instead of going on from mixed states.
     */
    static void requireOneStepApart(DataParallelSteps.LostWorkers lost, int agreed, Throwable cause) {
        if (agreed == lost.iterationAtStart() || agreed == lost.iterationAtStart() + 1) {
            return;
        }
        DataParallelTrainingException e = new DataParallelTrainingException("data-parallel fit failed: step "
                + lost.step() + " failed (" + cause + ") on a dp x tp mesh whose survivors stand at different steps:"
                + " this rank's step started at iteration " + lost.iterationAtStart() + ", the survivors' agreed"
                + " iteration is " + agreed + " (a rank died inside a step after its tp peers' last collective, so their"
                + " dp group completed the step while its own did not); expected every survivor at the failed step's"
                + " start or end; the model is as it was before this fit (fix: restart the run, building with"
                + " checkpointEvery(k, dir).resumeFrom(dir) under symmem4j-run --max-restarts N)", -1, lost.step(),
                cause);
        e.addSuppressed(lost.failure());
        throw e;
    }

    private static void attach(Model model, Communicator communicator) {
        if (model instanceof MultiLayerNetwork n) {
            TensorParallel.attach(n, communicator);
        } else {
            TensorParallel.attach((ComputationGraph) model, communicator);
        }
    }

    /** The mesh trained on now (the caller's until a shrink). */
    DeviceMesh mesh() {
        return mesh;
    }

    private void closeFormed() {
        List<AutoCloseable> order = new ArrayList<>();
        order.add(formedCommunicator); // its memories first, then the mesh's sub-groups, then the world
        order.add(formedMesh);
        order.add(formedMesh == null ? null : formedMesh.group());
        for (AutoCloseable c : order) {
            RankRuntime.closeQuietly(c);
        }
        formedCommunicator = null;
        formedMesh = null;
    }

    /**
     * Closes what the shrinks formed; the caller's mesh and communicator stay the caller's. The network, when a shrink
     * attached it to the communicator closed here and nobody attached it elsewhere since, is detached first
     * ({@link TensorParallel#detach}): it holds no closed communicator, and using it fails saying it has no group until
     * the caller attaches it again.
     */
    @Override
    public void close() {
        if (attached != null && formedCommunicator != null
                && TensorParallel.groupOrNull(attached) == formedCommunicator.group()) {
            TensorParallel.detach(attached);
        }
        attached = null;
        closeFormed();
    }
}
