package org.symmem4j.parallel;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import org.junit.jupiter.api.Test;

/** Unknown {@code symmem4j.*} and {@code SYMMEM4J_*} names are reported with the closest known name, never ignored. */
class KnownSettingsTest {

    private final List<String> warnings = new ArrayList<>();

    private Configuration.Source source(Map<String, String> properties, Map<String, String> env) {
        return new Configuration.Source(properties::get, env::get, warnings::add, properties::keySet, env::keySet);
    }

    @Test
    void aMisspeltPropertyIsWarnedAboutWithTheClosestName() {
        Configuration.validate(source(Map.of("symmem4j.flight.recorder.entires", "64", "user.name", "x"), Map.of()));
        assertEquals(List.of("unknown setting, ignored: -Dsymmem4j.flight.recorder.entires (did you mean"
                + " symmem4j.flight.recorder.entries?) (symmem4j reads no such name; fix: correct each name, or unset"
                + " it; docs/configuration.md lists every setting; -Dsymmem4j.settings.unknown=error refuses unknown"
                + " names)"), warnings);
    }

    @Test
    void anUnknownEnvironmentVariableIsWarnedAboutTooAndAFarOffNameGetsNoSuggestion() {
        Configuration.validate(source(Map.of("symmem4j.tp.chunkRow", "8"),
                Map.of("SYMMEM4J_TIMEOUT_M", "5000", "SYMMEM4J_COFFEE", "black", "PATH", "/bin")));
        assertEquals(1, warnings.size(), warnings::toString);
        String w = warnings.getFirst();
        assertTrue(w.startsWith("3 unknown settings, ignored: -Dsymmem4j.tp.chunkRow (did you mean"
                + " symmem4j.tp.chunk.rows?), SYMMEM4J_COFFEE, SYMMEM4J_TIMEOUT_M (did you mean SYMMEM4J_TIMEOUT_MS?)"
                + " (symmem4j reads no such name; fix: correct each name, or unset it"), w);
    }

    @Test
    void everyKnownNameIsLeftAlone() {
        Map<String, String> properties = new HashMap<>();
        Map<String, String> env = new HashMap<>();
        for (Configuration.Setting<?> s : Configuration.all()) {
            if (s.property() != null) {
                properties.put(s.property(), "");
            }
            s.aliases().forEach(alias -> properties.put(alias, ""));
            env.put(s.env(), "");
        }
        for (KnownSettings.Declared d : KnownSettings.declared()) {
            (d.name().startsWith("symmem4j.") ? properties : env).put(d.name(), "x");
        }
        properties.put("symmem4j.test.someNewSwitch", "x");
        env.put("SYMMEM4J_BENCH_SOMETHING", "x");
        assertEquals(List.of(), KnownSettings.unknown(source(properties, env)));
        Configuration.validate(source(properties, env));
        assertEquals(List.of(), warnings);
        // removed names are refused by validation (with what replaced them), not also reported as unknown
        for (String removed : Configuration.removedNames()) {
            assertEquals(List.of(), KnownSettings.unknown(source(Map.of(removed, "x"),
                    Map.of(removed.toUpperCase(Locale.ROOT).replace('.', '_'), "x"))));
        }
        Set<String> seen = new HashSet<>();
        for (KnownSettings.Declared d : KnownSettings.declared()) {
            assertTrue(d.name().matches("symmem4j(\\.[a-zA-Z0-9]+)+|SYMMEM4J_[A-Z0-9_]+"), d.name());
            assertTrue(seen.add(d.name()), "declared twice: " + d.name());
            assertTrue(!d.readBy().isBlank() && !d.description().isBlank(), d.name());
            assertTrue(Configuration.all().stream().noneMatch(c -> d.name().equals(c.property()) || d.name().equals(c.env())
                    || c.aliases().contains(d.name())), "a setting's name, declared again: " + d.name());
        }
    }

    @Test
    void theWarningComesOncePerSourceSoOncePerJvm() {
        Configuration.Source s = source(Map.of("symmem4j.reducr", "scalar"), Map.of());
        Configuration.validate(s);
        Configuration.validate(s);
        Configuration.validate(s);
        assertEquals(1, warnings.size(), warnings::toString);
        assertTrue(warnings.getFirst().contains("-Dsymmem4j.reducr (did you mean symmem4j.reducer?)"), warnings::toString);
    }

    @Test
    void theErrorModeRefusesAnUnknownNameWithTheFix() {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> Configuration.validate(source(
                Map.of("symmem4j.settings.unknown", "error", "symmem4j.timeout.sm", "5"), Map.of())));
        assertEquals("unknown setting: -Dsymmem4j.timeout.sm (did you mean symmem4j.timeout.ms?) (symmem4j reads no"
                + " such name; fix: correct each name, or unset it; docs/configuration.md lists every setting;"
                + " -Dsymmem4j.settings.unknown=warn only warns)", e.getMessage());
        assertEquals(List.of(), warnings, "an error, not also a warning");
        // with a bad value besides, both are in the one refusal
        e = assertThrows(IllegalArgumentException.class, () -> Configuration.validate(source(
                Map.of("symmem4j.settings.unknown", "error", "symmem4j.cuda.pdl", "on"), Map.of("SYMMEM4J_PDL", "1"))));
        assertTrue(e.getMessage().startsWith("2 invalid settings: unknown setting: SYMMEM4J_PDL"), e.getMessage());
        assertTrue(e.getMessage().contains("-Dsymmem4j.cuda.pdl=on"), e.getMessage());
        // a bad mode is refused as any bad value, and the unknown name is still warned about
        e = assertThrows(IllegalArgumentException.class, () -> Configuration.validate(source(
                Map.of("symmem4j.settings.unknown", "strict", "symmem4j.timeout.sm", "5"), Map.of())));
        assertTrue(e.getMessage().startsWith("invalid setting: -Dsymmem4j.settings.unknown=strict expected=`warn`,"
                + " `error`"), e.getMessage());
        assertEquals(1, warnings.size(), warnings::toString);
        Configuration.validate(source(Map.of("symmem4j.settings.unknown", "error", "symmem4j.timeout.ms", "5"), Map.of()));
    }

    @Test
    void aSourceThatCannotListItsNamesReportsNone() {
        Map<String, String> properties = Map.of("symmem4j.flight.recorder.entires", "64");
        Configuration.validate(new Configuration.Source(properties::get, name -> null, warnings::add));
        assertEquals(List.of(), warnings);
    }

    @Test
    void suggestionsAreOnlyForCloseNames() {
        assertEquals(1, KnownSettings.distance("entires", "entries"), "a swap of two neighbours is one edit");
        assertEquals(3, KnownSettings.distance("kitten", "sitting"));
        assertEquals(" (did you mean symmem4j.affinity.cpus?)", KnownSettings.suggestion("symmem4j.affinity.cpu"));
        assertEquals(" (did you mean symmem4j.timeout.ms?)", KnownSettings.suggestion("symmem4j.TIMEOUT.MS"));
        assertEquals("", KnownSettings.suggestion("symmem4j.xy"), "a short name is close to too many");
        assertEquals("", KnownSettings.suggestion("SYMMEM4J_GPU_COUNT"));
    }
}
