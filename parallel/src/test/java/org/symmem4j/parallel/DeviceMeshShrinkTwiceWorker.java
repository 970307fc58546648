package org.symmem4j.parallel;

import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;
import org.symmem4j.parallel.cuda.WorkerProcesses;
import org.symmem4j.parallel.group.ProcessGroup;

/**
 * One rank of {@link DeviceMeshShrinkTwiceTest} (host only): six processes laid out as a {@code dp 3 x tp 2} mesh, whose
 * mesh shrinks twice along {@code dp}. Launch rank 1 (dp 0, tp 1) kills itself: launch rank 0, its tp peer, leaves; the
 * other four shrink to {@code dp 2 x tp 2}. On that mesh launch rank 4 (now dp 1, tp 0) kills itself: launch rank 5
 * leaves; launch ranks 2 and 3 shrink the shrunk mesh again, to {@code dp 1 x tp 2}. After each shrink every survivor
 * checks what the shrink reported (the dead rank in the old world's numbering, the lost dp coordinate) and, through
 * exchanges over the new world and the new tp and dp groups, who is in each group and in which order. Prints
 * {@code MESH OK rank=R} (a leaving rank too) and exits 0, or prints what failed and exits 3.
 */
public final class DeviceMeshShrinkTwiceWorker {

    private DeviceMeshShrinkTwiceWorker() {
    }

    public static void main(String[] args) {
        WorkerProcesses.exitWith(() -> {
            try (ProcessGroup world = ProcessGroup.fromEnvironment(GroupOptions.defaults());
                 DeviceMesh mesh = DeviceMesh.of(world, "dp", 3, "tp", 2)) {
                int me = world.rank(); // the launch rank: the first world is the launcher's
                check(world.canShrink(), "the harness's group cannot shrink");
                world.allGatherBytes("joined", new byte[0]);
                if (me == 1) {
                    throw WorkerProcesses.killSelf();
                }
                failsWithoutTheDead(mesh.group(), "after-first-kill");
                DeviceMesh.Shrunk first = mesh.shrink("dp");
                check(first.dead().equals(List.of(1)) && first.lostCoordinates().equals(List.of(0)), "first shrink: dead="
                        + first.dead() + " lost=" + first.lostCoordinates() + ", expected dead=[1] lost=[0]");
                if (me == 0) {
                    check(first.left(), "launch rank 0 (replica 0) should leave with its tp peer");
                    return "MESH OK rank=" + me;
                }
                check(!first.left(), "launch rank " + me + " should survive the first shrink");
                try (Group secondWorld = first.mesh().group(); DeviceMesh second = first.mesh()) { // the mesh closes first
                    checkLayout(second, me, 2, List.of(2, 3, 4, 5), "first");
                    if (me == 4) {
                        throw WorkerProcesses.killSelf();
                    }
                    failsWithoutTheDead(secondWorld, "after-second-kill");
                    DeviceMesh.Shrunk again = second.shrink("dp"); // the second shrink of one mesh's lineage
                    check(again.dead().equals(List.of(2)) && again.lostCoordinates().equals(List.of(1)), "second"
                            + " shrink: dead=" + again.dead() + " lost=" + again.lostCoordinates() + ", expected dead=[2]"
                            + " (launch rank 4 in the shrunk world) lost=[1]");
                    if (me == 5) {
                        check(again.left(), "launch rank 5 should leave with its tp peer, launch rank 4");
                        return "MESH OK rank=" + me;
                    }
                    check(!again.left(), "launch rank " + me + " should survive the second shrink");
                    try (Group thirdWorld = again.mesh().group(); DeviceMesh third = again.mesh()) {
                        check(thirdWorld.worldSize() == 2, "the second survivors' world holds " + thirdWorld.worldSize()
                                + " ranks, expected 2");
                        checkLayout(third, me, 1, List.of(2, 3), "second");
                    }
                }
                return "MESH OK rank=" + me;
            }
        });
    }

    /** An exchange over {@code g} fails once a rank of it was killed (the survivors' cue to shrink). */
    private static void failsWithoutTheDead(Group g, String key) {
        try {
            g.allGatherBytes(key, new byte[0]);
        } catch (SymmemException expected) {
            System.out.println("rank " + g.rank() + " saw: " + expected.getMessage());
            return;
        }
        throw new AssertionError("the exchange " + key + " completed without the killed rank");
    }

    /**
     * The survivors' mesh: {@code dp x 2} over the launch ranks {@code alive} (in their old order), each keeping its tp
     * coordinate; the world, the tp group and the dp group each hold the expected launch ranks in rank order.
     */
    private static void checkLayout(DeviceMesh m, int me, int dp, List<Integer> alive, String shrink) {
        Group world = m.group();
        check(m.size("dp") == dp && m.size("tp") == 2 && world.worldSize() == alive.size(), "expected dp " + dp + " x tp 2"
                + " over " + alive + ", found " + m + " of world size " + world.worldSize());
        check(world.rank() == alive.indexOf(me), "launch rank " + me + " should be world rank " + alive.indexOf(me)
                + ", found " + world.rank());
        check(m.coordinate("tp") == me % 2, "launch rank " + me + " keeps tp coordinate " + me % 2 + ", found "
                + m.coordinate("tp"));
        List<Integer> tp = new ArrayList<>();
        List<Integer> dpPeers = new ArrayList<>();
        for (int i = 0; i < alive.size(); i++) {
            int r = alive.get(i);
            if (i / 2 == world.rank() / 2) {
                tp.add(r);
            }
            if (r % 2 == me % 2) {
                dpPeers.add(r);
            }
        }
        List<Integer> inWorld = launchRanks(world, shrink + "-world");
        List<Integer> inTp = launchRanks(m.group("tp"), shrink + "-tp");
        List<Integer> inDp = launchRanks(m.group("dp"), shrink + "-dp");
        check(inWorld.equals(alive), "after the " + shrink + " shrink the world holds " + inWorld + ", expected " + alive);
        check(inTp.equals(tp), "after the " + shrink + " shrink the tp group holds " + inTp + ", expected " + tp);
        check(inDp.equals(dpPeers), "after the " + shrink + " shrink the dp group holds " + inDp + ", expected " + dpPeers);
    }

    /** Every rank of {@code g} tells its launch rank (its first world's rank), in {@code g}'s rank order. */
    private static List<Integer> launchRanks(Group g, String key) {
        int launch = Integer.parseInt(System.getenv("RANK"));
        List<Integer> out = new ArrayList<>();
        for (byte[] b : g.allGatherBytes(key, ByteBuffer.allocate(4).putInt(launch).array())) {
            out.add(ByteBuffer.wrap(b).getInt());
        }
        return out;
    }

    private static void check(boolean ok, String what) {
        if (!ok) {
            throw new AssertionError(what);
        }
    }
}
