import java.nio.ByteBuffer;
import org.agrona.concurrent.MessageHandler;
import org.agrona.concurrent.UnsafeBuffer;
import org.agrona.concurrent.ringbuffer.ManyToOneRingBuffer;
import org.agrona.concurrent.ringbuffer.OneToOneRingBuffer;
import org.agrona.concurrent.ringbuffer.RingBuffer;
import org.agrona.concurrent.ringbuffer.RingBufferDescriptor;

/** PollJit's loop on Agrona's rings: write 32 messages of 64 B, read until 4 reads find nothing; repeated. */
public class AgronaJit {
    static long sum;
    public static void main(String[] args) {
        UnsafeBuffer buf = new UnsafeBuffer(ByteBuffer.allocateDirect((1 << 20) + RingBufferDescriptor.TRAILER_LENGTH));
        RingBuffer ring = args[0].equals("many") ? new ManyToOneRingBuffer(buf) : new OneToOneRingBuffer(buf);
        UnsafeBuffer src = new UnsafeBuffer(new byte[64]);
        MessageHandler h = (t, b, o, l) -> sum += b.getByte(o);
        var mx = java.lang.management.ManagementFactory.getThreadMXBean();
                long t0 = System.nanoTime(); long c0 = mx.getCurrentThreadCpuTime(); long cw = 0;
        for (int round = 0; round < 600_000; round++) {
                if (round == 300_000) { cw = mx.getCurrentThreadCpuTime(); }
            for (int i = 0; i < 32; i++) {
                ring.write(1, src, 0, 64);
            }
            int empty = 0;
            while (empty < 4) {
                if (ring.read(h, 64) == 0) {
                    empty++;
                    Thread.onSpinWait();
                }
            }
        }
        System.out.printf("%s cpu ns per message (second half, 300000 rounds of 32): %.1f%n", args[0], (mx.getCurrentThreadCpuTime() - cw) / (300_000.0 * 32));
    }
}
