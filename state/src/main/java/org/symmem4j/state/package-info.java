/**
 * Shared state on symmetric memory, usable from plain Java without DL4J: a ring buffer
 * ({@link org.symmem4j.state.SymmetricRingBuffer}), a hash map ({@link org.symmem4j.state.SymmetricHashMap}), a
 * parameter cache ({@link org.symmem4j.state.ParameterCache}) and a row-sharded tensor
 * ({@link org.symmem4j.state.DistributedTensor}).
 *
 * <p>Each structure is created collectively on a {@link org.symmem4j.parallel.Group} and lives in symmetric memory
 * it allocates; afterwards ranks read and write it with plain loads, stores and CAS on the peers' mapped memory,
 * ordered by release/acquire pairs named at each use. They run on the host transports of one machine (threads of
 * one JVM, processes over {@code /dev/shm}); a group whose transport does not map every peer's memory into this
 * process (ranks on other machines) is refused at creation, with the transport's own reason. On GPU groups, created
 * with a {@link org.symmem4j.parallel.Communicator}: the tensor (device shards) and
 * {@link org.symmem4j.state.DeviceRingBuffer} (a ring in GPU memory whose producers append on their streams); on a
 * GPU group, {@link org.symmem4j.state.DeviceHashMap} (the hash map's slots in GPU memory, operated by kernels on the
 * caller's stream with system-scope CAS; {@code compute} host-driven) and
 * {@link org.symmem4j.state.DeviceParameterCache} (the cache's parts in GPU memory, zero-copy device views). The
 * shared layouts live in {@link org.symmem4j.parallel.layout}. See
 * {@code docs/shared-state.md}.
 */
package org.symmem4j.state;
