package org.symmem4j.serving.session;

import java.lang.foreign.MemorySegment;
import java.util.Arrays;

import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.symmem4j.parallel.SignalOp;
import org.symmem4j.parallel.SymmetricMemory;
import org.symmem4j.parallel.cuda.WorkerProcesses;
import org.symmem4j.parallel.group.ProcessGroup;

/**
 * One rank of the session cache's cross-process tests, a JVM of its own started by {@link WorkerProcesses}.
 * {@code args[0]} is the scenario.
 */
public final class SessionProcessWorker {

    private SessionProcessWorker() {
    }

    public static void main(String[] args) {
        WorkerProcesses.exitWith(() -> switch (args[0]) {
            case "alternate" -> alternate();
            case "killed-writer" -> killedWriter();
            default -> throw new IllegalArgumentException("unknown scenario " + args[0]);
        });
    }

    /**
     * Two processes step {@link RnnSessionStateTest#SESSIONS} sessions in turns (session s at step t on rank
     * (s + t) % 2); each checks its outputs bitwise against one network stepping the session alone.
     */
    private static String alternate() {
        ProcessGroup group = ProcessGroup.fromEnvironment();
        float[][][] expected = RnnSessionStateTest.reference(42);
        MultiLayerNetwork net = RnnNets.net(42);
        int checked = 0;
        try (SessionCache cache = SessionCache.create(group, SessionCache.Settings.of(256, 64 * 1024, 16, 4096))) {
            for (int t = 0; t < RnnSessionStateTest.STEPS; t++) {
                for (int s = 0; s < RnnSessionStateTest.SESSIONS; s++) {
                    if ((s + t) % 2 == group.rank()) {
                        if (RnnSessionState.load(cache, "session-" + s, net) != (t > 0)) {
                            throw new AssertionError("session " + s + " at step " + t + ": known=" + (t == 0));
                        }
                        float[] out = RnnNets.step(net, s, t);
                        if (!Arrays.equals(expected[s][t], out)) {
                            throw new AssertionError("session " + s + " step " + t + " on rank " + group.rank() + ": "
                                    + Arrays.toString(out) + " expected " + Arrays.toString(expected[s][t]));
                        }
                        RnnSessionState.save(cache, "session-" + s, net);
                        checked++;
                    }
                }
                group.allGatherBytes("step-" + t, new byte[0]);
            }
        }
        group.close();
        return "SESSION OK rank=" + group.rank() + " (steps checked=" + checked + ")";
    }

    /**
     * Rank 1 puts session "victim" whole, then dies by SIGKILL in the middle of its next put (after the first of
     * four blocks). Rank 0 must find "victim" lost (never the old or the half-written state), take the dead
     * writer's lock over with its next put, and find "keep" (put by rank 1 before) intact.
     */
    private static String killedWriter() throws Exception {
        ProcessGroup group = ProcessGroup.fromEnvironment();
        SymmetricMemory control = SymmetricMemory.allocate(group, 0);
        SessionCache cache = SessionCache.create(group, SessionCache.Settings.of(64, 64 * 64, 16, 256));
        byte[] keep = SessionCacheTest.pattern(1, 200);
        if (group.rank() == 1) {
            cache.put("keep", MemorySegment.ofArray(keep));
            cache.put("victim", MemorySegment.ofArray(SessionCacheTest.pattern(2, 256)));
            SessionCache.CRASH_AFTER_BLOCKS.set(1);
            SessionCache.CRASH_HOOK.set(() -> {
                control.signal(0, 0, 1, SignalOp.SET);
                throw WorkerProcesses.killSelf();
            });
            cache.put("victim", MemorySegment.ofArray(SessionCacheTest.pattern(3, 256)));
            throw new IllegalStateException("the put returned: the crash hook did not run");
        }
        control.waitSignal(0, 1, 1); // rank 1 is in the middle of its put
        expectLost(cache, "victim");
        // a put to victim's part finds the lock held by a dead rank: takes it over and repairs the part
        cache.put("victim", MemorySegment.ofArray(SessionCacheTest.pattern(4, 100)));
        if (!Arrays.equals(SessionCacheTest.pattern(4, 100), cache.get("victim"))) {
            throw new AssertionError("victim after the survivor's put");
        }
        if (!Arrays.equals(keep, cache.get("keep"))) {
            throw new AssertionError("'keep', written whole before the crash, changed");
        }
        // every block is accounted for after the repair: fill the parts to the brim
        for (int i = 0; i < 40; i++) {
            cache.put("fill-" + i, MemorySegment.ofArray(SessionCacheTest.pattern(10 + i, 256)));
        }
        group.abort("test over: rank 1 was killed on purpose");
        control.close();
        group.close();
        return "SESSION OK rank=" + group.rank();
    }

    private static void expectLost(SessionCache cache, String id) {
        try {
            byte[] got = cache.get(id);
            throw new AssertionError("session '" + id + "' read as valid (" + (got == null ? "unknown" : got.length
                    + " bytes") + ") while its writer died mid-write");
        } catch (SessionExpiredException e) {
            if (e.reason() != SessionExpiredException.Reason.WRITER_DIED) {
                throw new AssertionError("reason " + e.reason() + ": " + e.getMessage());
            }
            System.out.println("as expected: " + e.getMessage());
        }
    }
}
