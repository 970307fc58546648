package org.symmem4j.examples;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.URI;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.TreeSet;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;
import javax.tools.Diagnostic;
import javax.tools.DiagnosticCollector;
import javax.tools.JavaCompiler;
import javax.tools.JavaFileObject;
import javax.tools.SimpleJavaFileObject;
import javax.tools.StandardJavaFileManager;
import javax.tools.ToolProvider;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Every {@code ```java} block of the README, CONTRIBUTING.md and {@code docs/**}{@code /*.md} compiles against this
 * module's test class path (every product module, DL4J, ND4J, DL4J's ParallelWrapper, Micrometer's Prometheus
 * registry), so a renamed method or a changed signature breaks the build, not the reader.
 *
 * <p>A block that starts with {@code package} or {@code import} is a whole compilation unit and compiles as it is
 * (in a package of its own). Any other block is a fragment: it becomes the body of a method in a class that imports
 * every symmem4j package and the DL4J, ND4J, Micrometer and JDK packages the docs use. The HTML comment on the line
 * before the block (blank lines allowed between) declares what the fragment uses but does not define, as
 * {@code ;}-separated items:
 *
 * <pre>{@code
 * <!-- snippet: MultiLayerNetwork model; DataSetIterator trainIterator -->   variables: parameters of the method
 * <!-- snippet: import org.nd4j.linalg.dataset.DataSet -->                  an import (to settle an ambiguous name)
 * <!-- snippet: members -->                                                 the block is class members, not statements
 * }</pre>
 *
 * Errors name the markdown file and line. The documentation's maintainers' notes: {@code docs/dev/docs.md}.
 */
class DocsSnippetsTest {

    /** The repository's root: surefire runs in the module's directory, an IDE may run in the root. */
    static Path root() {
        Path here = Path.of("").toAbsolutePath();
        return Files.isDirectory(here.resolve("docs")) ? here : here.getParent();
    }

    /** A {@code ```java} block: where it is, its marker's items, its code. */
    record Snippet(Path file, int firstCodeLine, List<String> items, String code) {

        String where() {
            return root().relativize(file) + ":" + firstCodeLine;
        }

        boolean wholeUnit() {
            return Pattern.compile("^(package|import)\\s", Pattern.MULTILINE).matcher(code.strip()).lookingAt();
        }
    }

    private static final Pattern MARKER = Pattern.compile("^<!--\\s*snippet:(.*)-->\\s*$");

    /** The JDK and third-party packages every fragment imports (besides every symmem4j package). */
    private static final List<String> LIBRARY_PACKAGES = List.of(
            "java.util", "java.util.concurrent", "java.nio.file", "java.time", "java.lang.foreign", "java.io",
            "org.deeplearning4j.nn.multilayer", "org.deeplearning4j.nn.graph", "org.deeplearning4j.nn.conf",
            "org.deeplearning4j.nn.conf.layers", "org.deeplearning4j.nn.api", "org.deeplearning4j.optimize.listeners",
            "org.deeplearning4j.parallelism", "org.deeplearning4j.util",
            "org.nd4j.linalg.api.ndarray", "org.nd4j.linalg.factory", "org.nd4j.linalg.dataset.api.iterator",
            "org.nd4j.linalg.learning.config", "org.nd4j.linalg.activations", "org.nd4j.linalg.lossfunctions",
            "io.micrometer.core.instrument", "io.micrometer.prometheusmetrics");

    /** The modules whose packages fragments import: those on this module's class path. */
    private static final List<String> PRODUCT_MODULES = List.of("parallel", "gradsync", "pipeline",
            "state", "serving", "dl4j-symmem-plugin", "prometheus", "launcher");

    static List<Path> markdownFiles() {
        Path root = root();
        List<Path> files = new ArrayList<>();
        for (String top : List.of("README.md", "CONTRIBUTING.md")) {
            if (Files.isRegularFile(root.resolve(top))) {
                files.add(root.resolve(top));
            }
        }
        try (Stream<Path> docs = Files.walk(root.resolve("docs"))) {
            docs.filter(p -> p.toString().endsWith(".md"))
                    .filter(p -> !root.resolve("docs").relativize(p).startsWith("api"))
                    .sorted().forEach(files::add);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
        return files;
    }

    /** The {@code ```java} blocks of one markdown file, with the marker before each. */
    static List<Snippet> snippets(Path file) {
        List<String> lines;
        try {
            lines = Files.readAllLines(file);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
        List<Snippet> out = new ArrayList<>();
        String fence = null;     // the fence of the block we are in, if any
        boolean java = false;
        int start = 0;
        StringBuilder code = new StringBuilder();
        List<String> items = List.of();
        for (int i = 0; i < lines.size(); i++) {
            String line = lines.get(i);
            String trimmed = line.strip();
            if (fence == null) {
                Matcher open = Pattern.compile("^(`{3,}|~{3,})\\s*([\\w+-]*)").matcher(trimmed);
                if (open.lookingAt()) {
                    fence = open.group(1);
                    java = open.group(2).equals("java");
                    start = i + 2;
                    code.setLength(0);
                    items = java ? markerBefore(lines, i) : List.of();
                }
            } else if (trimmed.startsWith(fence) && trimmed.substring(fence.length()).isBlank()) {
                if (java) {
                    out.add(new Snippet(file, start, items, code.toString()));
                }
                fence = null;
            } else if (java) {
                code.append(line).append('\n');
            }
        }
        if (fence != null) {
            fail(root().relativize(file) + ":" + (start - 1) + ": a code block is opened with " + fence
                    + " but never closed (close it with a line of " + fence + ")");
        }
        return out;
    }

    private static List<String> markerBefore(List<String> lines, int fenceLine) {
        for (int j = fenceLine - 1; j >= 0; j--) {
            String before = lines.get(j).strip();
            if (before.isEmpty()) {
                continue;
            }
            Matcher m = MARKER.matcher(before);
            if (!m.matches()) {
                return List.of();
            }
            List<String> items = new ArrayList<>();
            for (String item : m.group(1).split(";")) {
                if (!item.isBlank()) {
                    items.add(item.strip());
                }
            }
            return items;
        }
        return List.of();
    }

    /** Every symmem4j package with a class in it, from the product modules' sources. */
    static List<String> symmem4jPackages() {
        TreeSet<String> packages = new TreeSet<>();
        for (String module : PRODUCT_MODULES) {
            Path src = root().resolve(module).resolve("src/main/java");
            try (Stream<Path> files = Files.walk(src)) {
                files.filter(p -> p.toString().endsWith(".java") && !p.endsWith("package-info.java"))
                        .forEach(p -> packages.add(src.relativize(p.getParent()).toString().replace('/', '.')));
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
        }
        return List.copyOf(packages);
    }

    /** A generated source and the line of it where the snippet's first line lands. */
    record Source(String className, String text, int codeStartLine, Snippet snippet) {
    }

    static Source source(Snippet s, int index, List<String> packages) {
        String pkg = "snippet" + index;
        if (s.wholeUnit()) {
            Matcher cls = Pattern.compile("public\\s+(?:final\\s+)?(?:class|record|interface|enum)\\s+(\\w+)")
                    .matcher(s.code());
            String name = cls.find() ? cls.group(1) : "Unit" + index;
            return new Source(pkg + "." + name, "package " + pkg + ";\n" + s.code(), 2, s);
        }
        StringBuilder head = new StringBuilder("package ").append(pkg).append(";\n");
        List<String> parameters = new ArrayList<>();
        boolean members = false;
        for (String item : s.items()) {
            if (item.startsWith("import ")) {
                head.append(item).append(";\n");
            } else if (item.equals("members")) {
                members = true;
            } else if (item.matches(".+\\s+\\w+")) {
                parameters.add(item);
            } else {
                fail(s.where() + ": marker item '" + item + "' is neither 'import a.b.C', 'members' nor 'Type name'"
                        + " (separate items with ';')");
            }
        }
        for (String p : packages) {
            head.append("import ").append(p).append(".*;\n");
        }
        String name = "Snippet" + index;
        head.append("@SuppressWarnings(\"all\")\nclass ").append(name).append(" {\n");
        if (!members) {
            head.append("void snippet(").append(String.join(", ", parameters)).append(") throws Exception {\n");
        }
        int codeStart = (int) head.chars().filter(c -> c == '\n').count() + 1;
        String text = head + s.code() + (members ? "" : "}\n") + "}\n";
        return new Source(pkg + "." + name, text, codeStart, s);
    }

    @Test
    void everyJavaSnippetCompiles(@TempDir Path out) throws IOException {
        List<Snippet> all = new ArrayList<>();
        for (Path file : markdownFiles()) {
            all.addAll(snippets(file));
        }
        long fromReadme = all.stream().filter(s -> s.file().getFileName().toString().equals("README.md")).count();
        assertTrue(fromReadme >= 3, "expected the README's first program and its fragments, found " + fromReadme
                + " java blocks in README.md");
        assertTrue(all.size() >= 20, "expected the docs' java blocks, found " + all.size());

        List<String> packages = new ArrayList<>(symmem4jPackages());
        packages.addAll(LIBRARY_PACKAGES);
        Map<URI, Source> sources = new LinkedHashMap<>();
        List<JavaFileObject> units = new ArrayList<>();
        for (int i = 0; i < all.size(); i++) {
            Source src = source(all.get(i), i, packages);
            JavaFileObject unit = new SimpleJavaFileObject(
                    URI.create("string:///" + src.className().replace('.', '/') + ".java"), JavaFileObject.Kind.SOURCE) {
                @Override
                public CharSequence getCharContent(boolean ignoreEncodingErrors) {
                    return src.text();
                }
            };
            sources.put(unit.toUri(), src);
            units.add(unit);
        }

        JavaCompiler javac = ToolProvider.getSystemJavaCompiler();
        DiagnosticCollector<JavaFileObject> diagnostics = new DiagnosticCollector<>();
        try (StandardJavaFileManager files = javac.getStandardFileManager(diagnostics, Locale.ROOT, null)) {
            List<String> options = List.of("-classpath", System.getProperty("java.class.path"), "-d", out.toString(),
                    "-proc:none", "-nowarn", "-Xlint:none", "-Xmaxerrs", "1000",
                    "--add-modules", "jdk.incubator.vector");
            javac.getTask(null, files, diagnostics, options, null, units).call();
        }
        List<String> errors = new ArrayList<>();
        for (Diagnostic<? extends JavaFileObject> d : diagnostics.getDiagnostics()) {
            if (d.getKind() != Diagnostic.Kind.ERROR) {
                continue;
            }
            Source src = d.getSource() == null ? null : sources.get(d.getSource().toUri());
            if (src == null) {
                errors.add(d.getMessage(Locale.ROOT));
                continue;
            }
            long line = src.snippet().firstCodeLine() + d.getLineNumber() - src.codeStartLine();
            errors.add(root().relativize(src.snippet().file()) + ":" + line + ": " + d.getMessage(Locale.ROOT)
                    + (src.snippet().wholeUnit() ? "" : " (fragment; declare what it uses in <!-- snippet: Type name; ... -->"
                    + " before the block)"));
        }
        assertEquals(List.of(), errors, errors.size() + " compile errors in the docs' java blocks:\n"
                + String.join("\n", errors));
    }

    @Test
    void markersAndFencesAreRead(@TempDir Path dir) throws IOException {
        Path md = dir.resolve("page.md");
        Files.writeString(md, """
                text
                <!-- snippet: MultiLayerNetwork model; import java.util.List -->

                ```java
                model.init();
                ```
                ```xml
                <a/>
                ```
                ```java
                int x = 1;
                ```
                """);
        List<Snippet> found = snippets(md);
        assertEquals(2, found.size(), found.toString());
        assertEquals(List.of("MultiLayerNetwork model", "import java.util.List"), found.get(0).items());
        assertEquals("model.init();\n", found.get(0).code());
        assertEquals(5, found.get(0).firstCodeLine());
        assertEquals(List.of(), found.get(1).items());
        assertEquals(11, found.get(1).firstCodeLine());
    }
}
