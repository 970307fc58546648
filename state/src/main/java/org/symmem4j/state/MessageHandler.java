package org.symmem4j.state;

import java.lang.foreign.MemorySegment;

/** Receives the messages a {@link SymmetricRingBuffer} consumer polls. */
@FunctionalInterface
public interface MessageHandler {

    /**
     * One message, zero-copy: {@code length} bytes of {@code buffer} from {@code offset}, valid only until this
     * call returns (the ring reuses the bytes afterwards; copy what must outlive the call).
     *
     * @param msgTypeId the type the producer gave, at least 1
     * @param buffer    the ring's data as mapped in this process
     * @param offset    where the payload starts in {@code buffer}
     * @param length    payload bytes
     */
    void onMessage(int msgTypeId, MemorySegment buffer, long offset, int length);
}
