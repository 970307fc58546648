package org.symmem4j.dl4j;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.symmem4j.dl4j.train.RankRuntime;
import org.symmem4j.gradsync.SyncMetrics;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.SymmetricMemory;
import org.symmem4j.parallel.affinity.RankAffinity;
import org.symmem4j.parallel.group.InJvmWorld;
import org.symmem4j.parallel.sync.BackoffIdleStrategy;

/**
 * The data-parallel workers this process runs, one replica each, and their replicas' sync with the user's model. In
 * thread mode, every worker of the run, as threads of an in-JVM world of the wrapper's own; in group mode, the one
 * worker of this process's rank of the user's group. Started at the first {@code fit} (and again after a failed one,
 * which stops them), kept until the wrapper closes. The model and the replicas are touched only while the workers are
 * idle (their task queues order the workers' last writes before the caller's reads). Logs as the wrapper.
 */
final class DataParallelWorkers {

    private static final Logger LOG = LoggerFactory.getLogger(SymmemParallelWrapper.class);

    /**
     * Longest park of a worker waiting for its peers inside a collective. Workers arrive at the
     * sync milliseconds apart (the slowest computes longest); the group's default back-off parks up
     * to 1 ms at a time, so a waiter could wake up to 1 ms after the last peer arrived, at each
     * barrier of each bucket. With one worker per core nothing else needs those cores, so waking
     * every 50 us costs nothing and bounds that lateness.
     */
    static final long MAX_PARK_NANOS = 50_000;

    private final ModelReplica model;
    private final DataParallelSettings settings;
    private final SyncMetrics metrics;
    /** Thread mode's world, created with the workers; null in group mode (the user's group stays theirs). */
    private InJvmWorld world;
    /** This process's workers, in rank order; null until started and after a stop. */
    private List<DataParallelWorker> workers;

    DataParallelWorkers(ModelReplica model, DataParallelSettings settings, SyncMetrics metrics) {
        this.model = model;
        this.settings = settings;
        this.metrics = metrics;
    }

    /**
     * The world of data-parallel workers that are threads of this JVM (thread mode, and DL4J's ParallelWrapper with
     * {@link SymmemGradientsAccumulator}): every wait bounded by {@code timeout}, a waiter parking at most
     * {@link #MAX_PARK_NANOS} at a time.
     *
     * @param workers the worker threads, one rank each
     * @param timeout the bound of every wait
     * @return a new world; its creator closes it
     */
    static InJvmWorld threadWorld(int workers, Duration timeout) {
        return InJvmWorld.create(workers, GroupOptions.defaults().withTimeout(timeout)
                .withIdleStrategy(() -> new BackoffIdleStrategy(BackoffIdleStrategy.DEFAULT_MAX_SPINS,
                        BackoffIdleStrategy.DEFAULT_MAX_YIELDS, BackoffIdleStrategy.DEFAULT_MIN_PARK_NANOS, MAX_PARK_NANOS)));
    }

    /** {@return whether the workers run (started, not stopped since)} */
    boolean running() {
        return workers != null;
    }

    /** {@return the running workers, in rank order; valid until {@link #stop}} */
    List<DataParallelWorker> all() {
        return workers;
    }

