import java.time.Duration;
import org.symmem4j.parallel.*;
import org.symmem4j.parallel.group.InJvmWorld;
public class JitProbe {
    public static void main(String[] a) {
        int n = Integer.parseInt(a[0]);
        InJvmWorld.runOnEveryRank(2, GroupOptions.defaults().withTimeout(Duration.ofSeconds(120)), group -> {
            try (Communicator comm = Communicator.create(group); SymmetricMemory mem = SymmetricMemory.allocate(group, 1024)) {
                for (int i = 0; i < n; i++) comm.allReduce(mem, 0, 256, DType.FLOAT32, ReduceOp.SUM, Algorithm.ONE_SHOT);
            }
            return "";
        });
    }
}
