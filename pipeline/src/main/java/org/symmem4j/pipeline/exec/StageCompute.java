package org.symmem4j.pipeline.exec;

import java.lang.foreign.MemorySegment;

/**
 * The model slice of one (virtual) pipeline stage, as the {@link PipelineExecutor} drives it. The
 * executor knows nothing of layers or tensors: it passes bytes between stages in schedule order and
 * calls these methods on the rank's own thread, one at a time.
 *
 * <p>Data and labels are the stage's own business: the first stage reads microbatch {@code mb}'s
 * features and the last stage its labels from wherever the caller put them before
 * {@link PipelineExecutor#runStep()}.
 *
 * <p>With links on GPUs, inputs and outputs are device addresses of the rank's GPU (segments whose
 * byte size is the length; an input spans its link slot's capacity). The stage then enqueues its
 * kernels on the rank's CUDA stream and returns without waiting, and "valid only during this call"
 * means: for the work enqueued during the call, which the executor orders before the slot is given
 * back.
 */
public interface StageCompute {

    /**
     * Forward pass of {@code microbatch}. Keeps what its backward will need (the stage's input and
     * activations); with 1F1B at most a few microbatches are in flight at once.
     *
     * @param microbatch the microbatch, in [0, microbatches)
     * @param input the previous stage's output for this microbatch, valid only during this call (it
     *              sits in a link slot that is given back afterwards, or, between stages of one rank, in
     *              a buffer the executor reuses); empty for stage 0
     * @return this stage's output for this microbatch, read by the executor before the stage's next
     *         call (so it may reuse one buffer); ignored for the last stage, which computes the loss
     */
    MemorySegment forward(int microbatch, MemorySegment input);

    /**
     * Backward pass of {@code microbatch}: adds this microbatch's parameter gradients to the stage's
     * accumulated gradient (summed over microbatches, applied by {@link #step()}) and frees what its
     * forward kept.
     *
     * @param microbatch the microbatch, in [0, microbatches)
     * @param outputGradient the gradient of the loss with respect to this stage's output, from the
     *                       next stage, valid only during this call; empty for the last stage
     * @return the gradient with respect to this stage's input, read before the stage's next call;
     *         ignored for stage 0
     */
    MemorySegment backward(int microbatch, MemorySegment outputGradient);

    /**
     * The input-gradient half of a split backward ({@link org.symmem4j.pipeline.schedule.ActionType#INPUT_GRADIENT},
     * zero-bubble schedules): returns the gradient with respect to the stage's input, as
     * {@link #backward} does, and keeps what {@link #backwardWeight} needs; the executor calls
     * {@link #backwardWeight} for the microbatch later, on this thread.
     *
     * <p>The default runs the whole {@link #backward} here and leaves nothing for the weight half:
     * the results are those of an unsplit backward, but the schedule's bubble saving needs a stage
     * that computes only the input gradient here.
     *
     * @param microbatch the microbatch, in [0, microbatches)
     * @param outputGradient as for {@link #backward}
     * @return the gradient with respect to this stage's input, as for {@link #backward}
     */
    default MemorySegment backwardInput(int microbatch, MemorySegment outputGradient) {
        return backward(microbatch, outputGradient);
    }

    /**
     * The weight-gradient half of a split backward: adds the microbatch's parameter gradients to the
     * accumulated gradient and frees what its forward and {@link #backwardInput} kept. The default does
     * nothing, matching the default {@link #backwardInput}.
     *
     * @param microbatch the microbatch, in [0, microbatches), whose {@link #backwardInput} has run
     */
    default void backwardWeight(int microbatch) {
    }

    /** After every microbatch of the step: one optimizer update from the accumulated gradient, which it then clears. */
    void step();
}
