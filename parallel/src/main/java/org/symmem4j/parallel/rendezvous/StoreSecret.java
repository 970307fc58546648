package org.symmem4j.parallel.rendezvous;

import java.io.IOException;
import java.net.InetAddress;
import java.net.UnknownHostException;
import java.nio.charset.StandardCharsets;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.nio.file.attribute.PosixFilePermission;
import java.nio.file.attribute.PosixFilePermissions;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.security.SecureRandom;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Base64;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.symmem4j.parallel.Configuration;
import org.symmem4j.parallel.Invariants;
import org.symmem4j.parallel.SymmemException;
import org.symmem4j.parallel.sync.ProcessLiveness;

/**
 * The secret every rank of a job proves to the rendezvous store (and the store to every rank)
 * before a key is read or written. The secret itself never crosses the wire: both sides answer a
 * challenge with an HMAC over fresh nonces ({@link StoreHandshake}).
 *
 * <p>Where it comes from, first match wins:
 * <ol>
 *   <li>{@code SYMMEM4J_SECRET}: the secret itself, at least {@value #MIN_BYTES} bytes of UTF-8
 *       (a launcher or a job scheduler hands it to every rank);</li>
 *   <li>{@code SYMMEM4J_SECRET_FILE}: a file holding it, readable by its owner only (mode 0600 or
 *       0400) and owned by the user the rank runs as, as ssh demands of private keys;</li>
 *   <li>otherwise, when the store's address is a loopback address, a <em>host secret</em>: rank 0
 *       generates 32 random bytes, and once its store listens writes them to a file only this user
 *       can read ({@code $XDG_RUNTIME_DIR/symmem4j/}, else {@code <tmpdir>/symmem4j-<uid>/}, a 0700
 *       directory; {@code -Dsymmem4j.secret.dir}, {@link Configuration#SECRET_DIR}, overrides), named after the port and the run id; the
 *       other ranks read it there. Another user of the machine cannot read it, so cannot join.</li>
 * </ol>
 * A store on a non-loopback address needs one of the first two: ranks on other hosts cannot read
 * this host's files.
 */
public final class StoreSecret {

    /** Environment variable holding the secret itself (at least {@link #MIN_BYTES} bytes of UTF-8): {@link Configuration#SECRET}. */
    public static final String SECRET_ENV = Configuration.SECRET.env();
    /** Environment variable naming a file (mode 0600) that holds the secret: {@link Configuration#SECRET_FILE}. */
    public static final String SECRET_FILE_ENV = Configuration.SECRET_FILE.env();
    /** Shortest secret accepted, in bytes. */
    public static final int MIN_BYTES = 16;
    static final int HOST_SECRET_BYTES = 32;
    private static final String HOST_FILE_HEADER = "symmem4j-store-secret 1";
    private static final Set<PosixFilePermission> OWNER_ONLY_FILE = PosixFilePermissions.fromString("rw-------");
    private static final Set<PosixFilePermission> OWNER_ONLY_DIR = PosixFilePermissions.fromString("rwx------");
    private static final SecureRandom RANDOM = new SecureRandom();

    private enum Kind { ENVIRONMENT, FILE, HOST_FILE }

    private final Kind kind;
    private final byte[] fixed;   // ENVIRONMENT, FILE
    private final Path file;      // FILE, HOST_FILE

    private StoreSecret(Kind kind, byte[] fixed, Path file) {
        this.kind = kind;
        this.fixed = fixed;
        this.file = file;
    }

    /**
     * A secret given directly (tests, embedding applications).
     *
     * @param secret the secret, at least {@link #MIN_BYTES} bytes (copied)
     * @return the secret
     */
    public static StoreSecret of(byte[] secret) {
        return new StoreSecret(Kind.ENVIRONMENT, checkLength(secret.clone(), "the given secret"), null);
    }

