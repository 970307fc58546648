/**
 * Pipeline parallelism. {@link org.symmem4j.pipeline.schedule} holds schedules as data (GPipe, 1F1B,
 * interleaved 1F1B; per rank a list of actions such as {@code 0F3}), their validator and a simulator
 * that reports deadlock, bubble fraction and peak in-flight activations. Planned: an executor that
 * only interprets a schedule, and stage-to-stage channels built on put-with-signal / wait-signal over
 * {@code SymmetricMemory}. Depends on {@code parallel} only; never imports DL4J.
 */
package org.symmem4j.pipeline;
