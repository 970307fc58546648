/**
 * Groups that span machines: which ranks share a machine ({@link org.symmem4j.parallel.multinode.NodeTopology}),
 * the hierarchical algorithm written once ({@link org.symmem4j.parallel.multinode.HierarchicalSchedule}: the
 * machine's communicator inside each machine, an {@link org.symmem4j.parallel.multinode.InterMachineLink} between,
 * {@link org.symmem4j.parallel.multinode.StagingMemory} for what host and device buffers do differently), and its
 * host communicator: symmetric memory inside each machine and MPI between
 * ({@link org.symmem4j.parallel.multinode.HierarchicalCommunicator}). The GPU's hierarchical communicator (our
 * kernels inside, NCCL between) lives in the {@code cuda} package and runs the same schedule; this package does not
 * depend on {@code cuda}.
 */
package org.symmem4j.parallel.multinode;
