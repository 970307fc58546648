package org.symmem4j.parallel;

/** How a signal updates a slot (as NVSHMEM's {@code NVSHMEM_SIGNAL_SET} / {@code NVSHMEM_SIGNAL_ADD}). */
public enum SignalOp {
    /** The slot becomes the value. */
    SET,
    /** The value is added to the slot atomically. */
    ADD
}
