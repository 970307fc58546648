import java.lang.foreign.*;
import java.time.Duration;
import java.util.concurrent.*;
import org.symmem4j.parallel.*;
import org.symmem4j.parallel.group.InJvmWorld;

/** Four ranks; rank 3 skips the 13th all-reduce (a forgotten sync on one rank). */
public class HangDemo {
    public static void main(String[] a) throws Exception {
        int n = 4;
        CountDownLatch peersFailed = new CountDownLatch(n - 1);
        try (InJvmWorld world = InJvmWorld.create(n, GroupOptions.defaults().withTimeout(Duration.ofSeconds(4)))) {
            Thread[] t = new Thread[n];
            for (int r = 0; r < n; r++) {
                int rank = r;
                t[r] = Thread.ofPlatform().name("rank-" + r).start(() -> {
                    try (Group g = world.join(rank); Communicator c = Communicator.create(g)) {
                        MemorySegment buf = Arena.ofAuto().allocate(4L * 1024, 64);
                        for (int i = 0; i < 12; i++) c.allReduce(buf, 1024, DType.FLOAT32, ReduceOp.SUM, Algorithm.TWO_SHOT);
                        if (rank == 3) { peersFailed.await(); }
                        try { c.allReduce(buf, 1024, DType.FLOAT32, ReduceOp.SUM, Algorithm.TWO_SHOT); }
                        finally { if (rank != 3) peersFailed.countDown(); }
                    } catch (Throwable e) { System.out.println("rank " + rank + ": " + e.getMessage()); }
                });
            }
            for (Thread x : t) x.join();
        }
    }
}