    /** Starts the workers if needed, and gives the replicas the model's state if it changed since the last fit. */
    void ensureStarted() {
        ModelReplica.ensureInitialized(model);
        if (workers == null) {
            // (every worker runs ND4J ops at once: train() limits ND4J's threads to each one's share)
            DataParallelWorker.ShardSource shardSource = null;
            if (settings.sharding() != null) {
                // DL4J's own updater of the user's model: its blocks are the layout, its full state
                // view is where shards start from (and are gathered into after each fit)
                UpdaterLayout layout = UpdaterLayout.of(model.dl4jUpdater(), model.params().length());
                // (a hollow model, stage 3 from a configuration, has no state: each worker initialises its shard)
                shardSource = new DataParallelWorker.ShardSource(layout, ConfigurationStart.isHollow(model) ? null
                        : model.updaterState(),
                        settings.sharding() == ZeroStage.PARAMETERS ? model : null);
            }
            List<StateUpdateReduction.Entry> stateEntries = StateUpdateReduction.find(
                    UpdaterLayout.variablesOf(model.dl4jUpdater()), model.trainables());
            if (settings.sharding() == ZeroStage.PARAMETERS) {
                FullySharded.check(model); // before any worker starts: what stage 3 cannot drive
            }
            logStateEntries(stateEntries);
            // symmem4j.affinity in thread mode: checked before any worker starts; each pins its thread before it joins
            // (in group mode the process group pinned this whole process)
            RankAffinity affinity = settings.group() == null ? RankAffinity.fromConfiguration(settings.workers())
                    : RankAffinity.OFF;
            if (settings.group() == null) {
                world = threadWorld(settings.workers(), settings.timeout());
            }
            List<DataParallelWorker> started = new ArrayList<>();
            for (int r = settings.firstLocalRank(); r < settings.firstLocalRank() + settings.localWorkers(); r++) {
                BackpropProgress progress = settings.overlap() ? new BackpropProgress() : null;
                DataParallelWorker.GroupSource source = settings.group() == null ? DataParallelWorker.GroupSource.threadOf(world, r)
                        : DataParallelWorker.GroupSource.member(settings.group());
                if (settings.sharding() == ZeroStage.PARAMETERS) {
                    // stage 3 builds its replica on the worker's thread, over memory the group allocates there
                    started.add(new DataParallelWorker(r, source, null, null, settings, metrics, shardSource, stateEntries, null));
                    continue;
                }
                // in group mode the gradient lives in symmetric memory of the group, where the peers (other
                // processes, which cannot map this one's heap) read it: allocated collectively, here, on every rank;
                // in GPU mode it stays in ND4J's device memory, which the collectives take as it is
                SymmetricMemory gradientHome = settings.group() == null || settings.gpuMode() ? null
                        : SymmetricMemory.allocate(settings.group(), model.params().length() * model.params().dataType().width());
                ModelReplica replica = model.newReplica(progress, settings.sharding() != null,
                        gradientHome == null ? null : gradientHome.local());
                if (settings.workspaceMode() != null) {
                    // as ParallelWrapper's trainers set it on their replicas' configurations; DL4J reads it at every fit
                    replica.setTrainingWorkspaceMode(settings.workspaceMode());
                }
                started.add(new DataParallelWorker(r, source, replica, gradientHome,
                        settings, metrics, shardSource, stateEntries, progress));
            }
            workers = started;
            for (int w = 0; w < started.size(); w++) {
                started.get(w).pinTo(affinity, w);
            }
            RankRuntime.startAll(workers, settings.timeout(), "data-parallel workers", this::stop);
            LOG.info("symmem4j data parallelism: " + settings.workers() + " workers"
                    + (settings.group() == null ? "" : " (rank " + settings.group().rank() + " of the group here, transport "
                    + settings.group().transport().name() + ")") + (settings.gpuMode()
                    ? ", GPU mode (the gradient summed and divided on the device, on ND4J's stream)" : "") + ", policy "
                    + settings.policy() + ", ND4J threads per worker " + settings.ompThreadsPerWorker()
                    + (settings.sharding() == null ? "" : ", ZeRO sharding " + settings.sharding())
                    + (settings.overlap() ? ", sync overlapped with backprop" : "")
                    + (settings.accumulation() > 1 ? ", " + settings.accumulation() + " micro-batches per worker per step" : "")
                    + (settings.gradientTransfer() == GradientTransfer.BFLOAT16 ? ", bf16 gradient transfer" : "")
                    + (settings.prefetchBuffer() > 0 ? ", " + settings.prefetchBuffer() + " batches prefetched" : "")
                    + (settings.workspaceMode() != null ? ", training workspaces " + settings.workspaceMode() : "")
                    + (settings.syncBatchNorm() ? ", synchronized BatchNorm" : ""));
        } else if (!replicasMatchModel()) {
            pushModelToReplicas();
        }
    }

