import java.lang.foreign.ValueLayout;
import java.lang.foreign.MemorySegment;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.group.InJvmWorld;
import org.symmem4j.state.MessageHandler;
import org.symmem4j.state.SymmetricRingBuffer;

/** One thread, many-to-one ring: offers 32 messages of 64 B (byte[] and MemorySegment forms alternately), then polls until 4 polls find nothing; repeated. */
public class OfferJit {
    static long sum;
    public static void main(String[] args) {
        int size = args.length > 0 ? Integer.parseInt(args[0]) : 64;
        InJvmWorld.runOnEveryRank(1, GroupOptions.defaults(), group -> {
            try (SymmetricRingBuffer ring = SymmetricRingBuffer.manyToOne(group, 0, 1 << 16)) {
                byte[] msg = new byte[size];
                MemorySegment seg = MemorySegment.ofArray(new byte[size]);
                MessageHandler h = (t, b, o, l) -> sum += b.get(ValueLayout.JAVA_BYTE, o);
                for (int round = 0; round < 400_000; round++) {
                    for (int i = 0; i < 16; i++) {
                        ring.offer(1, msg);
                        ring.offer(2, seg, 0, size);
                    }
                    int empty = 0;
                    while (empty < 4) {
                        if (ring.poll(h, 64) == 0) {
                            empty++;
                            Thread.onSpinWait();
                        }
                    }
                }
            }
            return null;
        });
        System.out.println("sum " + sum);
    }
}
