import java.time.Duration;
import org.symmem4j.parallel.*;
import org.symmem4j.parallel.group.InJvmWorld;

/** Throwaway: runs 1 KiB in-place all-reduces (ONE_SHOT, TWO_SHOT) on 2 in-JVM ranks, for -XX:+LogCompilation. */
public class JitProbe {
    public static void main(String[] a) {
        int n = Integer.parseInt(a[0]);
        InJvmWorld.runOnEveryRank(2, GroupOptions.defaults().withTimeout(Duration.ofSeconds(120)), group -> {
            try (Communicator comm = Communicator.create(group); SymmetricMemory mem = SymmetricMemory.allocate(group, 1024)) {
                for (int i = 0; i < n; i++) {
                    comm.allReduce(mem, 0, 256, DType.FLOAT32, ReduceOp.SUM, (i & 1) == 0 ? Algorithm.ONE_SHOT : Algorithm.TWO_SHOT);
                }
            }
            return "";
        });
    }
}
