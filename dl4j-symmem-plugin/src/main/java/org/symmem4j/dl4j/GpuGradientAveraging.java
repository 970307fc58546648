package org.symmem4j.dl4j;

import java.util.Objects;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.api.ops.impl.indexaccum.FirstIndex;
import org.nd4j.linalg.factory.Nd4j;
import org.nd4j.linalg.indexing.conditions.Conditions;
import org.symmem4j.dl4j.nd4j.Nd4jDeviceGradients;
import org.symmem4j.gradsync.AlgorithmPolicy;
import org.symmem4j.gradsync.DeviceGradientAveraging;
import org.symmem4j.gradsync.SyncMetrics;
import org.symmem4j.gradsync.DeviceGradients;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.DeviceCommunicator;
import org.symmem4j.parallel.Invariants;

/**
 * The wrapper's GPU mode's gradient sync, what {@link GradientAveraging} is on the host: run in the replica's
 * gradient hook, on the thread that trains. DL4J's flat gradient view holds the sum over this rank's examples
 * (minibatch division is off, {@link ModelReplica#disableMinibatchDivision}); it is summed over the group in place on
 * the device ({@link DeviceGradientAveraging#sum}, the policy's algorithm: our kernels or NCCL) and then divided by
 * the examples of the whole step by ND4J — the mean one model computes over the step's merged batch, as on the host.
 * Everything is enqueued in ND4J's stream order, the collective on the communicator's stream between two events:
 *
 * <pre>
 *   ND4J's stream:   backprop ─ [zeros, if idle] ─ check ─┐                   ┌─ [copy] ─ divide ─ check ─ updater
 *   communicator's stream:                                └─ all-reduce (SUM) ┘
 * </pre>
 *
 * The checks find the first NaN or infinity of this rank's own contribution and of the mean, for
 * {@link NonFiniteGradients} (the mean has the same bits on every rank, so every rank reaches the same verdict);
 * reading them back is where the host waits for ND4J's stream. The copy is the undivided sum that the user's
 * listeners see in {@code onGradientCalculation}, when one asks for it.
 *
 * <p>Not thread-safe: the training thread of one rank calls it.
 */
final class GpuGradientAveraging {

    private final INDArray view;
    private final DeviceGradients gradients;
    private final DeviceGradientAveraging allReduce;

    /**
     * @param comm      this rank's communicator on a GPU transport
     * @param policy    picks the all-reduce for the gradient's size
     * @param view      the replica's flat gradient view
     * @param gradients the same memory as device gradients ({@link Nd4jDeviceGradients}, or for tests without a GPU
     *                  anything that gives the view's elements)
     */
    GpuGradientAveraging(Communicator comm, AlgorithmPolicy policy, INDArray view, DeviceGradients gradients) {
        this(comm, policy, view, gradients, null);
    }

    /**
     * As above, with the all-reduce's GPU time and bytes recorded in {@code metrics} (CUDA events, read back at the
     * next step: {@link DeviceGradientAveraging#DeviceGradientAveraging(Communicator, AlgorithmPolicy, SyncMetrics)}).
     *
     * @param metrics the wrapper's metrics, or null for none
     */
    GpuGradientAveraging(Communicator comm, AlgorithmPolicy policy, INDArray view, DeviceGradients gradients,
                         SyncMetrics metrics) {
        this.view = Objects.requireNonNull(view, "view");
        this.gradients = Objects.requireNonNull(gradients, "gradients");
        this.allReduce = new DeviceGradientAveraging(comm, policy, metrics);
        if (gradients.dtype().byteSize() != view.dataType().width()) {
            throw Invariants.violated("device gradients of " + gradients.dtype() + " for a gradient view of "
                    + view.dataType() + ": expected the view's own memory");
        }
    }

    /**
     * For the replica's gradient view on ND4J's CUDA backend, on the thread that trains: makes this thread's ND4J
     * device the rank's GPU ({@link DeviceCommunicator#deviceOrdinal}), and checks that the view lives there. The
     * all-reduce's GPU time and bytes go to {@code metrics} as the host path's do.
     *
     * @throws IllegalStateException when the communicator has no GPU side, the view lives on another GPU, or ND4J
     *                               runs its CPU backend ({@link Nd4jDeviceGradients#of})
     */
    static GpuGradientAveraging forNd4j(Communicator comm, AlgorithmPolicy policy, INDArray view, SyncMetrics metrics) {
        DeviceCommunicator device = comm.unwrap(DeviceCommunicator.class).orElseThrow(() -> Invariants.violated(
                "GPU mode: the communicator of transport=" + comm.transportName() + " has no DeviceCommunicator although"
                        + " the transport says its memory is a GPU's (Transport.deviceMemory()); expected a GPU"
                        + " communicator (a bug of that transport)"));
        int gpu = device.deviceOrdinal();
        // ND4J runs a thread's ops on that thread's current CUDA device, and this thread is the worker's own
        Nd4j.getAffinityManager().unsafeSetDevice(gpu);
        int viewGpu = Nd4j.getAffinityManager().getDeviceForArray(view);
        if (viewGpu != gpu) {
            throw new IllegalStateException("GPU mode: ND4J keeps the model's gradient view on GPU " + viewGpu + ", this"
                    + " rank's GPU is " + gpu + " (" + device.deviceName() + ", the group's local rank modulo the GPUs);"
                    + " expected ND4J to allocate the model on the rank's GPU (fix: before building the model, on the thread"
                    + " that builds it and calls fit, Nd4j.getAffinityManager().unsafeSetDevice(" + gpu + "))");
        }
        return new GpuGradientAveraging(comm, policy, view, Nd4jDeviceGradients.of(view), metrics);
    }

    /**
     * The step's sync, in the gradient hook. Collective: every rank calls it once per step, idle ranks too.
     *
     * @param idle         whether this rank had no batch this step (it contributes zeros)
     * @param stepExamples the examples of the whole step, over all ranks
     * @param undividedSum receives the sum over the ranks before the division (the listeners' gradient), or null
     * @return the first non-finite element of this rank's contribution and of the mean, each -1 when none
     */
    GradientAveraging.Outcome average(boolean idle, long stepExamples, INDArray undividedSum) {
        if (idle) {
            view.assign(0); // contributes nothing; zero bits are 0.0 in every type
        }
        // enqueued now, read after the collective: its result is this rank's own values, before the sum overwrites them
        INDArray localBad = idle ? null : Nd4j.getExecutioner().exec(new FirstIndex(view, Conditions.notFinite()));
        allReduce.sum(gradients);
        if (undividedSum != null) {
            undividedSum.assign(view.reshape(undividedSum.shape()));
        }
        view.divi(stepExamples);
        INDArray reducedBad = Nd4j.getExecutioner().exec(new FirstIndex(view, Conditions.notFinite()));
        return new GradientAveraging.Outcome(localBad == null ? -1 : localBad.getLong(0), reducedBad.getLong(0));
    }
}
