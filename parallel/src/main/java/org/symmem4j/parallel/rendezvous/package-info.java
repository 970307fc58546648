/**
 * The rendezvous store ranks set up through (torchrun's c10d store): the in-JVM one for threads
 * ({@link org.symmem4j.parallel.rendezvous.InMemoryStore}), and the TCP store rank 0 hosts for processes
 * ({@link org.symmem4j.parallel.rendezvous.TcpStoreServer}, {@link org.symmem4j.parallel.rendezvous.TcpStoreClient})
 * with its wire protocol, the mutual HMAC handshake on the job's
 * {@link org.symmem4j.parallel.rendezvous.StoreSecret}, the job's identity (run id, generation, size) and
 * the server's limits.
 *
 * <p>Layer: may use the API package ({@link org.symmem4j.parallel.RendezvousStore}, its exceptions,
 * {@link org.symmem4j.parallel.Configuration}) and {@link org.symmem4j.parallel.sync}; the groups and the
 * transports that exchange set-up bytes use it.
 */
package org.symmem4j.parallel.rendezvous;
