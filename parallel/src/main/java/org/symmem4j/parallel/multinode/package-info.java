/**
 * Groups that span machines: which ranks share a machine ({@link org.symmem4j.parallel.multinode.NodeTopology}),
 * and collectives that keep symmetric memory inside each machine and use MPI between machines
 * ({@link org.symmem4j.parallel.multinode.HierarchicalCommunicator}).
 */
package org.symmem4j.parallel.multinode;
