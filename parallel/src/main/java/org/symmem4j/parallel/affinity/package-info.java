/**
 * CPU affinity of ranks: Linux's {@code sched_setaffinity} and {@code sched_getaffinity} through FFM
 * ({@link org.symmem4j.parallel.affinity.CpuAffinity}), the machine's cores and hardware threads from sysfs
 * ({@link org.symmem4j.parallel.affinity.CpuTopology}) and the pinning of a machine's ranks that the settings
 * {@code symmem4j.affinity} and {@code symmem4j.affinity.cpus} ask for
 * ({@link org.symmem4j.parallel.affinity.RankAffinity}), used by the in-JVM world, process groups, the trainers' rank
 * threads and the launcher.
 *
 * <p>Layer: may use the API package only (settings, exceptions) and SLF4J.
 */
package org.symmem4j.parallel.affinity;
