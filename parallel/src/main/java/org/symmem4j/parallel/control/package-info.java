/**
 * The control plane every communicator synchronizes through: the layout of a rank's signal pad
 * ({@link org.symmem4j.parallel.control.SignalPadLayout}: who writes and who reads each 128-byte line,
 * with a {@code verify}), the op descriptor a rank writes to arrive at a collective
 * ({@link org.symmem4j.parallel.control.OpDescriptorLayout}), and the flag protocols over the pads —
 * entry barrier, barrier, neighbour steps, user signals, group abort, blame on a timeout
 * ({@link org.symmem4j.parallel.control.PadSynchronizer}); and the control plane itself as one object
 * ({@link org.symmem4j.parallel.control.ControlPlane}: sequence numbers, the entry barrier with the cross-rank
 * argument agreement of {@link org.symmem4j.parallel.control.DescriptorCheck}, barrier, abort), which the host
 * communicator runs on its own pads and a GPU communicator on a pads-only host memory
 * ({@link org.symmem4j.parallel.control.SignalPads}).
 *
 * <p>Layer: above the API package and {@link org.symmem4j.parallel.sync}, which are all it may use; the
 * transports' communicators (host, CUDA, multi-node) build on it.
 */
package org.symmem4j.parallel.control;
