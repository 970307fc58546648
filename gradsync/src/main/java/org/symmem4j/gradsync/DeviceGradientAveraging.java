package org.symmem4j.gradsync;

import java.util.Objects;
import org.symmem4j.parallel.Algorithm;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.DeviceCommunicator;
import org.symmem4j.parallel.ReduceOp;

/**
 * Data-parallel gradient averaging in place on a GPU, in the gradient owner's stream order: the average over the
 * group's ranks of each rank's {@link DeviceGradients}, written back into the same device buffer. Enqueued, not
 * waited for:
 *
 * <pre>
 *   writer's stream:   ... backward pass ──┐                          ┌── optimizer step ...
 *                                         event                      event
 *   communicator's stream:                  └─ all-reduce (AVG) in place ┘
 * </pre>
 *
 * The writer's work so far (the backward pass) is ordered before the all-reduce ({@link DeviceCommunicator#orderAfter})
 * and the writer's later work (the update) after it ({@link DeviceCommunicator#orderBefore}); the host never waits.
 * The algorithm is the policy's for the gradient's size: our ONE_SHOT/TWO_SHOT kernels or NCCL, each dividing by the
 * ranks inside the collective (AVG), every rank getting the same bits.
 *
 * <p>One per rank and communicator; not thread-safe (the rank's training thread calls it).
 */
public final class DeviceGradientAveraging {

    private final Communicator comm;
    private final DeviceCommunicator device;
    private final AlgorithmPolicy policy;

    /**
     * @param comm   this rank's communicator on a GPU transport
     * @param policy picks the all-reduce for the gradient's size
     * @throws IllegalArgumentException when the communicator has no GPU side ({@code unwrap(DeviceCommunicator.class)})
     */
    public DeviceGradientAveraging(Communicator comm, AlgorithmPolicy policy) {
        this.comm = Objects.requireNonNull(comm, "comm");
        this.policy = Objects.requireNonNull(policy, "policy");
        this.device = comm.unwrap(DeviceCommunicator.class).orElseThrow(() -> new IllegalArgumentException(
                "device gradient averaging needs a GPU communicator; " + comm.transportName() + " has no DeviceCommunicator"
                        + " (create the group on CudaTransport, or average host gradients with GradientSynchronizer)"));
    }

    /**
     * Enqueues the average of {@code gradients} over the group, in place, between the writer's work so far and its
     * later work. Collective: every rank calls it with a gradient of the same size and type.
     *
     * @param gradients this rank's gradient
     * @return the algorithm used
     */
    public Algorithm average(DeviceGradients gradients) {
        Objects.requireNonNull(gradients, "gradients");
        long count = gradients.elements();
        Algorithm algorithm = policy.choose(comm, count, gradients.dtype(), ReduceOp.AVG);
        gradients.beforeSync();
        device.orderAfter(gradients.stream());
        comm.allReduce(gradients.buffer(), count, gradients.dtype(), ReduceOp.AVG, algorithm);
        device.orderBefore(gradients.stream());
        gradients.afterSync();
        return algorithm;
    }
}
