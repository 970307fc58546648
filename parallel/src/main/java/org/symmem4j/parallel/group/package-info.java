/**
 * The kinds of {@link org.symmem4j.parallel.Group}: ranks as threads of one JVM
 * ({@link org.symmem4j.parallel.group.InJvmWorld}, its ranks and sub-groups {@code InJvmGroup}) and ranks as
 * processes ({@link org.symmem4j.parallel.group.ProcessGroup}, configured from torchrun's or Open MPI's
 * variables by {@link org.symmem4j.parallel.group.ProcessGroupConfig}, its seat on the host claimed by
 * {@code SeatClaim}), and splitting a group into sub-groups as {@code ncclCommSplit} does ({@code GroupSplit},
 * {@code StoreSubGroup}).
 *
 * <p>Layer: the top of the host runtime. It may use the API package, {@link org.symmem4j.parallel.host} (the
 * default transports), {@link org.symmem4j.parallel.rendezvous} and {@link org.symmem4j.parallel.sync}; device
 * transports are handed in by the user, never named here. Nothing else in the runtime depends on it but the
 * multi-node topology.
 */
package org.symmem4j.parallel.group;
