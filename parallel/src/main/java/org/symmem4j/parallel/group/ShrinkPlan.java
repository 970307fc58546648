package org.symmem4j.parallel.group;

import java.util.ArrayList;
import java.util.List;
import java.util.SortedSet;
import java.util.TreeSet;
import java.util.function.IntFunction;

/**
 * Who goes on after an in-place shrink ({@link org.symmem4j.parallel.Group#shrink(IntFunction)}), from the dead ranks a
 * membership authority named (the launcher's membership file for a {@link ProcessGroup}, the world's record of its
 * failed rank threads for an {@link InJvmWorld}): each dead rank takes out the ranks {@code lostWith} names. Every
 * survivor computes the same plan from the same dead ranks.
 *
 * @param dead      the dead ranks of the old group, ascending
 * @param lost      the dead and the ranks they take out, ascending
 * @param leaving   the ranks taken out that are alive, ascending
 * @param survivors the ranks that go on, ascending: their index in this list is their rank in the new group
 */
record ShrinkPlan(List<Integer> dead, SortedSet<Integer> lost, List<Integer> leaving, List<Integer> survivors) {

    /**
     * The plan for a group of {@code worldSize} ranks.
     *
     * @param identity what the group is called in an error message
     * @throws IllegalArgumentException when {@code lostWith} names a rank outside the group
     */
    static ShrinkPlan of(int worldSize, int rank, List<Integer> dead, IntFunction<int[]> lostWith, String identity) {
        SortedSet<Integer> lost = new TreeSet<>();
        for (int d : dead) {
            for (int r : lostWith.apply(d)) {
                if (r < 0 || r >= worldSize) {
                    throw new IllegalArgumentException("rank=" + rank + " of " + identity + ": shrink's lostWith("
                            + d + ") named rank " + r + ", outside [0, " + worldSize + ") (expected ranks of this"
                            + " group; fix: name the ranks that leave with a dead one in this group's numbering)");
                }
                lost.add(r);
            }
            lost.add(d);
        }
        List<Integer> leaving = lost.stream().filter(r -> !dead.contains(r)).toList();
        List<Integer> survivors = new ArrayList<>();
        for (int r = 0; r < worldSize; r++) {
            if (!lost.contains(r)) {
                survivors.add(r);
            }
        }
        return new ShrinkPlan(List.copyOf(dead), lost, leaving, List.copyOf(survivors));
    }

    /** {@return whether {@code rank} leaves: dead, or taken out by a dead rank} */
    boolean leaves(int rank) {
        return lost.contains(rank);
    }
}
