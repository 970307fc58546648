package org.symmem4j.examples;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.TreeMap;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;

/**
 * Every example ({@code *Example} with a {@code main} in this module) has its script in {@code bin/}, each
 * script runs an example that exists through {@code bin/run-example}, and the docs' examples page names every
 * script.
 */
class ExampleScriptsTest {

    private static final Pattern RUNS = Pattern.compile("/run-example\" (org\\.symmem4j\\.examples\\.(\\w+)) \"\\$@\"");

    @Test
    void everyExampleHasAScriptAndEveryScriptAnExample() throws IOException {
        Path root = DocsSnippetsTest.root();
        List<String> examples = new ArrayList<>();
        try (Stream<Path> sources = Files.list(root.resolve("examples/src/main/java/org/symmem4j/examples"))) {
            for (Path p : sources.sorted().toList()) {
                String name = p.getFileName().toString().replace(".java", "");
                if (name.endsWith("Example") && Files.readString(p).contains("public static void main(String[] args)")) {
                    examples.add(name);
                }
            }
        }
        assertTrue(examples.size() >= 5, "expected the examples, found " + examples);

        TreeMap<String, String> scripts = new TreeMap<>();   // example -> script
        try (Stream<Path> bin = Files.list(root.resolve("bin"))) {
            for (Path p : bin.sorted().toList()) {
                String name = p.getFileName().toString();
                if (!name.endsWith("-example") || name.equals("run-example")) {
                    continue;   // run-example is what the scripts call
                }
                assertTrue(Files.isExecutable(p), "bin/" + name + " is not executable (chmod +x)");
                Matcher m = RUNS.matcher(Files.readString(p));
                assertTrue(m.find(), "bin/" + name + " does not run an example through bin/run-example");
                assertTrue(examples.contains(m.group(2)), "bin/" + name + " runs " + m.group(1) + ", which is no example"
                        + " of examples/src/main/java (examples: " + examples + ")");
                scripts.put(m.group(2), name);
            }
        }
        assertEquals(examples, List.copyOf(scripts.keySet()), "examples without a bin/ script (add one like"
                + " bin/data-parallel-example), or scripts of the same example");

        String page = Files.readString(root.resolve("docs/examples.md"));
        for (String script : scripts.values()) {
            assertTrue(page.contains("bin/" + script), "docs/examples.md does not name bin/" + script);
        }
    }
}
