import java.nio.ByteBuffer;
import org.agrona.concurrent.MessageHandler;
import org.agrona.concurrent.UnsafeBuffer;
import org.agrona.concurrent.ringbuffer.ManyToOneRingBuffer;
import org.agrona.concurrent.ringbuffer.OneToOneRingBuffer;
import org.agrona.concurrent.ringbuffer.RingBuffer;
import org.agrona.concurrent.ringbuffer.RingBufferDescriptor;

/** RttJit's loop on Agrona's rings (RingPair's calls: write, read(handler, 64), the echo written from the handler). */
public class AgronaRttJit {
    static long echoes;
    static long sum;
    static RingBuffer ring(boolean many) {
        UnsafeBuffer buf = new UnsafeBuffer(ByteBuffer.allocateDirect((1 << 20) + RingBufferDescriptor.TRAILER_LENGTH));
        return many ? new ManyToOneRingBuffer(buf) : new OneToOneRingBuffer(buf);
    }
    public static void main(String[] args) {
        boolean many = args[0].equals("many");
        int size = Integer.parseInt(args[1]);
        int rounds = Integer.parseInt(args[2]);
        RingBuffer a = ring(many);
        RingBuffer b = ring(many);
        UnsafeBuffer src = new UnsafeBuffer(new byte[a.maxMsgLength()]);
        MessageHandler echo = (t, buf, o, l) -> {
            sum += buf.getByte(o);
            while (!b.write(2, src, 0, l)) {
                Thread.onSpinWait();
            }
        };
        MessageHandler count = (t, buf, o, l) -> {
            sum += buf.getByte(o);
            echoes++;
        };
        long t0 = 0;
        for (int round = 0; round < rounds; round++) {
            if (round == rounds / 2) {
                t0 = System.nanoTime();
            }
            long before = echoes;
            while (!a.write(2, src, 0, size)) {
                Thread.onSpinWait();
            }
            while (a.read(echo, 64) == 0) {
                Thread.onSpinWait();
            }
            while (echoes == before) {
                if (b.read(count, 64) == 0) {
                    Thread.onSpinWait();
                }
            }
        }
        System.out.printf("%s %d B: %.1f ns per round trip (second half, one thread)%n", args[0], size,
                (System.nanoTime() - t0) / (rounds / 2.0));
    }
}
