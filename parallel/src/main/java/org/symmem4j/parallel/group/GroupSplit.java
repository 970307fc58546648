package org.symmem4j.parallel.group;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.concurrent.ThreadLocalRandom;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.symmem4j.parallel.DeviceMesh;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.GroupAbort;
import org.symmem4j.parallel.SymmemException;
import org.symmem4j.parallel.Transport;

/**
 * Splitting a group, as {@code ncclCommSplit} does: every rank of the parent passes a color and a
 * key; the ranks of one color form a sub-group, numbered by key (ties by parent rank). One set-up
 * exchange over the parent agrees on the membership and on a fresh id that names the sub-group's
 * keys (in-JVM exchange keys, store keys, nothing else is shared), so sub-groups of one split, and
 * of later splits, never see each other's set-up traffic.
 *
 * <p>Aborts cross the split both ways: a parent's abort reaches every sub-group of this rank (so
 * its memories' pads tell the sub-group's peers), and a sub-group's abort reaches the parent (and
 * from there every other sub-group of this rank), so a failure in one sub-group reaches every rank
 * that shares an allocated group with the failing one, directly or through other sub-groups: in a
 * mesh, every rank.
 */
final class GroupSplit {

    /** One rank's split record: "color key id label". */
    private static final Pattern RECORD = Pattern.compile("(-?[0-9]{1,10}) (-?[0-9]{1,10}) ([0-9a-f]{16}) (\\S{1,32})");

    private GroupSplit() {
    }

    /** One rank's answer from the split exchange. */
    private record Entry(int parentRank, int color, int key) {
    }

    /**
     * Collective over {@code parent}: agrees on the membership of {@code color}'s sub-group and
     * creates this rank's part of it, on the parent's transport kind
     * ({@link Transport#forSubGroup(int[])}).
     */
    static Group split(Group parent, int color, int key, String label) {
        if (label == null || !DeviceMesh.LABEL.matcher(label).matches()) {
            throw new IllegalArgumentException("split: label=" + label + " must match " + DeviceMesh.LABEL.pattern()
                    + " (fix: use a letter then up to 31 letters, digits, _ or -, e.g. \"dp\")");
        }
        String proposal = String.format("%016x", ThreadLocalRandom.current().nextLong());
        List<byte[]> all = parent.allGatherBytes("split-" + label,
                (color + " " + key + " " + proposal + " " + label).getBytes(StandardCharsets.UTF_8));
        List<Entry> entries = new ArrayList<>(all.size());
        String id = null;
        for (int r = 0; r < all.size(); r++) {
            String value = new String(all.get(r), StandardCharsets.UTF_8);
            Matcher m = RECORD.matcher(value);
            if (!m.matches()) {
                throw new SymmemException("split: rank=" + parent.rank() + " the split record of "
                        + parent.describe(r) + " is malformed: '" + value.replaceAll("[^\\x20-\\x7e]", "?")
                        + "' (expected '<color> <key> <16 hex digits> <label>'; fix: run the same symmem4j version on"
                        + " every rank, and give each job its own MASTER_PORT and SYMMEM4J_RUN_ID so no other job"
                        + " writes to this store)");
            }
            if (!m.group(4).equals(label)) {
                throw new SymmemException("split mismatch: rank=" + parent.rank() + " called split '" + label + "' but "
                        + parent.describe(r) + " called split '" + m.group(4) + "' (fix: every rank must split"
                        + " the same group"
                        + " in the same order)");
            }
            if (r == 0) {
                id = m.group(3); // rank 0's proposal names the split on every rank
            }
            entries.add(new Entry(r, Integer.parseInt(m.group(1)), Integer.parseInt(m.group(2))));
        }
        if (entries.stream().anyMatch(e -> e.color() < 0)) {
            // checked after the exchange, so every rank fails with the same message instead of the others timing out
            throw new IllegalArgumentException("split '" + label + "': colors must be >= 0 (every rank joins exactly one"
                    + " sub-group; fix: pass a color >= 0 on every rank); found "
                    + entries.stream().filter(e -> e.color() < 0).map(e -> "parent rank " + e.parentRank() + " color="
                    + e.color()).toList());
        }
        List<Entry> mine = entries.stream().filter(e -> e.color() == color)
                .sorted(Comparator.comparingInt(Entry::key).thenComparingInt(Entry::parentRank)).toList();
        int[] members = new int[mine.size()];
        int myIndex = -1;
        for (int i = 0; i < members.length; i++) {
            members[i] = mine.get(i).parentRank();
            if (members[i] == parent.rank()) {
                myIndex = i;
            }
        }
        String subId = id + "-" + label + "-c" + color;
        // In-JVM groups exchange live objects (segments, device pointers), so an in-JVM sub-group must be
        // an InJvmGroup; every other kind gets a sub-group that exchanges bytes through the parent's store.
        if (parent instanceof InJvmGroup g) { // this package's own kind: threads exchange live objects
            return g.newSubGroup(members, myIndex, subId, label);
        }
        return new StoreSubGroup(parent, members, myIndex, subId, label);
    }

    /**
     * A sub-group's host transport: its {@code transport} (the parent's, for the sub-group) when the
     * parent's memory is host memory already, else the parent's host transport for the sub-group.
     */
    static Transport subGroupHostTransport(Group parent, Transport transport, int[] parentRanks) {
        return parent.hostTransport() == parent.transport() ? transport
                : parent.hostTransport().forSubGroup(parentRanks.clone());
    }

    /**
     * Makes {@code sub}'s abort and {@code parent}'s abort reach each other, translating the
     * culprit's rank between the two numberings ({@code parentRanks[i]} is sub-group rank
     * {@code i}; a culprit outside the sub-group is reported by the rank that heard of it). Returns
     * what detaches both listeners, for the sub-group's close.
     */
    static Runnable linkAborts(Group parent, Group sub, int[] parentRanks) {
        GroupAbort parentAbort = parent.abortState();
        GroupAbort subAbort = sub.abortState();
        Runnable down = parentAbort.onRaise(c -> {
            int culprit = indexOf(parentRanks, c.rank());
            // a culprit outside the sub-group has no rank here: the reason names it in the parent instead
            subAbort.raise(culprit, culprit >= 0 || c.rank() < 0 ? c.reason()
                    : "in the parent group, because of " + parent.describe(c.rank()) + ": " + c.reason());
        });
        Runnable up = subAbort.onRaise(c -> parentAbort.raise(c.rank() < 0 ? -1 : parentRanks[c.rank()], c.reason()));
        return () -> {
            down.run();
            up.run();
        };
    }

    private static int indexOf(int[] ranks, int rank) {
        for (int i = 0; i < ranks.length; i++) {
            if (ranks[i] == rank) {
                return i;
            }
        }
        return -1;
    }
}
