package org.symmem4j.parallel;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;

/**
 * Keeps {@link KnownSettings} complete: every {@code symmem4j.*} or {@code SYMMEM4J_*} name that the repository's
 * sources read (a whole string literal in any module's main or test Java sources, a {@code -Dsymmem4j.*} or
 * {@code SYMMEM4J_*} word in a script, a {@code <symmem4j.*>} property in a pom) must be known, else a user who sets
 * it would be warned that it is unknown. It lives in {@code parallel}, which every module depends on but which
 * depends on none: it reads the other modules' files, not their classes, so it runs in every build of this module,
 * the cheapest place that sees them all.
 */
class KnownSettingsSourcesTest {

    /** A whole Java string literal that is a setting-like name; JFR event names ({@code symmem4j.Collective}) are not. */
    private static final Pattern JAVA_LITERAL =
            Pattern.compile("\"(symmem4j(?:\\.[a-z][A-Za-z0-9]*)+|SYMMEM4J_[A-Z0-9_]*[A-Z0-9])\"");
    /** In scripts: a {@code -D} property (not a placeholder such as {@code -Dsymmem4j.ring.X}) or a variable. */
    private static final Pattern SCRIPT_WORD = Pattern.compile(
            "-D(symmem4j(?:\\.[a-z][A-Za-z0-9]*)+)(?![.A-Za-z0-9])|\\b(SYMMEM4J_[A-Z0-9_]*[A-Z0-9])\\b");
    /** In poms: a Maven property, a system property when passed with {@code -D} or set for the tests' JVMs. */
    private static final Pattern POM_PROPERTY = Pattern.compile("<(symmem4j(?:\\.[a-zA-Z0-9]+)+)>");

    /** Literals that are not settings. */
    private static final Set<String> NOT_SETTINGS = Set.of("symmem4j.build.info" /* a meter's name */);
    /** Files that hold unknown names on purpose. */
    private static final Set<String> ON_PURPOSE = Set.of("KnownSettingsTest.java");

    private static Path root() {
        Path here = Path.of("").toAbsolutePath();
        return Files.isDirectory(here.resolve("parallel")) ? here : here.getParent();
    }

    @Test
    void everyNameTheSourcesReadIsKnown() throws IOException {
        Path root = root();
        Map<String, String> found = new TreeMap<>(); // name -> the first file naming it
        try (Stream<Path> files = Files.walk(root)) {
            for (Path f : (Iterable<Path>) files.filter(Files::isRegularFile)::iterator) {
                String rel = root.relativize(f).toString();
                if (rel.contains("/target/") || rel.startsWith("bench/results/") || rel.startsWith(".git/")
                        || ON_PURPOSE.contains(f.getFileName().toString())) {
                    continue;
                }
                Pattern p = rel.endsWith(".java") && rel.contains("/src/") ? JAVA_LITERAL
                        : rel.endsWith(".sh") || rel.startsWith("bin/") || rel.equals(".ci/run") ? SCRIPT_WORD
                        : rel.endsWith("pom.xml") ? POM_PROPERTY : null;
                if (p == null) {
                    continue;
                }
                Matcher m = p.matcher(Files.readString(f, StandardCharsets.UTF_8));
                while (m.find()) {
                    String name = m.group(1) != null ? m.group(1) : m.group(2);
                    found.putIfAbsent(name, rel);
                }
            }
        }
        assertTrue(found.size() >= 60, "the scan found too few names, is it reading the repository? " + found.keySet());
        Map<String, String> unknown = new TreeMap<>(found);
        unknown.keySet().removeIf(name -> KnownSettings.isKnown(name) || NOT_SETTINGS.contains(name));
        assertEquals(Map.of(), unknown, "names read by the sources (name=first file) that KnownSettings does not know:"
                + " make each a Configuration setting, or declare it in KnownSettings with who reads it (a test's or"
                + " benchmark's switch: name it symmem4j.test.* or symmem4j.bench.*)");
    }
}
