/**
 * Pipeline schedules as data, in the style of {@code torch.distributed.pipelining}.
 *
 * <ul>
 *   <li>{@link org.symmem4j.pipeline.schedule.Schedule}: per rank, a list of
 *       {@link org.symmem4j.pipeline.schedule.Action}s such as {@code 0F3}; prints and parses as one
 *       {@code rank r: ...} line per rank.</li>
 *   <li>{@link org.symmem4j.pipeline.schedule.ScheduleGenerators}: GPipe, 1F1B and interleaved 1F1B
 *       for a {@link org.symmem4j.pipeline.schedule.PipelineShape} (p ranks, m microbatches, v
 *       virtual stages per rank; stage s on rank s % p).</li>
 *   <li>{@link org.symmem4j.pipeline.schedule.ScheduleValidator}: counts, owners and per-rank
 *       dependency order, every violation reported.</li>
 *   <li>{@link org.symmem4j.pipeline.schedule.ScheduleSimulator}: dry-runs all ranks with
 *       {@link org.symmem4j.pipeline.schedule.ActionDurations}; reports deadlock, makespan, bubble
 *       fraction and peak in-flight activations.</li>
 * </ul>
 */
package org.symmem4j.pipeline.schedule;
