package org.symmem4j.benchmarks;

import java.util.Collection;

import org.openjdk.jmh.results.RunResult;

/** Looking up one trial of a JMH run by its parameters. */
final class JmhResults {

    private JmhResults() {
    }

    /**
     * {@return the trial of {@code results} whose parameters have every given value, or null when none has}
     *
     * @param nameValues parameter names and their values, alternating ({@code "kind", "AGRONA_ONE_TO_ONE", ...})
     */
    static RunResult withParams(Collection<RunResult> results, String... nameValues) {
        next:
        for (RunResult r : results) {
            for (int i = 0; i < nameValues.length; i += 2) {
                if (!nameValues[i + 1].equals(r.getParams().getParam(nameValues[i]))) {
                    continue next;
                }
            }
            return r;
        }
        return null;
    }
}
