/**
 * The symmem4j runtime: groups of ranks, symmetric memory and collectives.
 *
 * <ul>
 *   <li>{@link org.symmem4j.parallel.Group}: N ranks. {@link org.symmem4j.parallel.group.InJvmWorld} makes
 *       ranks of threads, {@link org.symmem4j.parallel.group.ProcessGroup} ranks of processes (torchrun's
 *       {@code RANK}, {@code WORLD_SIZE}, {@code LOCAL_RANK}, {@code MASTER_ADDR}, {@code MASTER_PORT};
 *       rank 0 hosts the rendezvous store of {@link org.symmem4j.parallel.rendezvous}).</li>
 *   <li>{@link org.symmem4j.parallel.SymmetricMemory}: a same-size buffer on every rank that every
 *       peer maps, plus a signal pad per rank (barrier, put-with-signal, wait-signal).</li>
 *   <li>{@link org.symmem4j.parallel.Communicator}: all-reduce (ONE_SHOT, TWO_SHOT, RING; on GPUs
 *       also NCCL and NCCL_SYMMETRIC), reduce-scatter, all-gather, broadcast; SUM/AVG/MAX/MIN over
 *       FLOAT32/FLOAT64/BFLOAT16. GPU-only operations through
 *       {@code unwrap(}{@link org.symmem4j.parallel.DeviceCommunicator}{@code )}.</li>
 *   <li>{@link org.symmem4j.parallel.Transport}: where memory lives; a group is created on one
 *       ({@link org.symmem4j.parallel.group.InJvmWorld#create(int, GroupOptions, Transport)}) and
 *       {@link org.symmem4j.parallel.Group#transport()} serves every allocation and communicator of it.
 *       Host transports are in {@link org.symmem4j.parallel.host}, the CUDA one in
 *       {@link org.symmem4j.parallel.cuda}.</li>
 * </ul>
 *
 * Every wait is bounded by {@link org.symmem4j.parallel.GroupOptions#timeout()} and fails with a
 * {@link org.symmem4j.parallel.PeerTimeoutException} naming the ranks that did not arrive. Every setting read
 * from system properties and the environment is declared in {@link org.symmem4j.parallel.Configuration}
 * (reference: {@code docs/configuration.md}).
 *
 * <p>Layer: this package is the API — interfaces, options, errors, settings. It may use
 * {@link org.symmem4j.parallel.sync} only; the implementations in the sub-packages depend on it, never the
 * other way round (javadoc links to them use full names, so that no import closes a cycle).
 */
package org.symmem4j.parallel;
