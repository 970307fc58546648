package org.symmem4j.parallel;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.reflect.Field;
import java.lang.reflect.Modifier;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.junit.jupiter.api.Test;

/** Settings: names, environment mirrors, precedence, deprecated aliases, and refusals that say what is accepted. */
class ConfigurationTest {

    private final List<String> warnings = new ArrayList<>();

    private Configuration.Source source(Map<String, String> properties, Map<String, String> env) {
        return new Configuration.Source(properties::get, env::get, warnings::add);
    }

    @Test
    void unsetSettingsGiveTheirDefaults() {
        Configuration.Source none = source(Map.of(), Map.of());
        assertEquals(Duration.ofSeconds(60), Configuration.TIMEOUT.get(none));
        assertEquals(GroupOptions.DEFAULT_TIMEOUT, Configuration.TIMEOUT.get(none));
        assertEquals(true, Configuration.CUDA_PDL.get(none));
        assertEquals(false, Configuration.TP_FUSED_GRAPHS_IN_ONE_JVM.get(none));
        assertEquals("auto", Configuration.REDUCER.get(none));
        assertEquals("nvshmem", Configuration.NVSHMEM_WAIT.get(none));
        assertNull(Configuration.TP_CHUNK_ROWS.get(none));
        assertNull(Configuration.SHM_DIR.get(none));
        assertFalse(Configuration.TP_CHUNK_ROWS.isSet(none));
        // blank counts as unset
        Configuration.Source blank = source(Map.of("symmem4j.timeout.ms", " "), Map.of("SYMMEM4J_TIMEOUT_MS", ""));
        assertEquals(Duration.ofSeconds(60), Configuration.TIMEOUT.get(blank));
        assertFalse(Configuration.TIMEOUT.isSet(blank));
        assertTrue(warnings.isEmpty(), warnings::toString);
    }

