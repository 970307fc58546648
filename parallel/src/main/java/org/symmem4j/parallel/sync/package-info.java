/**
 * Bounded waiting, the bottom layer of the runtime: how a thread idles while it polls a peer's flag
 * ({@link org.symmem4j.parallel.sync.IdleStrategy}, spin → yield → park as Agrona's
 * {@link org.symmem4j.parallel.sync.BackoffIdleStrategy}), the deadline and lost-peer checks around the
 * polls ({@link org.symmem4j.parallel.sync.Waiter}, asking a {@link org.symmem4j.parallel.sync.WaitSubject}),
 * and whether a peer process still runs ({@link org.symmem4j.parallel.sync.ProcessLiveness}, zombies and
 * recycled pids told apart).
 *
 * <p>Layer: a leaf. It depends on the JDK only; every other package of the runtime, and the trainers above,
 * may use it.
 */
package org.symmem4j.parallel.sync;
