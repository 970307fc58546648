/**
 * The spine every trainer builds on, so that each trainer adds only what is its own (how a step computes and syncs):
 *
 * <ul>
 *   <li>{@link org.symmem4j.dl4j.train.TrainingException}: every trainer's failure of a step on a rank, the base of
 *       {@code DataParallelTrainingException} and {@code PipelineTrainingException}, so one catch block serves
 *       them all.</li>
 *   <li>{@link org.symmem4j.dl4j.train.StepListener} and {@link org.symmem4j.dl4j.train.TrainingStep}: the step
 *       listener and what every step report says (step, examples, loss); each trainer's listener and report extend
 *       them.</li>
 *   <li>{@link org.symmem4j.dl4j.train.TrainerBuilder} and {@link org.symmem4j.dl4j.train.TrainerOptions}: the
 *       options every trainer's builder takes (group mode's group, timeout, meter registry and tags, step listeners,
 *       DL4J listeners and their stats router ({@link org.symmem4j.dl4j.train.ListenerOptions}), the run's timeline,
 *       ND4J threads per rank), declared once in the builder base every trainer's builder extends, and kept and
 *       checked in one place, which the trainer reads.</li>
 *   <li>{@link org.symmem4j.dl4j.train.ModelListeners} over a {@link org.symmem4j.dl4j.train.ListenedModel}: the
 *       user's DL4J listeners called per step and epoch as plain {@code fit} calls them, the model holding each
 *       step's state; {@link org.symmem4j.dl4j.train.StatsRouting}: the UI's stats router for them.</li>
 *   <li>{@link org.symmem4j.dl4j.train.RankFailures}: each rank's result of a step awaited (bounded), and the step's
 *       failures on several ranks merged into one exception, the origin's, the echoes it caused suppressed.</li>
 *   <li>{@link org.symmem4j.dl4j.train.RankRuntime}: a rank run by a thread of its own (open, a task queue, ready,
 *       start/submit/join, a collective close), and a trainer's ranks started together; the data-parallel worker
 *       stops at its first failed step, the pipeline rank runs on until its shutdown task.</li>
 *   <li>{@link org.symmem4j.dl4j.train.RankAgreement}: agreement across a group's ranks in group mode (the same
 *       build, no rank failed), over the group's byte all-gather.</li>
 *   <li>{@link org.symmem4j.dl4j.train.FitAgreement}: the start of a {@code fit()} call, the checks that depend on
 *       what one rank was given (its iterator, its model's listeners, its resume position, whose trained batches it
 *       skips) agreed by every rank before any data moves.</li>
 *   <li>{@link org.symmem4j.dl4j.train.ResumePosition}: where a trainer's next {@code fit()} starts after a restore
 *       (the checkpoint read, the batches and examples of its epoch already trained, which that fit skips), and
 *       {@code restoreLatest}'s restore of the newest complete checkpoint, for both trainers.</li>
 *   <li>{@link org.symmem4j.dl4j.train.CheckpointDirectory} and {@link org.symmem4j.dl4j.train.CheckpointSchedule}:
 *       the checkpoints a run takes itself ({@code checkpointEvery}, {@code resumeFrom}): one directory per step, every
 *       file written atomically and forced, a manifest of sizes and CRC-32Cs written last, torn directories skipped,
 *       the newest K complete ones kept; when the next one is due (agreed across a group's ranks).</li>
 * </ul>
 *
 * <p>Imports nothing of the trainers ({@code org.symmem4j.dl4j}, {@code org.symmem4j.dl4j.pipeline}): they import it.
 */
package org.symmem4j.dl4j.train;
