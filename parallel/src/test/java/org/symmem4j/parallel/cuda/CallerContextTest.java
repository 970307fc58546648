package org.symmem4j.parallel.cuda;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.lang.foreign.MemorySegment;
import org.junit.jupiter.api.Test;
import org.symmem4j.parallel.Transport;
import org.symmem4j.parallel.host.InJvmTransport;

/**
 * The CPU side of putting a caller's context back ({@link CallerContext}, {@link Transport#callerState()}): the rule
 * that decides what is made current again, and the host transport's state, which is nothing. On a GPU
 * {@code CudaFullyShardedMlpTest} checks that the context current before {@code FullyShardedMlp.close()} is current
 * after it and that a raw driver call then works.
 */
class CallerContextTest {

    @Test
    void theCapturedContextComesBackUnlessItWasAPrimaryContextTheReleaseDestroyed() {
        MemorySegment context = MemorySegment.ofAddress(0x7f00_1234_5000L);
        assertEquals(context, CallerContext.restored(context, true), "a context that still exists is current again");
        assertEquals(MemorySegment.NULL, CallerContext.restored(context, false),
                "a primary context whose last retain was released: none current, never a dangling handle");
        assertEquals(MemorySegment.NULL, CallerContext.restored(MemorySegment.NULL, true), "none before, none after");
    }

    @Test
    void aHostTransportHasNoThreadStateToPutBack() {
        Transport host = new InJvmTransport();
        try (Transport.CallerState state = host.callerState()) {
            state.close(); // twice: harmless
        }
    }
}
