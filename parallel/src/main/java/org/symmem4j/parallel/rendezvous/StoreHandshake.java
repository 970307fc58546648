package org.symmem4j.parallel.rendezvous;

import java.io.ByteArrayOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.security.GeneralSecurityException;
import java.security.MessageDigest;
import java.security.SecureRandom;
import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;
import org.symmem4j.parallel.Invariants;

/**
 * The first exchange on every store connection: mutual proof of the job's secret, and only then who
 * the rank is and which job and group it belongs to. Nothing is read from or written to the store
 * before it succeeds, and the secret never crosses the wire: each side proves it holds the secret
 * with an HMAC-SHA256 over both sides' fresh random nonces (a transcript that can be neither
 * replayed nor reflected, since the two proofs carry different labels).
 *
 * <pre>
 *   client -> server  HELLO      MAGIC VERSION clientNonce[32]
 *   server -> client  CHALLENGE  MAGIC VERSION serverNonce[32] serverProof[32]
 *                                  serverProof = HMAC(secret, SERVER_LABEL clientNonce serverNonce)
 *   client -> server  CLAIM      runId(UTF) generation(long) worldSize(int) rank(int) pid(long)
 *                                startMillis(long) clientProof[32]      (only after checking serverProof)
 *                                  clientProof = HMAC(secret, CLIENT_LABEL clientNonce serverNonce claim)
 *   server -> client  RESULT     OK
 *                              | REFUSE reason(byte) runId(UTF) generation(long) worldSize(int) detail(UTF)
 *                              | DENIED detail(UTF)   (the client proof failed: a fixed text)
 * </pre>
 * What a client learns before it proved the secret is the same for every store and every claim:
 * that a symmem4j store of this protocol version listens, a random nonce, and a proof that depends
 * on the two nonces alone (not on the run, its size, or who holds a seat). So a stranger learns
 * nothing about the run, and the store is no oracle for guessing it; and a rank tells nothing about
 * itself to a listener that could not prove the secret. A client that did prove it and is refused
 * (another run or generation, another world size, a rank out of range or already taken, the store
 * closing) gets the store's identity and a detailed reason, so a misconfigured rank hears why.
 * A store of another protocol version answers MAGIC and its VERSION only, then closes.
 */
final class StoreHandshake {

    static final int MAGIC = 0x53594D53; // "SYMS"
    /** 3: proof before identity (2 exchanged identities, and refused, before any proof). */
    static final int VERSION = 3;
    static final int NONCE_BYTES = 32;
    static final int PROOF_BYTES = 32;
    /** Longest run id on the wire, in modified-UTF-8 bytes (128 characters of the run id alphabet). */
    static final int MAX_RUN_ID_BYTES = 128;

    static final byte OK = 0;
    static final byte REFUSE = 1;
    static final byte DENIED = 2;

    /** What a server tells a client whose proof failed; the same for every store, so it says nothing about one. */
    static final String DENIED_TEXT = "the client did not prove the job's secret (every rank needs the same "
            + StoreSecret.SECRET_ENV + " or " + StoreSecret.SECRET_FILE_ENV + ", or the host secret file of its rank 0)";

    private static final byte[] SERVER_LABEL = "symmem4j store v3: server proof".getBytes(StandardCharsets.US_ASCII);
    private static final byte[] CLIENT_LABEL = "symmem4j store v3: client proof".getBytes(StandardCharsets.US_ASCII);
    private static final SecureRandom RANDOM = new SecureRandom();

    /** Why a server refused a client that proved the secret. */
    enum Refusal {
        OTHER_RUN(1, true),
        OTHER_GENERATION(2, true),
        WORLD_SIZE(3, true),
        RANK_OUT_OF_RANGE(4, false),
        SEAT_TAKEN(5, true),
        CLOSING(6, true),
        UNKNOWN(7, false);

        final byte code;
        /** Whether a later attempt may succeed (a previous group's store may be on its way out). */
        final boolean retryable;

        Refusal(int code, boolean retryable) {
            this.code = (byte) code;
            this.retryable = retryable;
        }

        static Refusal of(byte code) {
            for (Refusal r : values()) {
                if (r.code == code) {
                    return r;
                }
            }
            return UNKNOWN;
        }
    }

    /** What a client says about itself, once the store proved the secret. */
    record Claim(String runId, long generation, int worldSize, int rank, long pid, long startMillis) {

        void write(DataOutputStream out) throws IOException {
            out.writeUTF(runId);
            out.writeLong(generation);
            out.writeInt(worldSize);
            out.writeInt(rank);
            out.writeLong(pid);
            out.writeLong(startMillis);
        }

        /**
         * Reads a claim; its run id's announced length is checked before anything is allocated for
         * it, so a client that has proved nothing cannot make the server hold 64 KiB.
         */
        static Claim read(DataInputStream in) throws IOException {
            int len = in.readUnsignedShort();
            if (len > MAX_RUN_ID_BYTES) {
                throw new IOException("rendezvous handshake: run id of " + len + " bytes (at most " + MAX_RUN_ID_BYTES
                        + "; fix: set SYMMEM4J_RUN_ID to at most " + MAX_RUN_ID_BYTES + " bytes)");
            }
            byte[] framed = new byte[2 + len];
            framed[0] = (byte) (len >>> 8);
            framed[1] = (byte) len;
            in.readFully(framed, 2, len);
            String runId = new DataInputStream(new java.io.ByteArrayInputStream(framed)).readUTF();
            return new Claim(runId, in.readLong(), in.readInt(), in.readInt(), in.readLong(), in.readLong());
        }
    }

    private StoreHandshake() {
    }

    static byte[] nonce() {
        byte[] n = new byte[NONCE_BYTES];
        RANDOM.nextBytes(n);
        return n;
    }

    static void writeHello(DataOutputStream out, byte[] clientNonce) throws IOException {
        out.writeInt(MAGIC);
        out.writeInt(VERSION);
        out.write(clientNonce);
    }

    /** Reads {@code n} bytes, or throws if the connection ends first. */
    static byte[] readExactly(DataInputStream in, int n) throws IOException {
        byte[] b = new byte[n];
        in.readFully(b);
        return b;
    }

    static byte[] serverProof(byte[] secret, byte[] clientNonce, byte[] serverNonce) {
        return mac(secret, SERVER_LABEL, clientNonce, serverNonce, null);
    }

    static byte[] clientProof(byte[] secret, byte[] clientNonce, byte[] serverNonce, Claim claim) {
        return mac(secret, CLIENT_LABEL, clientNonce, serverNonce, claim);
    }

    /** Constant-time comparison of a received proof with the expected one. */
    static boolean matches(byte[] expected, byte[] received) {
        return received != null && received.length == expected.length && MessageDigest.isEqual(expected, received);
    }

    private static byte[] mac(byte[] secret, byte[] label, byte[] clientNonce, byte[] serverNonce, Claim claim) {
        try {
            ByteArrayOutputStream transcript = new ByteArrayOutputStream(256);
            DataOutputStream t = new DataOutputStream(transcript);
            t.write(label);
            t.write(clientNonce);
            t.write(serverNonce);
            if (claim != null) {
                claim.write(t);
            }
            Mac mac = Mac.getInstance("HmacSHA256");
            mac.init(new SecretKeySpec(secret, "HmacSHA256"));
            return mac.doFinal(transcript.toByteArray());
        } catch (IOException | GeneralSecurityException e) {
            throw Invariants.violated("HMAC-SHA256 unavailable in this JVM, which every Java platform must have", e);
        }
    }
}
