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

/**
 * The first exchange on every store connection: who the rank is, which job and group it belongs to,
 * and mutual proof of the job's secret. Nothing is read from or written to the store before it
 * succeeds, and the secret never crosses the wire: each side proves it holds the secret with an
 * HMAC-SHA256 over both sides' fresh random nonces and the identity claimed (a transcript that can
 * be neither replayed nor reflected, since the two proofs carry different labels).
 *
 * <pre>
 *   client -> server  HELLO      MAGIC VERSION clientNonce[32] runId(UTF) generation(long) worldSize(int)
 *                                rank(int) pid(long) startMillis(long)
 *   server -> client  CHALLENGE  MAGIC VERSION verdict(byte) runId(UTF) generation(long) worldSize(int)
 *                                  verdict ACCEPT: serverNonce[32] serverProof[32]
 *                                  verdict REFUSE: reason(byte) detail(UTF)
 *   client -> server  PROOF      clientProof[32]          (only after checking serverProof)
 *   server -> client  RESULT     OK | DENIED detail(UTF)
 * </pre>
 * A server refuses before any proof when the identity cannot be this group's (another run, another
 * generation, another world size, a rank out of range or already taken, the store closing); the
 * client then knows both identities and can say so.
 */
final class StoreHandshake {

    static final int MAGIC = 0x53594D53; // "SYMS"
    static final int VERSION = 2;
    static final int NONCE_BYTES = 32;
    static final int PROOF_BYTES = 32;

    static final byte ACCEPT = 0;
    static final byte REFUSE = 1;
    static final byte OK = 0;
    static final byte DENIED = 1;

    private static final byte[] SERVER_LABEL = "symmem4j store v2: server proof".getBytes(StandardCharsets.US_ASCII);
    private static final byte[] CLIENT_LABEL = "symmem4j store v2: client proof".getBytes(StandardCharsets.US_ASCII);
    private static final SecureRandom RANDOM = new SecureRandom();

    /** Why a server refused a connection before any proof. */
    enum Refusal {
        OTHER_RUN(1, true),
        OTHER_GENERATION(2, true),
        WORLD_SIZE(3, true),
        RANK_OUT_OF_RANGE(4, false),
        SEAT_TAKEN(5, true),
        CLOSING(6, true),
        VERSION(7, false);

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
            return VERSION;
        }
    }

    /** What a client says about itself. */
    record Hello(byte[] nonce, String runId, long generation, int worldSize, int rank, long pid, long startMillis) {

        void write(DataOutputStream out) throws IOException {
            out.writeInt(MAGIC);
            out.writeInt(VERSION);
            out.write(nonce);
            out.writeUTF(runId);
            out.writeLong(generation);
            out.writeInt(worldSize);
            out.writeInt(rank);
            out.writeLong(pid);
            out.writeLong(startMillis);
        }

        /** Reads a HELLO whose magic and version were already read and checked. */
        static Hello readBody(DataInputStream in) throws IOException {
            byte[] nonce = in.readNBytes(NONCE_BYTES);
            if (nonce.length != NONCE_BYTES) {
                throw new IOException("rendezvous handshake: connection closed inside HELLO");
            }
            String runId = in.readUTF();
            if (runId.length() > 128) {
                throw new IOException("rendezvous handshake: run id of " + runId.length() + " characters (at most 128)");
            }
            return new Hello(nonce, runId, in.readLong(), in.readInt(), in.readInt(), in.readLong(), in.readLong());
        }
    }

    private StoreHandshake() {
    }

    static byte[] nonce() {
        byte[] n = new byte[NONCE_BYTES];
        RANDOM.nextBytes(n);
        return n;
    }

    static byte[] serverProof(byte[] secret, Hello hello, byte[] serverNonce) {
        return mac(secret, SERVER_LABEL, hello, serverNonce);
    }

    static byte[] clientProof(byte[] secret, Hello hello, byte[] serverNonce) {
        return mac(secret, CLIENT_LABEL, hello, serverNonce);
    }

    /** Constant-time comparison of a received proof with the expected one. */
    static boolean matches(byte[] expected, byte[] received) {
        return received != null && received.length == expected.length && MessageDigest.isEqual(expected, received);
    }

    private static byte[] mac(byte[] secret, byte[] label, Hello h, byte[] serverNonce) {
        try {
            ByteArrayOutputStream transcript = new ByteArrayOutputStream(256);
            DataOutputStream t = new DataOutputStream(transcript);
            t.write(label);
            t.write(h.nonce());
            t.write(serverNonce);
            t.writeUTF(h.runId());
            t.writeLong(h.generation());
            t.writeInt(h.worldSize());
            t.writeInt(h.rank());
            t.writeLong(h.pid());
            t.writeLong(h.startMillis());
            Mac mac = Mac.getInstance("HmacSHA256");
            mac.init(new SecretKeySpec(secret, "HmacSHA256"));
            return mac.doFinal(transcript.toByteArray());
        } catch (IOException | GeneralSecurityException e) {
            throw new IllegalStateException("HMAC-SHA256 unavailable in this JVM", e);
        }
    }
}