    /**
     * Resolves the secret of a job whose store listens at {@code masterAddr:port}, from
     * {@code env} (normally the process environment) as described on the class.
     *
     * @param env environment variables to read {@link #SECRET_ENV} and {@link #SECRET_FILE_ENV} from
     * @param runId the job's run id, which names the host secret file
     * @param masterAddr the store's address
     * @param port the store's port
     * @return the secret's source
     * @throws SymmemException if a given secret is too short or its file is unreadable or not owner-only,
     *         or if no secret is given and {@code masterAddr} is not a loopback address
     */
    public static StoreSecret resolve(Map<String, String> env, String runId, String masterAddr, int port) {
        Configuration.Source variables = Configuration.Source.environment(env);
        String direct = Configuration.SECRET.get(variables);
        if (direct != null) {
            return new StoreSecret(Kind.ENVIRONMENT, checkLength(direct.getBytes(StandardCharsets.UTF_8), SECRET_ENV), null);
        }
        Path f = Configuration.SECRET_FILE.get(variables);
        if (f != null) {
            String fileName = env.get(SECRET_FILE_ENV);
            byte[] content = readOwnerOnly(f, SECRET_FILE_ENV + "=" + fileName);
            int end = content.length;
            while (end > 0 && (content[end - 1] == '\n' || content[end - 1] == '\r')) {
                end--; // a trailing newline from an editor or `echo` is not part of the secret
            }
            return new StoreSecret(Kind.FILE, checkLength(Arrays.copyOf(content, end), SECRET_FILE_ENV + "=" + fileName), f);
        }
        if (!isLoopback(masterAddr)) {
            throw new SymmemException("rendezvous store at MASTER_ADDR=" + masterAddr + " is not a loopback address:"
                    + " ranks on other hosts cannot read this host's generated secret (fix: set " + SECRET_ENV
                    + ", at least " + MIN_BYTES + " bytes, or " + SECRET_FILE_ENV + ", a file of mode 0600, to the same"
                    + " secret on every rank, or use MASTER_ADDR=127.0.0.1 for a single-host job)");
        }
        return new StoreSecret(Kind.HOST_FILE, null, hostDirectory().resolve(hostFileName(runId, port)));
    }

    /**
     * Whether the secret is generated by rank 0 and published in a host file (see {@link #publish}).
     *
     * @return true for a generated host secret
     */
    public boolean isHostSecret() {
        return kind == Kind.HOST_FILE;
    }

    /**
     * Where the secret came from, for messages (never the secret).
     *
     * @return the environment variable or file name
     */
    public String describe() {
        return switch (kind) {
            case ENVIRONMENT -> SECRET_ENV;
            case FILE -> SECRET_FILE_ENV + "=" + file;
            case HOST_FILE -> "host secret file " + file;
        };
    }

    /**
     * The secret's bytes. For a host secret, reads the file rank 0 published; throws
     * {@link SecretNotReadyException} while it does not exist yet (callers retry until their deadline).
     *
     * @return a copy of the secret's bytes
     * @throws SecretNotReadyException if the host secret file does not exist yet
     * @throws SymmemException if the file is malformed, unreadable or not owner-only
     */
    public byte[] bytes() {
        if (kind != Kind.HOST_FILE) {
            return fixed.clone();
        }
        byte[] content = readOwnerOnly(file, describe());
        String text = new String(content, StandardCharsets.US_ASCII);
        String[] lines = text.split("\n");
        if (lines.length < 2 || !lines[0].startsWith(HOST_FILE_HEADER + " ")) {
            throw new SymmemException(describe() + " is malformed (expected '" + HOST_FILE_HEADER
                    + " <pid> <start>' and a base64 line; fix: delete it and start the job again)");
        }
        try {
            return checkLength(Base64.getDecoder().decode(lines[1].trim()), describe());
        } catch (IllegalArgumentException e) {
            throw new SymmemException(describe() + " holds no valid base64 secret (fix: delete it and start the"
                    + " job again)", e);
        }
    }

    /**
     * A fresh host secret for rank 0 to serve with, before publishing it.
     *
     * @return 32 random bytes from a {@link java.security.SecureRandom}
     */
    public static byte[] generateHostSecret() {
        byte[] b = new byte[HOST_SECRET_BYTES];
        RANDOM.nextBytes(b);
        return b;
    }

