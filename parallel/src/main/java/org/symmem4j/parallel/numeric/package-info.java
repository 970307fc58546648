/**
 * Host numeric kernels shared by the host transports and the trainers above them: the element-wise
 * reductions of the collectives ({@link org.symmem4j.parallel.numeric.Reducer}, vectorized with the
 * Vector API where the JVM has {@code jdk.incubator.vector}, scalar loops otherwise, bitwise equal)
 * and bfloat16 conversion ({@link org.symmem4j.parallel.numeric.BFloat16}).
 */
package org.symmem4j.parallel.numeric;
