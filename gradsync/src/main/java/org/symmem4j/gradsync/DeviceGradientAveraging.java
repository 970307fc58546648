package org.symmem4j.gradsync;

import java.lang.foreign.MemorySegment;
import java.util.Objects;
import org.symmem4j.parallel.Algorithm;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.DeviceCommunicator;
import org.symmem4j.parallel.ReduceOp;

/**
 * Data-parallel gradient averaging in place on a GPU, in the gradient owner's stream order: the average (or the sum)
 * over the group's ranks of each rank's {@link DeviceGradients}, written back into the same device buffer. Enqueued,
 * not waited for:
 *
 * <pre>
 *   writer's stream:   ... backward pass ──┐                                ┌── optimizer step ...
 *                                         event                            event
 *   communicator's stream:                  └─ all-reduce (AVG or SUM) in place ┘
 * </pre>
 *
 * The writer's work so far (the backward pass) is ordered before the all-reduce ({@link DeviceCommunicator#orderAfter})
 * and the writer's later work (the update) after it ({@link DeviceCommunicator#orderBefore}); the host never waits.
 * The algorithm is the policy's for the gradient's size: our ONE_SHOT/TWO_SHOT kernels or NCCL, every rank getting
 * the same bits. {@link #average} divides by the ranks inside the collective (AVG); {@link #sum} leaves the division
 * to the caller, for gradients that are sums over examples and must be divided by the examples of the whole step
 * rather than by the ranks (ranks with batches of different sizes).
 *
 * <p>With {@link SyncMetrics}, each all-reduce's GPU time goes to the same timer as the host's all-reduces, read
 * from CUDA events after the GPU ran it (no added synchronisation).
 *
 * <p>One per rank and communicator; not thread-safe (the rank's training thread calls it).
 */
public final class DeviceGradientAveraging {

    private final Communicator comm;
    private final DeviceCommunicator device;
    private final AlgorithmPolicy policy;
    /** Whether the communicator times the all-reduces into metrics: then each call first reports the finished ones. */
    private final boolean timed;

    /**
     * Without metrics.
     *
     * @param comm   this rank's communicator on a GPU transport
     * @param policy picks the all-reduce for the gradient's size
     * @throws IllegalArgumentException when the communicator has no GPU side ({@code unwrap(DeviceCommunicator.class)})
     */
    public DeviceGradientAveraging(Communicator comm, AlgorithmPolicy policy) {
        this(comm, policy, null);
    }

    /**
     * With each all-reduce's GPU time and bytes recorded in {@code metrics} ({@link SyncMetrics#recordAllReduce}: the
     * {@code symmem.allreduce.duration} timer and {@code symmem.allreduce.bytes} summary the host path feeds), from
     * CUDA events read back off the critical path ({@link DeviceCommunicator#timeAllReduces}): each call first reports
     * the all-reduces that have finished since the last one, without waiting; the communicator's {@code synchronize}
     * and close report the rest. Construct it before the rank's first collective or after a synchronize every rank
     * has passed (the first construction on a communicator creates its CUDA events).
     *
     * @param comm    this rank's communicator on a GPU transport
     * @param policy  picks the all-reduce for the gradient's size
     * @param metrics receives the timed all-reduces, or null for none
     * @throws IllegalArgumentException when the communicator has no GPU side ({@code unwrap(DeviceCommunicator.class)})
     */
    public DeviceGradientAveraging(Communicator comm, AlgorithmPolicy policy, SyncMetrics metrics) {
        this.comm = Objects.requireNonNull(comm, "comm");
        this.policy = Objects.requireNonNull(policy, "policy");
        this.device = comm.unwrap(DeviceCommunicator.class).orElseThrow(() -> new IllegalArgumentException(
                "device gradient averaging needs a GPU communicator; " + comm.transportName() + " has no DeviceCommunicator"
                        + " (fix: create the group on CudaTransport, or average host gradients with GradientSynchronizer)"));
        this.timed = metrics != null;
        if (timed) {
            device.timeAllReduces(metrics::recordAllReduce);
        }
    }

    /**
     * Enqueues the average of {@code gradients} over the group, in place, between the writer's work so far and its
     * later work. Collective: every rank calls it with a gradient of the same size and type.
     *
     * @param gradients this rank's gradient
     * @return the algorithm used
     */
    public Algorithm average(DeviceGradients gradients) {
        return allReduce(gradients, ReduceOp.AVG);
    }

    /**
     * Enqueues the sum of {@code gradients} over the group, in place, in the same order as {@link #average}: for a
     * caller that divides the sum itself, on the writer's stream after this call (which the ordering puts after the
     * sum). Collective: every rank calls it with a gradient of the same size and type.
     *
     * @param gradients this rank's gradient
     * @return the algorithm used
     */
    public Algorithm sum(DeviceGradients gradients) {
        return allReduce(gradients, ReduceOp.SUM);
    }

    private Algorithm allReduce(DeviceGradients gradients, ReduceOp op) {
        Objects.requireNonNull(gradients, "gradients");
        // first: an owner that keeps host and device copies (ND4J) has a valid device address, and the size it
        // stands for, only once its device copy is current
        gradients.beforeSync();
        long count = gradients.elements();
        MemorySegment buffer = gradients.buffer();
        DType dtype = gradients.dtype();
        Algorithm algorithm = policy.choose(comm, count, dtype, op);
        if (timed) {
            device.harvestTimings(); // the earlier steps' all-reduces that have run: event queries, no wait
        }
        device.orderAfter(gradients.stream());
        comm.allReduce(buffer, count, dtype, op, algorithm);
        device.orderBefore(gradients.stream());
        gradients.afterSync();
        return algorithm;
    }
}
