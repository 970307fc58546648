/**
 * Gradient synchronization for data parallelism (planned; see the issue "DL4J data parallelism on
 * symmetric memory"): gradient buckets over a flat gradient buffer, the {@code AlgorithmPolicy}
 * that picks ONE_SHOT / TWO_SHOT / RING (and NCCL on GPUs) per bucket from a calibrated threshold
 * table, averaging, ZeRO partitioning of gradients and optimizer state, and the Micrometer
 * {@code MeterBinder} for sync latency. Depends on {@code parallel} only; never imports DL4J.
 */
package org.symmem4j.gradsync;
