/**
 * Pipeline parallelism, in three layers:
 *
 * <ul>
 *   <li>{@link org.symmem4j.pipeline.schedule}: schedules as data (GPipe, 1F1B, interleaved 1F1B;
 *       per rank a list of actions such as {@code 0F3}), their validator and a simulator (the same times
 *       for every stage, or each its own) that reports
 *       deadlock, bubble fraction and peak in-flight activations.</li>
 *   <li>{@link org.symmem4j.pipeline.channel}: stage-to-stage links, bounded FIFOs of put-with-signal
 *       messages in {@code SymmetricMemory} with credit-based back-pressure, and the checks a
 *       schedule must pass to run over them (FIFO order, enough slots).</li>
 *   <li>{@link org.symmem4j.pipeline.exec}: the executor, which only interprets a schedule: it moves
 *       activations forward and gradients backward between {@code StageCompute}s and records a
 *       timeline (measured bubble, per-stage simulation, Chrome trace of a step or a whole run, SVG).</li>
 * </ul>
 *
 * Depends on {@code parallel} only; never imports DL4J (the DL4J stages live in the plugin).
 */
package org.symmem4j.pipeline;
