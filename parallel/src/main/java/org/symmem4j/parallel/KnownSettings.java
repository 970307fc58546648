package org.symmem4j.parallel;

import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Set;
import java.util.TreeSet;

/**
 * Every {@code symmem4j.*} system property and {@code SYMMEM4J_*} environment variable symmem4j knows, in one place,
 * so that a misspelt or unknown one is reported instead of silently ignored ({@link Configuration#validate()}).
 * Known are: each {@link Configuration} setting's property, environment variable and deprecated aliases; the removed
 * settings (refused with what replaced them); the names {@linkplain #declared() declared here} that other modules,
 * the tests and the scripts read outside {@code Configuration}; and the names under the tests' and benchmarks'
 * {@linkplain #RESERVED_PREFIXES reserved prefixes}.
 *
 * <p>The list lives in {@code parallel}, the module every other one depends on, so that it knows the other modules'
 * names without depending on them. A test of this module scans the repository's sources for names they read and
 * fails on one not known here ({@code KnownSettingsSourcesTest}).
 */
public final class KnownSettings {

    /**
     * A name read outside {@link Configuration}: by a module above {@code parallel}, the tests, the build or a script.
     *
     * @param name        the property ({@code symmem4j.x}) or environment variable ({@code SYMMEM4J_X})
     * @param readBy      who reads it
     * @param description what it does, in one line
     */
    public record Declared(String name, String readBy, String description) {
    }

    /**
     * Prefixes owned by the tests and benchmarks ({@code docs/dev/environment.md} lists their names): any name under
     * them is theirs and never reported, so a new test or benchmark switch needs no entry here.
     */
    public static final List<String> RESERVED_PREFIXES = List.of("symmem4j.test.", "symmem4j.bench.",
            "SYMMEM4J_TEST_", "SYMMEM4J_BENCH_");

    private static final List<Declared> DECLARED = List.of(
            new Declared("SYMMEM4J_WORKER_JVM_FLAGS", "serving (`WorkerJvm`)",
                    "replaces the JVM flags of the router's worker processes (`none`: no flags)"),
            new Declared("symmem4j.ring.headerLineFirst", "state (`PayloadCopy`)",
                    "experiment: whether a ring slot's header line is written before its payload; read once per JVM"),
            new Declared("symmem4j.faultInjection.haltWriting", "dl4j-symmem-plugin (`CheckpointDirectory`)",
                    "fault injection of the checkpoint tests: halts the JVM part way through writing a checkpoint"),
            new Declared("SYMMEM4J_DOCTOR_CLASSPATH", "launcher (`symmem4j-run doctor`)",
                    "the class path of the doctor's JVM"),
            new Declared("SYMMEM4J_LAUNCHER_JAR", "`bin/symmem4j-run`, `bin/symmem4j-flight-report`",
                    "the launcher jar the scripts run"),
            new Declared("SYMMEM4J_JAVA_OPTS", "`bench/gpu/run-on-device.sh`",
                    "extra JVM flags of every GPU test and benchmark JVM"),
            new Declared("symmem4j.requirePrometheus", "examples' tests",
                    "fail instead of skip without a `prometheus` binary"),
            new Declared("SYMMEM4J_REQUIRE_PROMETHEUS", "examples' tests",
                    "fail instead of skip without a `prometheus` binary"),
            new Declared("SYMMEM4J_REQUIRE_MPI", "the multi-node tests",
                    "fail instead of skip without `mpirun`"),
            new Declared("symmem4j.meters.write", "examples' `MeterReferenceTest`",
                    "rewrites the meters' reference page"),
            new Declared("symmem4j.excludedGroups", "the build (`it-tests/pom.xml`)",
                    "JUnit tags left out of `mvn verify`"),
            new Declared("symmem4j.jvm.flags", "the build (parent pom)", "the JVM flags of the tests' JVMs"),
            new Declared("symmem4j.dl4j.jvm.flags", "the build (parent pom)", "the JVM flags of the DL4J tests' JVMs"),
            new Declared("symmem4j.jdk.version", "the build (parent pom)", "the JDK versions the build accepts"),
            new Declared("symmem4j.moduleName", "the build (every module's pom)", "a jar's automatic module name"),
            new Declared("symmem4j.kernels.required", "the build (`kernels/pom.xml`)",
                    "fail the build when `nvcc` cannot build the kernels"),
            new Declared("symmem4j.kernels.manifest", "the build (`kernels/pom.xml`)", "the kernels jar's manifest"));

    private KnownSettings() {
    }

    /** {@return the names read outside {@link Configuration}, each with who reads it and what it does} */
    public static List<Declared> declared() {
        return DECLARED;
    }

    /**
     * Whether symmem4j knows {@code name}: a setting's property, environment variable or alias, a removed setting,
     * a {@linkplain #declared() declared} name or one under a {@linkplain #RESERVED_PREFIXES reserved prefix}.
     *
     * @param name a property or environment variable name
     * @return true when known
     */
    public static boolean isKnown(String name) {
        for (String prefix : RESERVED_PREFIXES) {
            if (name.startsWith(prefix)) {
                return true;
            }
        }
        return names().contains(name);
    }

