/**
 * The pipeline executor: {@link org.symmem4j.pipeline.exec.PipelineExecutor} runs one rank's list
 * of a schedule over {@link org.symmem4j.pipeline.exec.StageCompute}s (the model slices), moving
 * bytes between stages through stage links, and returns a
 * {@link org.symmem4j.pipeline.exec.StepTimeline} per step;
 * {@link org.symmem4j.pipeline.exec.TimelineReport} combines all ranks' timelines into the measured
 * bubble, the simulator's prediction for the measured durations, a Chrome trace and an SVG.
 */
package org.symmem4j.pipeline.exec;
