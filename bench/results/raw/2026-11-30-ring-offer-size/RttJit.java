import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.group.InJvmWorld;
import org.symmem4j.state.MessageHandler;
import org.symmem4j.state.SymmetricRingBuffer;

/**
 * The round trip's code paths in one thread (RingPair's calls): offer one message (segment form) into ring A; poll A
 * with the peer's handler, which echoes it into ring B from inside the handler; poll B with rank 0's counting handler
 * until the echo is there. Args: one|many, payload bytes, rounds.
 */
public class RttJit {
    static long echoes;
    static long sum;
    public static void main(String[] args) {
        boolean many = args[0].equals("many");
        int size = Integer.parseInt(args[1]);
        int rounds = Integer.parseInt(args[2]);
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
                long t0 = 0;
                for (int round = 0; round < rounds; round++) {
                    if (round == rounds / 2) {
                        t0 = System.nanoTime();
                    }
                    long before = echoes;
                    while (!a.offer(2, src, 0, size)) {
                        Thread.onSpinWait();
                    }
                    while (a.poll(echo, 64) == 0) { // the peer's poll
                        Thread.onSpinWait();
                    }
                    while (echoes == before) {
                        if (b.poll(count, 64) == 0) {
                            Thread.onSpinWait();
                        }
                    }
                }
                System.out.printf("%s %d B: %.1f ns per round trip (second half, one thread)%n", args[0], size,
                        (System.nanoTime() - t0) / (rounds / 2.0));
            }
            return null;
        });
    }
}
