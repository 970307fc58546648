import java.lang.foreign.ValueLayout;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.group.InJvmWorld;
import org.symmem4j.state.MessageHandler;
import org.symmem4j.state.SymmetricRingBuffer;

/** One thread: offers a batch of 64-byte messages, then spins on poll until empty (empty polls included), repeated. */
public class PollJit {
    static long sum;
    public static void main(String[] args) {
        boolean many = args[0].equals("many");
        InJvmWorld.runOnEveryRank(1, GroupOptions.defaults(), group -> {
            try (SymmetricRingBuffer ring = many ? SymmetricRingBuffer.manyToOne(group, 0, 1 << 20)
                    : SymmetricRingBuffer.oneToOne(group, 0, 0, 1 << 20)) {
                byte[] msg = new byte[64];
                MessageHandler h = (t, b, o, l) -> sum += b.get(ValueLayout.JAVA_BYTE, o);
                var mx = java.lang.management.ManagementFactory.getThreadMXBean();
                long t0 = System.nanoTime(); long c0 = mx.getCurrentThreadCpuTime(); long cw = 0;
                for (int round = 0; round < 600_000; round++) {
                if (round == 300_000) { cw = mx.getCurrentThreadCpuTime(); }
                    for (int i = 0; i < 32; i++) {
                        ring.offer(1, msg);
                    }
                    int empty = 0;
                    while (empty < 4) { // the consumer's spin: polls that find nothing included
                        if (ring.poll(h, 64) == 0) {
                            empty++;
                            Thread.onSpinWait();
                        }
                    }
                }
                System.out.printf("%s cpu ns per message (second half, 300000 rounds of 32): %.1f%n", args[0], (mx.getCurrentThreadCpuTime() - cw) / (300_000.0 * 32));
            }
            return null;
        });
    }
}