    /**
     * The {@code symmem4j.*} system properties and {@code SYMMEM4J_*} environment variables of this JVM that
     * symmem4j does not know, each with the closest known name when one is close: what
     * {@link Configuration#validate()} warns about (and {@code symmem4j-doctor} lists).
     *
     * @return one entry per unknown name, such as {@code -Dsymmem4j.timeout.sm (did you mean symmem4j.timeout.ms?)};
     *         empty when all are known
     */
    public static List<String> unknown() {
        return unknown(Configuration.Source.SYSTEM);
    }

    static List<String> unknown(Configuration.Source source) {
        List<String> found = new ArrayList<>();
        for (String property : new TreeSet<>(source.propertyNames())) {
            if (property.startsWith("symmem4j.") && !isKnown(property)) {
                found.add("-D" + property + suggestion(property));
            }
        }
        for (String env : new TreeSet<>(source.environmentNames())) {
            if (env.startsWith("SYMMEM4J_") && !isKnown(env)) {
                found.add(env + suggestion(env));
            }
        }
        return found;
    }

    /**
     * The one message about {@code unknown} names: each name, then the fix.
     *
     * @param unknown the entries of {@link #unknown()}, not empty
     * @param refused whether they are refused ({@code symmem4j.settings.unknown=error}) rather than warned about
     * @return the message
     */
    static String message(List<String> unknown, boolean refused) {
        String what = unknown.size() == 1 ? "unknown setting" : unknown.size() + " unknown settings";
        return what + (refused ? ": " : ", ignored: ") + String.join(", ", unknown) + " (symmem4j reads no such name;"
                + " fix: correct each name, or unset it; docs/configuration.md lists every setting; "
                + (refused ? "-Dsymmem4j.settings.unknown=warn only warns)" : "-Dsymmem4j.settings.unknown=error refuses"
                        + " unknown names)");
    }

    /** {@code " (did you mean X?)"} for the closest known name of the same kind, or "" when none is close. */
    static String suggestion(String name) {
        boolean property = name.startsWith("symmem4j.");
        String typed = name.toLowerCase(Locale.ROOT);
        int length = name.length() - (property ? "symmem4j.".length() : "SYMMEM4J_".length());
        // close: a slip of a few keys, fewer for short names (every short name is a few edits from another)
        int limit = Math.max(1, Math.min(3, length / 4));
        String best = null;
        int bestDistance = limit + 1;
        for (String known : suggestable()) {
            if (known.startsWith("symmem4j.") != property) {
                continue;
            }
            int d = distance(typed, known.toLowerCase(Locale.ROOT));
            if (d < bestDistance) {
                best = known;
                bestDistance = d;
            }
        }
        return best == null ? "" : " (did you mean " + best + "?)";
    }

    /**
     * The optimal-string-alignment distance: insertions, deletions, substitutions and swaps of two neighbours
     * ({@code entires} for {@code entries}), each one edit.
     */
    static int distance(String a, String b) {
        int[][] d = new int[a.length() + 1][b.length() + 1];
        for (int i = 0; i <= a.length(); i++) {
            d[i][0] = i;
        }
        for (int j = 0; j <= b.length(); j++) {
            d[0][j] = j;
        }
        for (int i = 1; i <= a.length(); i++) {
            for (int j = 1; j <= b.length(); j++) {
                int cost = a.charAt(i - 1) == b.charAt(j - 1) ? 0 : 1;
                d[i][j] = Math.min(Math.min(d[i - 1][j] + 1, d[i][j - 1] + 1), d[i - 1][j - 1] + cost);
                if (i > 1 && j > 1 && a.charAt(i - 1) == b.charAt(j - 2) && a.charAt(i - 2) == b.charAt(j - 1)) {
                    d[i][j] = Math.min(d[i][j], d[i - 2][j - 2] + 1);
                }
            }
        }
        return d[a.length()][b.length()];
    }

    /** Every known name, reserved prefixes aside. */
    private static Set<String> names() {
        Set<String> names = new TreeSet<>(suggestable());
        for (Configuration.Setting<?> s : Configuration.all()) {
            names.addAll(s.aliases());
        }
        for (String removed : Configuration.removedNames()) {
            names.add(removed);
            names.add(removed.toUpperCase(Locale.ROOT).replace('.', '_'));
        }
        return names;
    }

    /** The names a suggestion may offer: settings' current names and declared ones, not aliases nor removed ones. */
    private static List<String> suggestable() {
        List<String> names = new ArrayList<>();
        for (Configuration.Setting<?> s : Configuration.all()) {
            if (s.property() != null) {
                names.add(s.property());
            }
            names.add(s.env());
        }
        for (Declared d : DECLARED) {
            names.add(d.name());
        }
        return names;
    }
}
