package org.symmem4j.parallel.cuda;

import java.nio.ByteBuffer;
import java.util.List;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.PeerTimeoutException;
import org.symmem4j.parallel.group.ProcessGroup;

/**
 * One rank of {@link ShrinkHarnessTest} (host only): joins a {@link ProcessGroup} on its host transport under
 * {@link WorkerProcesses#runWithShrink}; rank {@code killRank} sends itself SIGKILL, the others see it gone at their next
 * exchange, shrink ({@link Group#shrink()}: the membership file the harness writes) and exchange over the survivors'
 * group. Prints {@code HARNESS OK rank=R} and exits 0, or prints what failed and exits 3.
 *
 * <p>Arguments: {@code killRank}.
 */
public final class ShrinkHarnessWorker {

    private ShrinkHarnessWorker() {
    }

    public static void main(String[] args) {
        WorkerProcesses.exitWith(() -> {
            int killRank = Integer.parseInt(args[0]);
            try (ProcessGroup group = ProcessGroup.fromEnvironment(GroupOptions.defaults())) {
                int rank = group.rank();
                group.allGatherBytes("joined", new byte[0]);
                if (!group.canShrink()) {
                    throw new AssertionError("the harness's group cannot shrink: SYMMEM4J_MEMBERSHIP_FILE="
                            + System.getenv("SYMMEM4J_MEMBERSHIP_FILE"));
                }
                if (rank == killRank) {
                    throw WorkerProcesses.killSelf();
                }
                try {
                    group.allGatherBytes("after-kill", new byte[0]);
                    throw new AssertionError("the exchange completed without rank " + killRank);
                } catch (PeerTimeoutException expected) {
                    System.out.println("rank " + rank + " saw: " + expected.getMessage());
                }
                Group.Survivors s = group.shrink();
                try (Group next = s.group()) {
                    if (!s.dead().equals(List.of(killRank)) || next.worldSize() != group.worldSize() - 1) {
                        throw new AssertionError("expected the survivors without rank " + killRank + ", found dead="
                                + s.dead() + " worldSize=" + next.worldSize());
                    }
                    List<byte[]> all = next.allGatherBytes("survivors", ByteBuffer.allocate(4).putInt(rank).array());
                    for (int r = 0; r < all.size(); r++) {
                        int old = ByteBuffer.wrap(all.get(r)).getInt();
                        int expected = r < killRank ? r : r + 1; // dense renumbering in the old order
                        if (old != expected) {
                            throw new AssertionError("new rank " + r + " was old rank " + old + ", expected " + expected);
                        }
                    }
                }
                return "HARNESS OK rank=" + rank;
            }
        });
    }
}
