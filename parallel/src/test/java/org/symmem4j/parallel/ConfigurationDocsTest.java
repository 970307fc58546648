package org.symmem4j.parallel;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import org.junit.jupiter.api.Test;

/**
 * {@code docs/configuration.md} is what {@link ConfigurationDocs} writes from {@link Configuration}: a setting added,
 * renamed or re-described without regenerating the reference fails here, with the command that regenerates it.
 * With {@code -Dsymmem4j.test.writeDocs=true} the test writes the file instead.
 */
class ConfigurationDocsTest {

    /** The repository's root: surefire runs in the module's directory, an IDE may run in the root. */
    private static Path root() {
        Path here = Path.of("").toAbsolutePath();
        return Files.isDirectory(here.resolve("parallel")) ? here : here.getParent();
    }

    @Test
    void theReferenceInTheDocsIsGeneratedFromTheConfigurationClass() throws IOException {
        Path file = root().resolve(ConfigurationDocs.FILE);
        String expected = ConfigurationDocs.markdown();
        if (Boolean.getBoolean("symmem4j.test.writeDocs")) {
            ConfigurationDocs.main(new String[] {file.toString()});
        }
        assertTrue(Files.isRegularFile(file), ConfigurationDocs.FILE + " is missing: generate it with "
                + ConfigurationDocs.REGENERATE);
        String actual = Files.readString(file, StandardCharsets.UTF_8);
        assertEquals(expected, actual, ConfigurationDocs.FILE + " is out of date with org.symmem4j.parallel.Configuration:"
                + " regenerate it from the repository's root with " + ConfigurationDocs.REGENERATE);
    }

    @Test
    void everySettingHasARowAndEveryAliasIsListed() {
        String md = ConfigurationDocs.markdown();
        for (Configuration.Setting<?> s : Configuration.all()) {
            assertTrue(md.contains("| `" + s.env() + "` |"), s.env());
            for (String alias : s.aliases()) {
                assertTrue(md.contains("| `" + alias + "` | `" + s.property() + "` |"), alias);
            }
        }
    }
}
