package org.symmem4j.parallel.rendezvous;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.Map;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.symmem4j.parallel.SymmemException;

/** Where a store secret comes from, and what is refused on the way. */
class StoreSecretTest {

    @TempDir
    Path tmp;
    private String savedDir;

    @BeforeEach
    void privateSecretDir() throws IOException {
        savedDir = System.getProperty("symmem4j.secret.dir");
        Path dir = tmp.resolve("secrets");
        System.setProperty("symmem4j.secret.dir", dir.toString());
    }

    @AfterEach
    void restore() {
        if (savedDir == null) {
            System.clearProperty("symmem4j.secret.dir");
        } else {
            System.setProperty("symmem4j.secret.dir", savedDir);
        }
    }

    @Test
    void theEnvironmentWinsAndShortSecretsAreRefused() {
        StoreSecret s = StoreSecret.resolve(Map.of(StoreSecret.SECRET_ENV, "0123456789abcdef-env"), "run", "10.1.2.3", 1);
        assertArrayEquals("0123456789abcdef-env".getBytes(StandardCharsets.UTF_8), s.bytes());
        assertFalse(s.isHostSecret());
        assertEquals(StoreSecret.SECRET_ENV, s.describe(), "messages name the source, never the secret");
        SymmemException e = assertThrows(SymmemException.class,
                () -> StoreSecret.resolve(Map.of(StoreSecret.SECRET_ENV, "short"), "run", "127.0.0.1", 1));
        assertTrue(e.getMessage().contains("holds 5 bytes; a store secret needs at least 16"), e.getMessage());
    }

    @Test
    void aSecretFileMustBeTheUsersAlone() throws IOException {
        Path f = tmp.resolve("secret");
        Files.writeString(f, "0123456789abcdef-file\n");
        Files.setPosixFilePermissions(f, PosixFilePermissions.fromString("rw-r--r--"));
        SymmemException open = assertThrows(SymmemException.class,
                () -> StoreSecret.resolve(Map.of(StoreSecret.SECRET_FILE_ENV, f.toString()), "run", "127.0.0.1", 1));
        assertTrue(open.getMessage().contains("mode=644") && open.getMessage().contains("chmod 600"), open.getMessage());
        Files.setPosixFilePermissions(f, PosixFilePermissions.fromString("rw-------"));
        StoreSecret s = StoreSecret.resolve(Map.of(StoreSecret.SECRET_FILE_ENV, f.toString()), "run", "10.1.2.3", 1);
        assertArrayEquals("0123456789abcdef-file".getBytes(StandardCharsets.UTF_8), s.bytes(), "trailing newline dropped");
        Path link = tmp.resolve("link");
        Files.createSymbolicLink(link, f);
        SymmemException viaLink = assertThrows(SymmemException.class,
                () -> StoreSecret.resolve(Map.of(StoreSecret.SECRET_FILE_ENV, link.toString()), "run", "127.0.0.1", 1));
        assertTrue(viaLink.getMessage().contains("symbolic links are refused"), viaLink.getMessage());
    }

    @Test
    void aRemoteStoreNeedsAGivenSecret() {
        SymmemException e = assertThrows(SymmemException.class,
                () -> StoreSecret.resolve(Map.of(), "run", "10.1.2.3", 29500));
        assertTrue(e.getMessage().contains("MASTER_ADDR=10.1.2.3 is not a loopback address"), e.getMessage());
        assertTrue(e.getMessage().contains(StoreSecret.SECRET_ENV), e.getMessage());
    }

    @Test
    void aHostSecretIsPublishedPrivatelyAfterTheStoreListensAndRemovedAfter() throws IOException {
        StoreSecret reader = StoreSecret.resolve(Map.of(), "run-x", "127.0.0.1", 29555);
        assertTrue(reader.isHostSecret());
        assertThrows(StoreSecret.SecretNotReadyException.class, reader::bytes, "nothing published yet");
        byte[] secret = StoreSecret.generateHostSecret();
        reader.publish(secret);
        assertArrayEquals(secret, reader.bytes());
        Path dir = StoreSecret.hostDirectory();
        assertEquals("rwx------", PosixFilePermissions.toString(Files.getPosixFilePermissions(dir)));
        try (var files = Files.list(dir)) {
            for (Path p : files.toList()) {
                assertEquals("rw-------", PosixFilePermissions.toString(Files.getPosixFilePermissions(p)), p.toString());
                assertFalse(Files.readString(p).contains(new String(secret, StandardCharsets.ISO_8859_1)));
            }
        }
        StoreSecret otherRun = StoreSecret.resolve(Map.of(), "run-y", "127.0.0.1", 29555);
        assertThrows(StoreSecret.SecretNotReadyException.class, otherRun::bytes, "another run has another file");
        reader.unpublish(StoreSecret.generateHostSecret());
        assertArrayEquals(secret, reader.bytes(), "only the secret it published is removed");
        reader.unpublish(secret);
        assertThrows(StoreSecret.SecretNotReadyException.class, reader::bytes);
    }

    @Test
    void aSharedSecretDirectoryIsRefused() throws IOException {
        Path dir = tmp.resolve("open");
        Files.createDirectory(dir);
        Files.setPosixFilePermissions(dir, PosixFilePermissions.fromString("rwxrwxrwx"));
        System.setProperty("symmem4j.secret.dir", dir.toString());
        SymmemException e = assertThrows(SymmemException.class, StoreSecret::hostDirectory);
        assertTrue(e.getMessage().contains("mode=777") && e.getMessage().contains("expected owner uid="), e.getMessage());
    }
}
