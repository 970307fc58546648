import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.Arrays;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.group.InJvmWorld;
import org.symmem4j.state.MessageHandler;
import org.symmem4j.state.SymmetricRingBuffer;

/**
 * RttJit's round trip in one thread (offer into A; poll A with a handler that echoes into B; poll B), timed in batches
 * of 2000 round trips after a warm-up; prints the fastest batch and the 10th percentile of batches, in ns per round trip:
 * on a loaded machine a batch that no preemption hit is the CPU cost itself. Args: one|many, payload bytes, batches.
 */
public class MinRtt {
    static long echoes;
    static long sum;
    public static void main(String[] args) {
        boolean many = args[0].equals("many");
        int size = Integer.parseInt(args[1]);
        int batches = Integer.parseInt(args[2]);
        InJvmWorld.runOnEveryRank(1, GroupOptions.defaults(), group -> {
            try (SymmetricRingBuffer a = many ? SymmetricRingBuffer.manyToOne(group, 0, 1 << 20)
                    : SymmetricRingBuffer.oneToOne(group, 0, 0, 1 << 20);
                 SymmetricRingBuffer b = many ? SymmetricRingBuffer.manyToOne(group, 0, 1 << 20)
                    : SymmetricRingBuffer.oneToOne(group, 0, 0, 1 << 20)) {
                MemorySegment src = MemorySegment.ofArray(new byte[a.maxPayload()]);
                MessageHandler echo = (t, buf, o, l) -> {
                    sum += buf.get(ValueLayout.JAVA_BYTE, o);
                    while (!b.offer(2, src, 0, l)) {
                        Thread.onSpinWait();
                    }
                };
                MessageHandler count = (t, buf, o, l) -> {
                    sum += buf.get(ValueLayout.JAVA_BYTE, o);
                    echoes++;
                };
                int per = 2000;
                double[] ns = new double[batches];
                for (int batch = -batches / 2; batch < batches; batch++) { // the first half of as many batches: warm-up
                    long t0 = System.nanoTime();
                    for (int round = 0; round < per; round++) {
                        long before = echoes;
                        while (!a.offer(2, src, 0, size)) {
                            Thread.onSpinWait();
                        }
                        while (a.poll(echo, 64) == 0) {
                            Thread.onSpinWait();
                        }
                        while (echoes == before) {
                            if (b.poll(count, 64) == 0) {
                                Thread.onSpinWait();
                            }
                        }
                    }
                    if (batch >= 0) {
                        ns[batch] = (System.nanoTime() - t0) / (double) per;
                    }
                }
                Arrays.sort(ns);
                System.out.printf("%s %d %s min %.1f p10 %.1f median %.1f%n", args[0], size,
                        System.getProperty("symmem4j.ring.inlineCopy", "true"), ns[0], ns[batches / 10], ns[batches / 2]);
            }
            return null;
        });
    }
}
