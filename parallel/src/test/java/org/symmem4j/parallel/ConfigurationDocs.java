package org.symmem4j.parallel;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;

/**
 * Writes {@code docs/configuration.md}, the configuration reference, from {@link Configuration}: one row per
 * setting, then the deprecated names, then the other names symmem4j knows ({@link KnownSettings}). {@link ConfigurationDocsTest} fails when the file differs from what this
 * writes; {@link #REGENERATE} is the command that rewrites it.
 */
public final class ConfigurationDocs {

    /** The reference, relative to the repository's root. */
    static final String FILE = "docs/configuration.md";
    /** The command that rewrites {@link #FILE} (run from the repository's root). */
    static final String REGENERATE = "mvn -q -B -o -pl parallel -am test -Dtest=ConfigurationDocsTest"
            + " -Dsurefire.failIfNoSpecifiedTests=false -Dsymmem4j.test.writeDocs=true";

    private ConfigurationDocs() {
    }

    /**
     * Writes the reference.
     *
     * @param args the file to write; default {@value #FILE} (run from the repository's root)
     * @throws IOException when the file cannot be written
     */
    public static void main(String[] args) throws IOException {
        Path out = Path.of(args.length > 0 ? args[0] : FILE);
        Files.createDirectories(out.toAbsolutePath().getParent());
        Files.writeString(out, markdown(), StandardCharsets.UTF_8);
        System.out.println("wrote " + out);
    }

    /**
     * The reference's text.
     *
     * @return Markdown, ending with a newline
     */
    static String markdown() {
        StringBuilder md = new StringBuilder();
        md.append("# Configuration reference\n\n");
        md.append("<!-- Generated from org.symmem4j.parallel.Configuration by ConfigurationDocs (parallel's test sources);"
                + " do not edit by hand. Regenerate from the repository's root with:\n     ").append(REGENERATE)
                .append("\n-->\n\n");
        md.append("Every setting symmem4j reads, from `org.symmem4j.parallel.Configuration` (`Configuration.all()`"
                + " lists them at run time):\n\n");
        md.append("- A **system property** (`-Dname=value`) has an **environment variable** mirror: its name in capitals,"
                + " dots as underscores (`symmem4j.timeout.ms` → `SYMMEM4J_TIMEOUT_MS`). When both are set, **the"
                + " system property wins**. A few settings are environment variables only: the job's identity and"
                + " secret, which a launcher hands to its processes.\n");
        md.append("- A blank value counts as unset.\n");
        md.append("- A value that is not accepted **fails** with an `IllegalArgumentException` naming the setting, the"
                + " value found and what is accepted, at the first read and at the latest when a group is created"
                + " (`InJvmWorld`, `ProcessGroup`), for example `invalid setting: -Dsymmem4j.timeout.ms=abc"
                + " expected=a positive whole number of milliseconds (fix: correct the value, or unset it for the default:"
                + " 60000 (60 s))`.\n");
        md.append("- **Experimental** settings exist to reproduce a problem, compare an alternative or tune; their"
                + " names and meanings may change without notice.\n");
        md.append("- Names are dotted lowercase. The camelCase names of earlier versions still work as deprecated"
                + " aliases (see the end); each logs a warning once per JVM.\n");
        md.append("- An **unknown name** (a `symmem4j.*` system property or `SYMMEM4J_*` environment variable that is"
                + " none of these settings nor of the [other names](#other-names) below, e.g. a misspelt one) is"
                + " reported when the first group is created, in **one warning per JVM** that names each unknown name"
                + " (never its value) and the closest known name: `unknown setting, ignored:"
                + " -Dsymmem4j.flight.recorder.entires (did you mean symmem4j.flight.recorder.entries?) (symmem4j"
                + " reads no such name; fix: correct each name, or unset it; ...)`. A warning, not an error, by default:"
                + " a job's scripts may carry a setting of a newer or older version, which must not stop the job;"
                + " `symmem4j.settings.unknown=error` refuses it instead, for those who want every name checked."
                + " `symmem4j-run doctor` lists the unknown names too. A removed setting is refused with what replaced"
                + " it.\n\n");
        md.append("The environment's own contract (torchrun's `RANK`, `WORLD_SIZE`, `MASTER_ADDR`, ..., Open MPI's"
                + " `OMPI_COMM_WORLD_*`, CUDA's and NVSHMEM's variables) is on the [Environment](environment.md)"
                + " page; the variables read only by the build, the tests and the scripts are in"
                + " [The build's environment](dev/environment.md).\n\n");
        md.append("| property | environment variable | type | default | accepted | experimental | description |\n");
        md.append("|---|---|---|---|---|---|---|\n");
        for (Configuration.Setting<?> s : Configuration.all()) {
            md.append("| ").append(s.property() == null ? "—" : "`" + s.property() + "`")
                    .append(" | `").append(s.env()).append('`')
                    .append(" | ").append(s.type())
                    .append(" | ").append(cell(s.defaultText()))
                    .append(" | ").append(cell(s.accepted()))
                    .append(" | ").append(s.experimental() ? "experimental" : "")
                    .append(" | ").append(cell(s.description()))
                    .append(" |\n");
        }
        md.append("\n## Deprecated names\n\n");
        md.append("Still read, each with a warning once per JVM; the new name wins when both are set.\n\n");
        md.append("| deprecated name | use instead |\n|---|---|\n");
        for (Configuration.Setting<?> s : Configuration.all()) {
            for (String alias : s.aliases()) {
                md.append("| `").append(alias).append("` | `").append(s.property()).append("` |\n");
            }
        }
        md.append("\n## Other names\n\n");
        md.append("Read outside `Configuration`, by the modules above it, the tests, the build or the scripts"
                + " (`KnownSettings.declared()`): never reported as unknown. Every name under "
                + String.join(", ", KnownSettings.RESERVED_PREFIXES.stream().map(p -> "`" + p + "`").toList())
                + " belongs to the tests and benchmarks ([The build's environment](dev/environment.md)) and is never"
                + " reported either.\n\n");
        md.append("| name | read by | what it does |\n|---|---|---|\n");
        for (KnownSettings.Declared d : KnownSettings.declared()) {
            md.append("| `").append(d.name()).append("` | ").append(cell(d.readBy())).append(" | ")
                    .append(cell(d.description())).append(" |\n");
        }
        return md.toString();
    }

    private static String cell(String text) {
        return text.replace("|", "\\|").replace("\n", " ");
    }
}
