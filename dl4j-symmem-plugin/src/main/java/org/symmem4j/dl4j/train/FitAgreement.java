package org.symmem4j.dl4j.train;

import java.nio.file.Path;
import java.util.Iterator;
import java.util.function.Supplier;
import java.util.function.ToLongFunction;
import org.symmem4j.parallel.Group;

/**
 * The start of one {@code fit()} call of a trainer: the checks that depend on what this rank was given (its iterator,
 * the listeners on its model, where its iterator stands after a resume), agreed by every rank before any data moves.
 *
 * <p>Each rank runs its own checks ({@link #agree}'s {@code checks}, which may skip the batches a restored checkpoint had
 * trained with {@link #skip}); then the ranks exchange their verdicts in one small all-gather over the trainer's group
 * (and over its tensor-parallel group, for a tensor-parallel rank: {@link CheckpointLayout#agreeRefusal}). When any
 * rank refused, every rank throws the same error naming the refusing ranks and what each refused, instead of those
 * alone throwing while the others go on into the first step's collective and wait for them there until their timeout.
 * Without a group to agree over (thread mode, every worker fed by the one caller), a refusal is thrown as it is.
 *
 * <p>Cost: one exchange per {@code fit()} call in group mode (the group's byte all-gather: through the rendezvous store
 * between processes, a few hundred bytes), none per step; nothing in thread mode.
 */
public final class FitAgreement {

    private final Group trainer;
    private final CheckpointLayout layout;
    private final long batchesToSkip;
    private final long examplesToSkip;
    private final Path resumedFrom;
    private long skipped;
    private long examplesSkipped;

    /**
     * One fit's start.
     *
     * @param trainer        the trainer's (data-parallel) group, or null in thread mode
     * @param layout         the model's checkpoint layout: a tensor-parallel rank's agrees over its tp group too
     * @param batchesToSkip  batches of the epoch a restored checkpoint had trained (0 when none)
     * @param examplesToSkip their examples as the checkpoint recorded them, or -1 when it did not
     * @param resumedFrom    the checkpoint's directory, for messages; may be null
     */
    public FitAgreement(Group trainer, CheckpointLayout layout, long batchesToSkip, long examplesToSkip,
                        Path resumedFrom) {
        this.trainer = trainer;
        this.layout = layout;
        this.batchesToSkip = batchesToSkip;
        this.examplesToSkip = examplesToSkip;
        this.resumedFrom = resumedFrom;
    }

    /**
     * Runs this rank's {@code checks}, then agrees on every rank's verdict (collective in group mode: every rank calls
     * it once per {@code fit()}, before the fit's first collective).
     *
     * @param checks this rank's checks: throws what it refuses, else returns what the fit goes on with
     * @param reset  resets the iterator, or null when it cannot be: run on a refusal after {@link #skip} read batches,
     *               so that the next fit starts where this one did and skips the same batches
     * @param <T>    what the checks return
     * @return what {@code checks} returned, when no rank refused
     * @throws IllegalArgumentException on every rank, when one or more refused (in thread mode: this rank's refusal)
     * @throws IllegalStateException    on every rank, when one or more failed otherwise
     */
    public <T> T agree(Supplier<T> checks, Runnable reset) {
        T result = null;
        RuntimeException refusal = null;
        try {
            result = checks.get();
        } catch (RuntimeException e) {
            refusal = e; // agreed below: the other ranks would otherwise wait for this one in the first step
        }
        try {
            layout.agreeRefusal("fit()", refusal, trainer);
        } catch (RuntimeException e) {
            if (skipped > 0 && reset != null) {
                reset.run();
            }
            throw e;
        }
        return result;
    }

    /**
     * Reads and drops the batches a restored checkpoint had trained of its epoch, and refuses an iterator that does
     * not reach that position or whose first batches hold other examples than the checkpoint recorded.
     *
     * @param batches    the fit's iterator
     * @param examplesOf the examples of one batch it returns
     * @throws IllegalArgumentException when the iterator ends before the position, or its batches hold other examples
     */
    public void skip(Iterator<?> batches, ToLongFunction<Object> examplesOf) {
        while (skipped < batchesToSkip && batches.hasNext()) {
            Object batch = batches.next();
            skipped++; // trained before the checkpoint the trainer resumed from
            examplesSkipped += examplesOf.applyAsLong(batch);
        }
        if (batchesToSkip == 0) {
            return;
        }
        String at = "the checkpoint " + (resumedFrom == null ? "" : resumedFrom + " ") + "was taken after batches="
                + batchesToSkip + (examplesToSkip >= 0 ? " examples=" + examplesToSkip : "") + " of its epoch";
        String fix = " (fix: pass fit the iterator of the run that wrote it, with the same batch size and order; the"
                + " worker or rank count may differ, every count deals the same batches in the same order)";
        if (skipped < batchesToSkip) {
            // error-message: the text ends with fix, the fix for both resume-position errors, built above
            throw new IllegalArgumentException("resume position: " + at + "; this iterator ended after " + skipped
                    + " batches" + fix);
        }
        if (examplesToSkip >= 0 && examplesSkipped != examplesToSkip) {
            // error-message: the text ends with fix, the fix for both resume-position errors, built above
            throw new IllegalArgumentException("resume position: " + at + "; this iterator's first " + skipped
                    + " batches hold examples=" + examplesSkipped + fix);
        }
    }

    /** {@return the batches {@link #skip} read and dropped} */
    public long skipped() {
        return skipped;
    }

    /** {@return their examples} */
    public long examplesSkipped() {
        return examplesSkipped;
    }
}
