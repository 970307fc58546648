/**
 * Gradient synchronization for data parallelism, independent of DL4J.
 *
 * <ul>
 *   <li>{@link org.symmem4j.gradsync.GradientSynchronizer}: all-reduces a flat gradient in symmetric
 *       memory bucket by bucket ({@link org.symmem4j.gradsync.GradientBuckets}).</li>
 *   <li>{@link org.symmem4j.gradsync.AlgorithmPolicy}: per bucket, an eligibility filter, then the
 *       calibrated {@link org.symmem4j.gradsync.ThresholdTable}; or an algorithm the user forces.</li>
 *   <li>the table is measured per machine by {@code org.symmem4j.benchmarks.CalibrateThresholds}
 *       (the benchmarks module; {@code bench/calibrate.sh}).</li>
 *   <li>{@link org.symmem4j.gradsync.SyncMetrics}: the Micrometer {@code MeterBinder} for sync
 *       latency, bytes, step time and the sync share of step time.</li>
 * </ul>
 */
package org.symmem4j.gradsync;
