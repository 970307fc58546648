import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.group.InJvmWorld;
import org.symmem4j.state.MessageHandler;
import org.symmem4j.state.SymmetricRingBuffer;

/**
 * The worst profile offer's compile can see: both kinds of ring, heap and native sources, payloads of 0..200 bytes
 * (the JDK's copy takes its small-copy loop below 64 bytes where it is not told otherwise), in one loop; then prints
 * nothing but a checksum. Args: rounds.
 */
public class OfferMix {
    static long sum;
    public static void main(String[] args) {
        int rounds = Integer.parseInt(args[0]);
        InJvmWorld.runOnEveryRank(1, GroupOptions.defaults(), group -> {
            try (Arena arena = Arena.ofConfined();
                 SymmetricRingBuffer one = SymmetricRingBuffer.oneToOne(group, 0, 0, 1 << 16);
                 SymmetricRingBuffer many = SymmetricRingBuffer.manyToOne(group, 0, 1 << 16)) {
                MemorySegment heap = MemorySegment.ofArray(new byte[4096]);
                MemorySegment nat = arena.allocate(4096);
                MessageHandler count = (t, buf, o, l) -> sum += l;
                int[] sizes = {64, 0, 7, 64, 13, 64, 100, 64, 200, 64, 33, 64};
                for (int round = 0; round < rounds; round++) {
                    SymmetricRingBuffer ring = (round & 1) == 0 || args.length > 1 && args[1].equals("one") ? one : many;
                    MemorySegment src = args.length > 2 && args[2].equals("native") ? nat : (round & 2) == 0 || args.length > 2 && args[2].equals("heap") ? heap : nat;
                    int size = sizes[round % sizes.length];
                    while (!ring.offer(2, src, round & 63, size)) {
                        ring.poll(count, 64);
                    }
                    if ((round & 15) == 15) {
                        one.poll(count, 64);
                        many.poll(count, 64);
                    }
                }
                System.out.println("checksum " + sum);
            }
            return null;
        });
    }
}
