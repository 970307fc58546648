package org.symmem4j.parallel.group;

import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.symmem4j.parallel.SymmemException;

/**
 * How every rank's task of {@link InJvmWorld#runOnEveryRankSurviving} ended, as a value: the result of each rank
 * whose task returned (the survivors, on a world made by {@link InJvmWorld#createShrinking}) and the failure of each
 * rank whose task threw (the dead). {@link #orThrow()} gives what {@link InJvmWorld#runOnEveryRank(InJvmWorld,
 * InJvmWorld.RankTask)} gives: every result, or the first failure.
 *
 * @param <T> what each rank returns
 */
public final class RankOutcomes<T> {

    private final List<T> results;
    private final List<Throwable> failures;

    RankOutcomes(List<T> results, Throwable[] failures) {
        this.results = Collections.unmodifiableList(new ArrayList<>(results));
        this.failures = Collections.unmodifiableList(java.util.Arrays.asList(failures.clone()));
    }

    /** {@return the number of ranks that ran the task} */
    public int worldSize() {
        return results.size();
    }

    /** {@return the ranks whose task returned, in rank order} */
    public List<Integer> survivors() {
        List<Integer> out = new ArrayList<>();
        for (int r = 0; r < failures.size(); r++) {
            if (failures.get(r) == null) {
                out.add(r);
            }
        }
        return out;
    }

    /** {@return the ranks whose task threw, in rank order} */
    public List<Integer> dead() {
        List<Integer> out = new ArrayList<>();
        for (int r = 0; r < failures.size(); r++) {
            if (failures.get(r) != null) {
                out.add(r);
            }
        }
        return out;
    }

    /**
     * The result of a rank whose task returned.
     *
     * @param rank a rank of the world
     * @return what its task returned (null if it returned null)
     * @throws IllegalArgumentException when {@code rank} is out of range, or its task threw (the failure is the cause)
     */
    public T result(int rank) {
        checkRank(rank);
        Throwable f = failures.get(rank);
        if (f != null) {
            throw new IllegalArgumentException("rank=" + rank + " has no result: its task threw " + f + "; expected one of"
                    + " the survivors " + survivors() + " (fix: read survivors() or survivorResults(), or failure(rank)"
                    + " for this one)", f);
        }
        return results.get(rank);
    }

    /** {@return the survivors' results, keyed by rank, in rank order} */
    public Map<Integer, T> survivorResults() {
        Map<Integer, T> out = new LinkedHashMap<>();
        for (int r : survivors()) {
            out.put(r, results.get(r));
        }
        return Collections.unmodifiableMap(out);
    }

    /**
     * The failure of a rank whose task threw.
     *
     * @param rank a rank of the world
     * @return what its task threw, or null when it returned
     * @throws IllegalArgumentException when {@code rank} is out of range
     */
    public Throwable failure(int rank) {
        checkRank(rank);
        return failures.get(rank);
    }

    /** {@return the dead ranks' failures, keyed by rank, in rank order} */
    public Map<Integer, Throwable> failures() {
        Map<Integer, Throwable> out = new LinkedHashMap<>();
        for (int r : dead()) {
            out.put(r, failures.get(r));
        }
        return Collections.unmodifiableMap(out);
    }

    /**
     * Every rank's result, or the first failure.
     *
     * @return the ranks' results, in rank order
     * @throws SymmemException when a rank's task threw: the first rank's failure (in rank order) as the cause, the
     *                         others' suppressed
     */
    public List<T> orThrow() {
        SymmemException first = null;
        for (int r = 0; r < failures.size(); r++) {
            Throwable f = failures.get(r);
            if (f == null) {
                continue;
            }
            SymmemException e = new SymmemException("rank " + r + " failed: " + f + " (fix: see that rank's error, the"
                    + " cause below)", f);
            if (first == null) {
                first = e;
            } else {
                first.addSuppressed(e);
            }
        }
        if (first != null) {
            throw first;
        }
        return results;
    }

    private void checkRank(int rank) {
        if (rank < 0 || rank >= results.size()) {
            throw new IllegalArgumentException("rank=" + rank + ": expected 0 <= rank < " + results.size() + " (fix: pass a"
                    + " rank of the world that ran the task)");
        }
    }
}
