/**
 * Passing file descriptors between the processes of a group ({@link org.symmem4j.parallel.ipc.FdChannel}:
 * Unix-domain datagram sockets with {@code SCM_RIGHTS}, the sender checked by its kernel credentials), as
 * PyTorch's symmetric memory does to share CUDA allocations exported as descriptors; the few C library calls
 * it needs are bound through FFM in {@code LibC}.
 *
 * <p>Layer: may use the API package only (its exceptions) and SLF4J; used by the CUDA transport's cross-process
 * memory.
 */
package org.symmem4j.parallel.ipc;