    /**
     * Rank 0, once its store listens: writes the host secret file (mode 0600, written to a temporary
     * name and renamed into place, so readers never see half a file), after sweeping files whose
     * owner process is gone.
     *
     * @param secret the secret rank 0 serves with, from {@link #generateHostSecret()}
     * @throws IllegalStateException if this is not a host secret
     * @throws SymmemException if the file cannot be written
     */
    public void publish(byte[] secret) {
        if (kind != Kind.HOST_FILE) {
            throw new IllegalStateException("only a host secret is published; this one comes from " + describe()
                    + " (fix: publish only the host secret StoreSecret.resolve makes when neither " + SECRET_ENV + " nor "
                    + SECRET_FILE_ENV + " is set; give a set secret to every rank yourself)");
        }
        sweepStale(file.getParent());
        ProcessHandle self = ProcessHandle.current();
        long start = self.info().startInstant().map(Instant::toEpochMilli).orElse(0L);
        String content = HOST_FILE_HEADER + " " + self.pid() + " " + start + "\n"
                + Base64.getEncoder().encodeToString(secret) + "\n";
        Path tmp = file.resolveSibling(file.getFileName() + "." + self.pid() + ".tmp");
        try {
            Files.deleteIfExists(tmp);
            Files.createFile(tmp, PosixFilePermissions.asFileAttribute(OWNER_ONLY_FILE));
            Files.writeString(tmp, content, StandardCharsets.US_ASCII);
            Files.move(tmp, file, StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
        } catch (IOException e) {
            try {
                Files.deleteIfExists(tmp);
            } catch (IOException ignored) {
                // best effort
            }
            throw new SymmemException("cannot write " + describe() + ": " + e
                    + " (fix: set -Dsymmem4j.secret.dir to a directory only this user can write, or set"
                    + " " + SECRET_ENV + ")", e);
        }
    }

    /**
     * Rank 0, when its store closes: removes the host secret file if it still holds {@code secret}.
     *
     * @param secret the secret that was published; a file holding another one is left alone
     */
    public void unpublish(byte[] secret) {
        if (kind != Kind.HOST_FILE) {
            return;
        }
        try {
            if (MessageDigest.isEqual(bytes(), secret)) {
                Files.deleteIfExists(file);
            }
        } catch (RuntimeException | IOException ignored) {
            // another group of the run replaced it, or it is gone already
        }
    }

    /**
     * The host secrets this user's jobs published for {@code port} (at most 16, unreadable or
     * malformed files skipped): what a rank may try, to name the job whose store holds a port that
     * its own job's store should have (that store tells only a client proving its secret).
     *
     * @param port the store's port
     * @return the secrets, possibly none
     */
    static List<byte[]> hostSecretsOfPort(int port) {
        List<byte[]> found = new ArrayList<>();
        Path dir;
        try {
            dir = hostDirectory();
        } catch (RuntimeException e) {
            return found;
        }
        try (DirectoryStream<Path> files = Files.newDirectoryStream(dir, "store-" + port + "-*.secret")) {
            for (Path p : files) {
                if (found.size() == 16) {
                    break;
                }
                try {
                    found.add(new StoreSecret(Kind.HOST_FILE, null, p).bytes());
                } catch (RuntimeException skipped) {
                    // not readable as a host secret: not a candidate
                }
            }
        } catch (IOException ignored) {
            // no directory listing: no candidates
        }
        return found;
    }

    /** The file name of a host secret: the port and a digest of the run id (which may be long). */
    static String hostFileName(String runId, int port) {
        try {
            byte[] d = MessageDigest.getInstance("SHA-256").digest(runId.getBytes(StandardCharsets.UTF_8));
            return "store-" + port + "-" + HexFormat.of().formatHex(d, 0, 8) + ".secret";
        } catch (NoSuchAlgorithmException e) {
            throw Invariants.violated("SHA-256 missing from this JVM, which every Java platform must have", e);
        }
    }

    /**
     * The directory of host secrets, created 0700 if absent, and refused unless it is this user's alone.
     *
     * @return the directory
     * @throws SymmemException if it cannot be created or is not this user's alone
     */
    public static Path hostDirectory() {
        Path dir = Configuration.SECRET_DIR.get();
        if (dir == null) {
            String runtime = System.getenv("XDG_RUNTIME_DIR");
            dir = runtime != null && !runtime.isBlank() && Files.isDirectory(Path.of(runtime))
                    ? Path.of(runtime, "symmem4j")
                    : Path.of(System.getProperty("java.io.tmpdir"), "symmem4j-" + currentUid());
        }
        try {
            Files.createDirectories(dir.getParent());
            Files.createDirectory(dir, PosixFilePermissions.asFileAttribute(OWNER_ONLY_DIR));
        } catch (java.nio.file.FileAlreadyExistsException e) {
            // checked below
        } catch (IOException e) {
            throw new SymmemException("cannot create the host secret directory " + dir + ": " + e
                    + " (fix: set -Dsymmem4j.secret.dir, or set " + SECRET_ENV + ")", e);
        }
        try {
            if (!Files.isDirectory(dir, LinkOption.NOFOLLOW_LINKS)) {
                throw new SymmemException("host secret directory " + dir + " is not a directory (or is a symbolic"
                        + " link; fix: remove it, or set -Dsymmem4j.secret.dir)");
            }
            int owner = (Integer) Files.getAttribute(dir, "unix:uid", LinkOption.NOFOLLOW_LINKS);
            int mode = (Integer) Files.getAttribute(dir, "unix:mode", LinkOption.NOFOLLOW_LINKS);
            if (owner != currentUid() || (mode & 0077) != 0) {
                throw new SymmemException("host secret directory " + dir + " has owner uid=" + owner + " mode="
                        + Integer.toOctalString(mode & 0777) + "; expected owner uid=" + currentUid()
                        + " mode=700 (another user could read or replace secrets there; fix: remove it, or set"
                        + " -Dsymmem4j.secret.dir to a directory of this user's)");
            }
        } catch (IOException | UnsupportedOperationException e) {
            throw new SymmemException("cannot check host secret directory " + dir + ": " + e
                    + " (a POSIX file system is needed for host secrets; fix: set " + SECRET_ENV + " instead)", e);
        }
        return dir;
    }

    /**
     * Reads a secret file after checking that it is a regular file (not a link), owned by this user
     * and readable by nobody else.
     */
    private static byte[] readOwnerOnly(Path f, String what) {
        try {
            if (!Files.isRegularFile(f, LinkOption.NOFOLLOW_LINKS)) {
                if (!Files.exists(f, LinkOption.NOFOLLOW_LINKS)) {
                    throw new SecretNotReadyException(what + " does not exist (fix: start rank 0, which writes it,"
                            + " or create it with mode 0600)");
                }
                throw new SymmemException(what + " is not a regular file (symbolic links are refused; fix:"
                        + " point it at the file itself)");
            }
            int owner = (Integer) Files.getAttribute(f, "unix:uid", LinkOption.NOFOLLOW_LINKS);
            int mode = (Integer) Files.getAttribute(f, "unix:mode", LinkOption.NOFOLLOW_LINKS);
            if (owner != currentUid() || (mode & 0077) != 0) {
                throw new SymmemException(what + ": owner uid=" + owner + " mode=" + Integer.toOctalString(mode & 0777)
                        + "; expected owner uid=" + currentUid() + " and no access for group or others"
                        + " (fix: chmod 600 the file, as the user that runs the job)");
            }
            return Files.readAllBytes(f);
        } catch (NoSuchFileException e) {
            throw new SecretNotReadyException(what + " does not exist (fix: start rank 0, which writes it, or create"
                    + " it with mode 0600)");
        } catch (IOException | UnsupportedOperationException e) {
            throw new SymmemException("cannot read " + what + ": " + e + " (fix: make it readable by the user"
                    + " that runs the job)", e);
        }
    }

    /** Deletes host secret files whose writer process is gone (a rank 0 killed before it could clean up). */
    static void sweepStale(Path dir) {
        try (DirectoryStream<Path> files = Files.newDirectoryStream(dir, "store-*.secret")) {
            for (Path p : files) {
                try {
                    String first = new String(Files.readAllBytes(p), StandardCharsets.US_ASCII).split("\n", 2)[0];
                    String[] f = first.split(" ");
                    if (f.length == 4 && (HOST_FILE_HEADER + " ").equals(f[0] + " " + f[1] + " ")
                            && !ProcessLiveness.isRunning(Long.parseLong(f[2]), Long.parseLong(f[3]))) {
                        Files.deleteIfExists(p);
                    }
                } catch (IOException | NumberFormatException ignored) {
                    // unreadable or not ours: leave it
                }
            }
        } catch (IOException ignored) {
            // nothing to sweep
        }
    }

    private static byte[] checkLength(byte[] secret, String what) {
        if (secret.length < MIN_BYTES) {
            throw new SymmemException(what + " holds " + secret.length + " bytes; a store secret needs at least "
                    + MIN_BYTES + " (fix: make a longer one, e.g. openssl rand -hex 32)");
        }
        return secret;
    }

    static boolean isLoopback(String host) {
        try {
            for (InetAddress a : InetAddress.getAllByName(host)) {
                if (!a.isLoopbackAddress()) {
                    return false;
                }
            }
            return true;
        } catch (UnknownHostException e) {
            return false;
        }
    }

    private static volatile int uid = -1;

    /** This process's user id (from {@code /proc/self}, else from a file it creates). */
    static int currentUid() {
        int u = uid;
        if (u >= 0) {
            return u;
        }
        try {
            u = (Integer) Files.getAttribute(Path.of("/proc/self"), "unix:uid");
        } catch (IOException | UnsupportedOperationException | IllegalArgumentException e) {
            try {
                Path probe = Files.createTempFile("symmem4j-uid", ".probe");
                try {
                    u = (Integer) Files.getAttribute(probe, "unix:uid");
                } finally {
                    Files.deleteIfExists(probe);
                }
            } catch (IOException | UnsupportedOperationException e2) {
                throw new SymmemException("cannot tell this process's user id (no /proc, no unix file attributes): "
                        + e2 + "; fix: set " + SECRET_ENV + " instead of relying on host secrets", e2);
            }
        }
        uid = u;
        return u;
    }

    /** The host secret file does not exist yet: rank 0 has not published it (or a previous one was removed). */
    public static final class SecretNotReadyException extends SymmemException {
        /**
         * Creates the exception.
         *
         * @param message which file is missing; the text " yet (...)" is appended
         */
        public SecretNotReadyException(String message) {
            super(message + " yet (rank 0 writes it once its store listens)");
        }
    }
}
