package org.symmem4j.parallel;

import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.util.Properties;

/**
 * What this copy of symmem4j is: its version, the git commit it was built from, and the Java runtime
 * running it. The metrics publish it as the {@code symmem4j.build.info} gauge (Prometheus
 * {@code symmem4j_build_info{version,commit,java} 1}, the convention of {@code go_build_info} and
 * {@code jvm_info}), and the doctor prints it first, so a dashboard or a bug report says which build
 * produced its numbers.
 *
 * @param version the Maven version, e.g. {@code 0.1.0-SNAPSHOT}; {@code unknown} when the classes were
 *                built without Maven's {@code generate-resources} (by an IDE alone)
 * @param commit  the commit, 12 hex digits, {@code -dirty} when built from a tree with uncommitted
 *                changes, {@code unknown} when built outside a git checkout
 * @param java    the running JVM's {@code java.runtime.version}
 */
public record BuildInfo(String version, String commit, String java) {

    /** The resource {@code build-info.sh} writes at {@code generate-resources}. */
    static final String RESOURCE = "build-info.properties";

    private static final BuildInfo CURRENT = load();

    /**
     * This build, read once from the jar's {@code build-info.properties}.
     *
     * @return the version, commit and Java runtime
     */
    public static BuildInfo current() {
        return CURRENT;
    }

    private static BuildInfo load() {
        Properties p = new Properties();
        try (InputStream in = BuildInfo.class.getResourceAsStream(RESOURCE)) {
            if (in != null) { // absent only in a build that skipped Maven's generate-resources (an IDE's own)
                p.load(in);
            }
        } catch (IOException e) {
            throw new UncheckedIOException("build info unreadable: resource=" + RESOURCE + " is in the symmem4j-parallel"
                    + " jar but could not be read (" + e.getMessage() + "); fix: the jar on the class path is damaged,"
                    + " rebuild it (mvn -pl parallel package) or fetch it again", e);
        }
        return new BuildInfo(p.getProperty("version", "unknown"), p.getProperty("commit", "unknown"),
                System.getProperty("java.runtime.version", Runtime.version().toString()));
    }

    /**
     * The gauge's tags, as Micrometer's {@code tags(String...)} takes them.
     *
     * @return {@code version, V, commit, C, java, J}
     */
    public String[] tags() {
        return new String[] {"version", version, "commit", commit, "java", java};
    }
}
