/**
 * Open MPI through Java FFM, only what the multi-node hierarchy needs: initialization, communicator
 * split and free, all-reduce, reduce-scatter, all-gather, broadcast, barrier ({@link org.symmem4j.parallel.mpi.Mpi},
 * {@link org.symmem4j.parallel.mpi.MpiComm}). Open MPI's ABI: handles are the addresses of its global
 * objects ({@code ompi_mpi_comm_world}, {@code ompi_mpi_float}, {@code ompi_mpi_op_sum}...). No JNI
 * and no native artifacts of our own; without Open MPI every entry point throws
 * {@link org.symmem4j.parallel.mpi.MpiUnavailableException} saying why.
 */
package org.symmem4j.parallel.mpi;