    /** Says which gradient-view entries merge as state updates, and warns about those merged by the generic rule. */
    private static void logStateEntries(List<StateUpdateReduction.Entry> entries) {
        if (entries.isEmpty()) {
            return;
        }
        List<StateUpdateReduction.Entry> generic = entries.stream()
                .filter(e -> e.merge() == StateUpdateReduction.Merge.EXAMPLE_WEIGHTED_AVERAGE).toList();
        LOG.info("symmem4j: state updates merged as one model on the merged batch computes them: "
                + entries);
        if (!generic.isEmpty()) {
            LOG.warn("symmem4j: layers=" + generic + " write state updates into the gradient"
                    + " view (updaterDivideByMinibatch=false) but are not a layer kind symmem4j knows; they are merged as"
                    + " the example-weighted average of the workers' updates, exact only if the update is a mean over the"
                    + " batch's examples (check the layer's backprop, or train it with plain fit())");
        }
    }

    /**
     * Stops the workers (each thread after its current task) and closes thread mode's world; a later
     * {@link #ensureStarted} starts new ones.
     */
    void stop() {
        if (workers == null) {
            return;
        }
        for (DataParallelWorker w : workers) {
            w.submit(new DataParallelWorker.Task(null, false, 0, 0, -1, false, false, null));
        }
        for (DataParallelWorker w : workers) {
            try {
                w.join();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
        if (world != null) {
            world.close(); // the wrapper's own world; a group the user gave stays open
        }
        workers = null;
        world = null;
    }

    /**
     * The model takes the replicas' state: parameters and counters from replica 0 (all are
     * bitwise equal), the updater state from replica 0, or with sharding gathered from every
     * worker's shard into the model's full DL4J state view. Workers must be idle.
     */
    void pullModelFromReplicas() {
        ModelReplica first = workers.getFirst().replica();
        if (settings.sharding() == null) {
            model.copyStateFrom(first);
            return;
        }
        if (ConfigurationStart.isHollow(model)) {
            // stage 3 from a configuration: the parameters and updater state stay in the shards, the model takes the counters
            model.setIterationCount(first.iterationCount());
            model.setEpochCount(first.epochCount());
            return;
        }
        if (settings.sharding() == ZeroStage.PARAMETERS) {
            if (settings.group() != null) {
                // group mode: the other blocks live in the other ranks' processes; gathered unit by unit (collective)
                workers.getFirst().fullySharded().gatherInto(model.params());
            } else {
                for (DataParallelWorker w : workers) {
                    w.fullySharded().copyOwnBlocksTo(model.params());
                }
            }
            model.setIterationCount(first.iterationCount());
            model.setEpochCount(first.epochCount());
        } else {
            model.copyParamsAndCountersFrom(first);
        }
        INDArray full = model.updaterState();
        if (full != null) {
            if (settings.group() != null) {
                // group mode: the other shards live in the other ranks' processes; every rank gathers them (collective)
                workers.getFirst().sharded().gatherFullState(full);
            } else {
                for (DataParallelWorker w : workers) {
                    w.sharded().exportState(full);
                }
            }
        }
    }

    /** Whether the replicas hold the model's state (it may have been changed between fits). Workers must be idle. */
    boolean replicasMatchModel() {
        ModelReplica first = workers.getFirst().replica();
        if (settings.sharding() == null) {
            return first.sameStateAs(model);
        }
        if (settings.sharding() == ZeroStage.PARAMETERS) {
            if (first.iterationCount() != model.iterationCount() || first.epochCount() != model.epochCount()) {
                return false;
            }
            if (ConfigurationStart.isHollow(model)) {
                return true; // the model holds no parameters of its own: the shards are the model
            }
            for (DataParallelWorker w : workers) {
                if (!w.fullySharded().ownBlocksMatch(model.params())) {
                    return false;
                }
            }
        } else if (!first.sameParamsAndCountersAs(model)) {
            return false;
        }
        INDArray full = model.updaterState();
        for (DataParallelWorker w : workers) {
            if (full != null && !w.sharded().stateMatches(full)) {
                return false;
            }
        }
        return true;
    }

    /** Every replica (and shard) takes the model's state. Workers must be idle. */
    void pushModelToReplicas() {
        INDArray full = settings.sharding() == null ? null : model.updaterState();
        for (DataParallelWorker w : workers) {
            if (settings.sharding() == null) {
                w.replica().copyStateFrom(model);
            } else {
                if (ConfigurationStart.isHollow(model)) {
                    w.replica().setIterationCount(model.iterationCount());
                    w.replica().setEpochCount(model.epochCount());
                    continue; // the counters only: the shards are the model's parameters and state
                }
                if (settings.sharding() == ZeroStage.PARAMETERS) {
                    w.fullySharded().copyOwnBlocksFrom(model.params());
                    w.replica().setIterationCount(model.iterationCount());
                    w.replica().setEpochCount(model.epochCount());
                } else {
                    w.replica().copyParamsAndCountersFrom(model);
                }
                if (full != null) {
                    w.sharded().importState(full);
                }
            }
        }
    }

    /**
     * What each worker's replica holds, from its actual arrays (empty before the first start): with sharding, the
     * updater state is the worker's shard only.
     *
     * @return one entry per worker, in worker order; sizes in bytes
     */
    List<WorkerMemory> memory() {
        if (workers == null) {
            return List.of();
        }
        List<WorkerMemory> out = new ArrayList<>();
        for (int i = 0; i < workers.size(); i++) {
            DataParallelWorker w = workers.get(i);
            ModelReplica r = w.replica();
            long width = r.params().dataType().width();
            long count = r.params().length();
            ShardedUpdater s = w.sharded();
            FullySharded fs = w.fullySharded();
            if (fs != null) {
                // stage 3: what the sparse views hold now, measured, not their size
                out.add(new WorkerMemory(settings.firstLocalRank() + i, s.start(), s.end(), fs.residentParameterBytes(),
                        fs.residentGradientBytes(), s.stateBytes()));
                continue;
            }
            INDArray state = s == null ? r.updaterState() : null;
            out.add(new WorkerMemory(settings.firstLocalRank() + i, s == null ? 0 : s.start(), s == null ? count : s.end(),
                    count * width, r.gradientView().length() * width,
                    s != null ? s.stateBytes() : state == null ? 0 : state.length() * state.dataType().width()));
        }
        return out;
    }

    /** The replicas, worker order (empty before the first start). */
    List<ModelReplica> replicas() {
        return workers == null ? List.of() : workers.stream().map(DataParallelWorker::replica).toList();
    }

    /** This process's workers' updater-state shards, in rank order, as checkpoints save and restore them. */
    List<ShardedCheckpoints.Shard> shards() {
        List<ShardedCheckpoints.Shard> shards = new ArrayList<>(workers.size());
        for (int j = 0; j < workers.size(); j++) {
            ShardedUpdater s = workers.get(j).sharded();
            ModelReplica replica = workers.get(j).replica();
            shards.add(new ShardedCheckpoints.Shard(settings.firstLocalRank() + j, s.stage().name(),
                    replica.params().dataType(), s.layout().paramCount(),
                    List.of(new ShardedCheckpoints.Range(s.start(), s.end())), s.layout().stateCount(),
                    s.layout().stateRanges(s.start(), s.end()), s.layout().fingerprint(), replica.iterationCount(),
                    replica.epochCount(), s.state()));
        }
        return shards;
    }

    /**
     * What this process's sharded workers restore from a checkpoint: ZeRO shards of either stage (stages 1 and 2 keep
     * the same updater state, cut the same way) written by any worker count, format-1 files' state laid out by DL4J's
     * updater blocks, and a model-only checkpoint's full state cut into the shards. Workers started, sharded.
     */
    ShardedCheckpoints.Reads checkpointReads() {
        UpdaterLayout layout = workers.getFirst().sharded().layout();
        return new ShardedCheckpoints.Reads(java.util.Set.of(ZeroStage.OPTIMIZER_STATE.name(), ZeroStage.GRADIENTS.name()),
                "ZeRO shards of stage OPTIMIZER_STATE or GRADIENTS (the two keep the same updater state)",
                r -> layout.stateRanges(r.start(), r.end()), true, false);
    }

    /** The end of a fit is an epoch, as in DL4J's fit(iterator): every replica counts it. */
    void countEpoch() {
        for (DataParallelWorker w : workers) {
            w.replica().setEpochCount(w.replica().epochCount() + 1);
        }
    }
}
