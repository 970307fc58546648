/**
 * The host transports: symmetric memory in RAM shared by threads ({@link org.symmem4j.parallel.host.InJvmTransport},
 * off-heap segments) or by the processes of one machine ({@link org.symmem4j.parallel.host.SharedMemoryTransport},
 * {@code /dev/shm} files of mode 0600 unlinked once mapped, see {@link org.symmem4j.parallel.host.SharedMemoryFiles}),
 * and the collectives on it ({@link org.symmem4j.parallel.host.HostCommunicator}: plain loads and stores into peers'
 * buffers behind an entry barrier that checks every rank's arguments first).
 *
 * <p>Layer: may use the API package, {@link org.symmem4j.parallel.control}, {@link org.symmem4j.parallel.numeric}
 * and {@link org.symmem4j.parallel.sync}. It never sees a group's class: a group hands it what it needs through
 * {@link org.symmem4j.parallel.host.PeerThreads} or {@link org.symmem4j.parallel.host.PeerProcesses}.
 */
package org.symmem4j.parallel.host;
