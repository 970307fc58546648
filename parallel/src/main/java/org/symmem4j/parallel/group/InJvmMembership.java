package org.symmem4j.parallel.group;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.SortedSet;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;
import java.util.function.IntFunction;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.SymmemException;
import org.symmem4j.parallel.sync.BackoffIdleStrategy;
import org.symmem4j.parallel.sync.IdleStrategy;

/**
 * The membership authority of a shrinking {@link InJvmWorld} ({@link InJvmWorld#createShrinking}): for threads of one
 * JVM, the part {@code symmem4j-run --on-failure shrink} plays for processes. A rank is <b>dead</b> when its task in
 * {@link InJvmWorld#runOnEveryRank(InJvmWorld, InJvmWorld.RankTask)} threw (as a process that exits with an error); a
 * task that returns is not dead (as a process that exits 0: a rank whose replica was lost leaves that way). A rank
 * that hangs is not dead either: its peers' timeouts name it and the job fails instead of shrinking.
 *
 * <p>One record of the dead serves the first world and every world its shrinks form, by the first world's ranks (a
 * survivor that fails after a shrink is announced by the first world's {@code runOnEveryRank}, whose thread it still
 * is). A shrink forms the survivors' world once, by name ({@code world-without-<first-world ranks gone>}): every
 * survivor that read the same dead ranks joins the same world; two that read them at different moments of a second
 * death name different worlds and fail their first exchange within the timeout, as processes do.
 */
final class InJvmMembership {

    /**
     * The first world's ranks whose tasks failed. Written by the failed rank's own thread in {@code runOnEveryRank},
     * read by the survivors' {@link #shrink}: a concurrent set, whose {@code add} happens-before a {@code contains} or
     * iteration that sees the element, so a survivor that sees a rank dead also sees that rank's last writes.
     */
    private final Set<Integer> dead;
    /** The survivors' worlds formed so far, by name; guarded by itself (every generation's shrinks share it). */
    private final Map<String, InJvmWorld> formed;
    /** The first world's rank of each rank of this world. */
    private final int[] firstRanks;
    /** What this world is called in messages: "world", then "world-without-1-3". */
    private final String name;

    private InJvmMembership(Set<Integer> dead, Map<String, InJvmWorld> formed, int[] firstRanks, String name) {
        this.dead = dead;
        this.formed = formed;
        this.firstRanks = firstRanks;
        this.name = name;
    }

    /** The authority of a first world of {@code worldSize} ranks. */
    static InJvmMembership first(int worldSize) {
        int[] ranks = new int[worldSize];
        for (int r = 0; r < worldSize; r++) {
            ranks[r] = r;
        }
        return new InJvmMembership(ConcurrentHashMap.newKeySet(), new HashMap<>(), ranks, "world");
    }

    /** Rank {@code rank} of this world failed: its task threw (called on its own thread, before the thread ends). */
    void died(int rank) {
        dead.add(firstRanks[rank]); // publishes the death to the survivors' shrink (see the field)
    }

    /** {@return whether rank {@code rank} of this world was announced dead} */
    boolean isDead(int rank) {
        return dead.contains(firstRanks[rank]);
    }

    /** {@return what this world is called in messages} */
    String name() {
        return name;
    }

    /**
     * {@link Group#shrink(IntFunction)} of {@code group}, the world's group of this world: waits (at most the timeout)
     * until a rank of this world is dead, then the survivors join the world formed without the dead and the ranks they
     * take out, in their old order; {@code group} is aborted (its teardown waits for nobody).
     */
    Group.Survivors shrink(InJvmGroup group, IntFunction<int[]> lostWith) {
        InJvmWorld world = group.world();
        int n = group.worldSize();
        int me = group.rank();
        long deadline = System.nanoTime() + world.options().timeout().toNanos();
        IdleStrategy idle = new BackoffIdleStrategy(0, 0, 1_000_000, 10_000_000);
        SortedSet<Integer> seen;
        List<Integer> deadHere = new ArrayList<>();
        while (true) {
            seen = new TreeSet<>(dead); // one snapshot: the dead of this world and the name of the next agree
            deadHere.clear();
            for (int r = 0; r < n; r++) {
                if (seen.contains(firstRanks[r])) {
                    deadHere.add(r);
                }
            }
            if (!deadHere.isEmpty()) {
                break;
            }
            if (System.nanoTime() - deadline >= 0) {
                throw new SymmemException("rank=" + me + " of in-JVM " + name + " cannot shrink: no rank of it failed"
                        + " within timeout=" + world.options().timeout() + " (expected a rank whose task in"
                        + " InJvmWorld.runOnEveryRank threw; a rank that hangs is not dead: it is named by the peers'"
                        + " timeouts, and the job fails instead of shrinking; fix: call shrink() after a peer's task"
                        + " failed, not on a timeout alone)");
            }
            idle.idle();
        }
        if (deadHere.contains(me)) {
            throw new SymmemException("rank=" + me + " of in-JVM " + name + " cannot shrink: this rank's task was"
                    + " announced dead while it runs (expected only failed ranks' tasks to be dead; fix: end this"
                    + " rank's task by throwing: the survivors go on without it)");
        }
        ShrinkPlan plan = ShrinkPlan.of(n, me, deadHere, lostWith, "in-JVM " + name);
        SortedSet<Integer> gone = new TreeSet<>(seen);
        int[] survivors = new int[plan.survivors().size()];
        for (int i = 0; i < survivors.length; i++) {
            survivors[i] = firstRanks[plan.survivors().get(i)];
        }
        for (int r : plan.lost()) {
            gone.add(firstRanks[r]); // the same name whether a leaving rank has ended yet or not
        }
        if (plan.leaves(me)) {
            group.abortState().raise(deadHere.getFirst(), "rank=" + me + ": leaves with dead ranks " + deadHere
                    + " of in-JVM " + name);
            return new Group.Survivors(null, plan.dead(), plan.leaving());
        }
        StringBuilder without = new StringBuilder("world-without");
        for (int d : gone) {
            without.append('-').append(d);
        }
        String next = without.toString();
        InJvmWorld shrunk;
        synchronized (formed) {
            shrunk = formed.computeIfAbsent(next, k -> world.formShrunk(survivors.length,
                    new InJvmMembership(dead, formed, survivors, k)));
        }
        group.abortState().raise(deadHere.getFirst(), "rank=" + me + ": shrunk in place without ranks " + deadHere
                + " of in-JVM " + name);
        return new Group.Survivors(shrunk.join(plan.survivors().indexOf(me)), plan.dead(), plan.leaving());
    }
}
