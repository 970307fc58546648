package org.symmem4j.parallel;

import java.util.Arrays;
import java.util.List;

/**
 * Extra JVM flags for the short-lived JVMs that tests launch as the ranks of a job: system property {@value #PROPERTY},
 * which the build sets from Maven property {@code symmem4j.test.child.jvm.flags} (the parent pom:
 * {@code -XX:TieredStopAtLevel=1}, C1 only). A rank that lives for seconds spends much of its CPU compiling with C2
 * code it hardly runs, and on CI's 2 cores that CPU is the other ranks' wall time: C1 only cuts the CPU of a
 * 3-rank job of 250 small all-reduces by about 40% and the DL4J process-mode tests' by a quarter
 * (bench/results/2026-11-30-ci-time-it.md). Taken by the DL4J process-mode ranks ({@code LaunchedRanks}, the
 * plugin's mpirun tests), by it-tests' fault and launcher-restart jobs and by MultiNodeCollectivesTest's kill job
 * (its refusals share the float64 check's job); not by the collectives' correctness tests
 * across processes, nor by large or long loops: C1 does not compile the Vector API's loops into vector instructions
 * (a 4-rank RING of 1 MiB all-reduces costs 3x the CPU), and those tests are to run the code C2 makes, as users do.
 * {@code -Dsymmem4j.test.child.jvm.flags=-Xshare:auto} (a no-op) launches every rank as before.
 */
public final class ChildJvmFlags {

    /** The system property holding the flags, separated by white space. */
    public static final String PROPERTY = "symmem4j.test.childJvmFlags";

    private ChildJvmFlags() {
    }

    /** The flags, in order; none when the property is unset or blank. */
    public static List<String> get() {
        String flags = System.getProperty(PROPERTY, "").strip();
        return flags.isEmpty() ? List.of() : Arrays.asList(flags.split("\\s+"));
    }
}
