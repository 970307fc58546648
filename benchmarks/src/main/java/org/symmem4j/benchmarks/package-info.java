/**
 * Measurement apart from the product: JMH benchmarks of the host runtime (all-reduce in threads and processes,
 * reducer bandwidth, stage-link hand-off, copies), GPU benchmark CLIs (all-reduce against NCCL eager and
 * graph-captured, across processes, hierarchical, pipeline hand-off, tensor-parallel GEMMs), calibration of the
 * threshold tables, the hardening pass's stall and starvation measurements, and the reports and plots they write
 * ({@code bench/results/}). Every benchmark prints its baselines measured in the same run.
 *
 * <p>Layer: a user of the library's public API and, for the DL4J benchmarks in {@code dl4j/}, of DL4J.
 */
package org.symmem4j.benchmarks;