    @Test
    void aBadValueNamesTheSettingTheValueAndWhatIsAccepted() {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> Configuration.TIMEOUT.get(source(Map.of("symmem4j.timeout.ms", "abc"), Map.of())));
        assertEquals("invalid setting: -Dsymmem4j.timeout.ms=abc expected=a positive whole number of milliseconds"
                + " (fix: correct the value, or unset it for the default: 60000 (60 s))", e.getMessage());
        e = assertThrows(IllegalArgumentException.class,
                () -> Configuration.TIMEOUT.get(source(Map.of("symmem4j.timeout.ms", "0"), Map.of())));
        assertTrue(e.getMessage().contains("-Dsymmem4j.timeout.ms=0 expected=a positive"), e.getMessage());
        e = assertThrows(IllegalArgumentException.class,
                () -> Configuration.CUDA_PDL.get(source(Map.of("symmem4j.cuda.pdl", "yes"), Map.of())));
        assertTrue(e.getMessage().startsWith("invalid setting: -Dsymmem4j.cuda.pdl=yes expected=`true`, `false`"),
                e.getMessage());
        e = assertThrows(IllegalArgumentException.class,
                () -> Configuration.REDUCER.get(source(Map.of("symmem4j.reducer", "vector"), Map.of())));
        assertTrue(e.getMessage().startsWith("invalid setting: -Dsymmem4j.reducer=vector expected=`auto`, `scalar`"),
                e.getMessage());
        e = assertThrows(IllegalArgumentException.class,
                () -> Configuration.TP_CHUNK_ROWS.get(source(Map.of(), Map.of("SYMMEM4J_TP_CHUNK_ROWS", "-1"))));
        assertTrue(e.getMessage().startsWith("invalid setting: SYMMEM4J_TP_CHUNK_ROWS=-1 expected=a whole number ≥ 0"),
                e.getMessage());
        e = assertThrows(IllegalArgumentException.class, () -> Configuration.PRETEND_RANKS_PER_NODE.get(
                source(Map.of("symmem4j.pretendRanksPerNode", "two"), Map.of())));
        assertTrue(e.getMessage().startsWith("invalid setting: -Dsymmem4j.pretendRanksPerNode=two expected=a positive"),
                "an alias's refusal names the name the user wrote: " + e.getMessage());
    }

    @Test
    void theSecretIsNeverShownInAMessage() {
        // no value of the secret is refused today; the message would hide it all the same
        assertEquals("0123456789abcdef", Configuration.SECRET.get(
                source(Map.of(), Map.of("SYMMEM4J_SECRET", "0123456789abcdef"))));
        assertNull(Configuration.SECRET.property(), "the secret is never a property: a command line is visible to ps");
    }

    @Test
    void validationReportsEveryBadSettingAtOnce() {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> Configuration.validate(source(
                Map.of("symmem4j.cuda.pdl", "on", "symmem4j.nvshmem.wait", "spin"), Map.of("SYMMEM4J_TIMEOUT_MS", "1s"))));
        assertTrue(e.getMessage().startsWith("3 invalid settings: "), e.getMessage());
        assertTrue(e.getMessage().contains("SYMMEM4J_TIMEOUT_MS=1s"), e.getMessage());
        assertTrue(e.getMessage().contains("-Dsymmem4j.cuda.pdl=on"), e.getMessage());
        assertTrue(e.getMessage().contains("-Dsymmem4j.nvshmem.wait=spin"), e.getMessage());
        e = assertThrows(IllegalArgumentException.class, () -> Configuration.validate(source(
                Map.of("symmem4j.tp.enqueue.order", "maybe"), Map.of())));
        assertTrue(e.getMessage().startsWith("invalid setting: -Dsymmem4j.tp.enqueue.order=maybe"), e.getMessage());
        Configuration.validate(source(Map.of("symmem4j.cuda.pdl", "FALSE", "symmem4j.tp.chunk.rows", "0"), Map.of()));
    }

    @Test
    void aRemovedSettingIsAnErrorNotIgnored() {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> Configuration.validate(source(
                Map.of("symmem4j.flight.recorder.runs", "true"), Map.of())));
        assertTrue(e.getMessage().startsWith("-Dsymmem4j.flight.recorder.runs=true was removed: on 2026-11-30 the flight"
                + " recorder kept one layout"), e.getMessage());
        assertTrue(e.getMessage().endsWith("(fix: drop it)"), e.getMessage());
        e = assertThrows(IllegalArgumentException.class, () -> Configuration.validate(source(
                Map.of(), Map.of("SYMMEM4J_FLIGHT_RECORDER_STORAGE", "heap"))));
        assertTrue(e.getMessage().startsWith("SYMMEM4J_FLIGHT_RECORDER_STORAGE=heap was removed"), e.getMessage());
    }

    @Test
    void theSymmetricMemoryCapIsAByteCountWithSuffixes() {
        assertNull(Configuration.MAX_SYMMETRIC_BYTES.get(source(Map.of(), Map.of())), "unset: no cap");
        assertEquals(16L << 20, Configuration.MAX_SYMMETRIC_BYTES.get(source(Map.of("symmem4j.max.symmetric.bytes", "16m"),
                Map.of())));
        assertEquals(268435456L, Configuration.MAX_SYMMETRIC_BYTES.get(source(Map.of(),
                Map.of("SYMMEM4J_MAX_SYMMETRIC_BYTES", "268435456"))));
        assertEquals(1L << 30, Configuration.MAX_SYMMETRIC_BYTES.get(source(Map.of("symmem4j.maxSymmetricBytes", "1G"),
                Map.of())), "the old camelCase name still works");
        assertEquals(1, warnings.size(), warnings::toString);
        for (String bad : List.of("lots", "-1", "9000000t", "m")) {
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> Configuration
                    .MAX_SYMMETRIC_BYTES.get(source(Map.of("symmem4j.max.symmetric.bytes", bad), Map.of())));
            assertTrue(e.getMessage().startsWith("invalid setting: -Dsymmem4j.max.symmetric.bytes=" + bad
                    + " expected=a byte count such as"), e.getMessage());
        }
    }

    @Test
    void theEnvironmentVariableMirrorsTheProperty() {
        Configuration.Source env = source(Map.of(), Map.of("SYMMEM4J_TIMEOUT_MS", "1500", "SYMMEM4J_CUDA_PDL", "false",
                "SYMMEM4J_SHM_DIR", "/var/tmp/shm", "SYMMEM4J_TP_CHUNK_ROWS", "512"));
        assertEquals(Duration.ofMillis(1500), Configuration.TIMEOUT.get(env));
        assertEquals(false, Configuration.CUDA_PDL.get(env));
        assertEquals(Path.of("/var/tmp/shm"), Configuration.SHM_DIR.get(env));
        assertEquals(512, Configuration.TP_CHUNK_ROWS.get(env));
        assertTrue(Configuration.TP_CHUNK_ROWS.isSet(env));
    }

    @Test
    void thePropertyBeatsTheEnvironment() {
        Configuration.Source both = source(Map.of("symmem4j.timeout.ms", "2500", "symmem4j.nvshmem.wait", "kernel"),
                Map.of("SYMMEM4J_TIMEOUT_MS", "1500", "SYMMEM4J_NVSHMEM_WAIT", "not-even-valid"));
        assertEquals(Duration.ofMillis(2500), Configuration.TIMEOUT.get(both));
        assertEquals("kernel", Configuration.NVSHMEM_WAIT.get(both), "an environment value the property overrides is not read");
    }

    @Test
    void aDeprecatedNameStillWorksAndWarnsOnce() {
        Configuration.Source old = source(Map.of("symmem4j.tp.chunkRows", "256", "symmem4j.cuda.eagerGraphs", "false"),
                Map.of());
        assertEquals(256, Configuration.TP_CHUNK_ROWS.get(old));
        assertEquals(256, Configuration.TP_CHUNK_ROWS.get(old));
        assertTrue(Configuration.TP_CHUNK_ROWS.isSet(old));
        assertEquals(List.of("deprecated setting: -Dsymmem4j.tp.chunkRows=256 (renamed: use -Dsymmem4j.tp.chunk.rows"
                + " or SYMMEM4J_TP_CHUNK_ROWS; the old name still works for now)"), warnings);
        assertEquals(false, Configuration.CUDA_EAGER_GRAPHS.get(old));
        assertEquals(2, warnings.size(), "one warning per deprecated name: " + warnings);
        assertTrue(warnings.get(1).contains("-Dsymmem4j.cuda.eagerGraphs=false"), warnings::toString);
        // the new name wins over the old one, and the old one is then not read (no warning)
        warnings.clear();
        Configuration.Source both = source(Map.of("symmem4j.tp.chunkRows", "256", "symmem4j.tp.chunk.rows", "0"), Map.of());
        assertEquals(0, Configuration.TP_CHUNK_ROWS.get(both));
        assertTrue(warnings.isEmpty(), warnings::toString);
        // the old name also beats the environment variable: it is a system property
        Configuration.Source oldAndEnv = source(Map.of("symmem4j.tp.enqueueOrder", "false"),
                Map.of("SYMMEM4J_TP_ENQUEUE_ORDER", "true"));
        assertEquals(false, Configuration.TP_ENQUEUE_ORDER.get(oldAndEnv));
    }

    @Test
    void namesAreDottedLowercaseWithTheirEnvironmentVariableDerived() {
        Set<String> seen = new HashSet<>();
        for (Configuration.Setting<?> s : Configuration.all()) {
            assertTrue(seen.add(s.env()), "two settings share " + s.env());
            assertTrue(s.env().matches("SYMMEM4J_[A-Z0-9_]+"), s.env());
            if (s.property() != null) {
                assertTrue(s.property().matches("symmem4j(\\.[a-z0-9]+)+"), s.property());
                assertEquals(s.property().toUpperCase(java.util.Locale.ROOT).replace('.', '_'), s.env());
                assertTrue(seen.add(s.property()), "two settings share " + s.property());
            }
            for (String alias : s.aliases()) {
                assertTrue(seen.add(alias), "two settings share " + alias);
            }
            assertFalse(s.description().isBlank(), s.name());
        }
    }

    @Test
    void everySettingFieldIsListed() throws IllegalAccessException {
        List<Configuration.Setting<?>> fields = new ArrayList<>();
        for (Field f : Configuration.class.getDeclaredFields()) {
            if (f.getType() == Configuration.Setting.class && Modifier.isStatic(f.getModifiers())) {
                assertTrue(Modifier.isPublic(f.getModifiers()) && Modifier.isFinal(f.getModifiers()), f.getName());
                fields.add((Configuration.Setting<?>) f.get(null));
            }
        }
        assertEquals(Set.copyOf(fields), Set.copyOf(Configuration.all()));
        assertEquals(fields.size(), Configuration.all().size());
    }

    @Test
    void groupOptionsDefaultToTheConfiguredTimeout() {
        String saved = System.getProperty("symmem4j.timeout.ms");
        try {
            System.setProperty("symmem4j.timeout.ms", "4321");
            assertEquals(Duration.ofMillis(4321), GroupOptions.defaults().timeout());
            assertEquals(Duration.ofMillis(4321), Configuration.timeout());
            System.setProperty("symmem4j.timeout.ms", "-5");
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class, GroupOptions::defaults);
            assertTrue(e.getMessage().contains("-Dsymmem4j.timeout.ms=-5"), e.getMessage());
            assertThrows(IllegalArgumentException.class, () -> org.symmem4j.parallel.group.InJvmWorld.create(2,
                    new GroupOptions(Duration.ofSeconds(5), org.symmem4j.parallel.sync.BackoffIdleStrategy::new,
                            GroupOptions.DEFAULT_LIVENESS_INTERVAL)), "a group is not created with a bad setting");
        } finally {
            if (saved == null) {
                System.clearProperty("symmem4j.timeout.ms");
            } else {
                System.setProperty("symmem4j.timeout.ms", saved);
            }
        }
    }
}
