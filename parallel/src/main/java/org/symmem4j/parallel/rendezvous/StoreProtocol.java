package org.symmem4j.parallel.rendezvous;

import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.EOFException;
import java.io.IOException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

/**
 * Requests between {@link TcpStoreClient} and {@link TcpStoreServer} once the connection's
 * {@link StoreHandshake} succeeded: one request, one reply, over a {@code DataOutputStream}. Every
 * request starts with {@link #MAGIC} and an op byte; keys are modified UTF-8 ({@code writeUTF});
 * values are an int length plus bytes.
 *
 * <pre>
 *   SET     key value            -> OK | ERROR message
 *   GET_ALL n key*n timeoutMs    -> OK value*n | TIMEOUT n' missingKey*n'
 *   TRY_GET key                  -> OK value   | ABSENT
 *   ADD     key delta(long)      -> OK newValue(long) | ERROR message
 *   DELETE  key                  -> OK present(boolean)
 * </pre>
 * A request that breaks a {@link StoreLimits} limit on its framing (a key or value too long, too
 * many keys) drops the connection; one that would exceed the store's capacity gets ERROR and the
 * connection stays usable.
 */
final class StoreProtocol {

    static final int MAGIC = 0x53594D52; // "SYMR"

    static final byte SET = 1;
    static final byte GET_ALL = 2;
    static final byte TRY_GET = 3;
    static final byte ADD = 4;
    static final byte DELETE = 5;

    static final byte OK = 0;
    static final byte TIMEOUT = 1;
    static final byte ABSENT = 2;
    static final byte ERROR = 3;

    /** Keys one GET_ALL may name (a group's exchange names one per rank). */
    static final int MAX_KEYS_PER_REQUEST = 65_536;

    /** A value is buffered in pieces of at most this size, as its bytes arrive. */
    static final int READ_CHUNK = 64 << 10;

    private StoreProtocol() {
    }

    static void writeBytes(DataOutputStream out, byte[] v) throws IOException {
        out.writeInt(v.length);
        out.write(v);
    }

    /**
     * Reads a length-prefixed value of at most {@code maxBytes}. Memory is taken as the bytes arrive
     * (the buffer grows by doubling from one chunk), so a peer that announces a large value and
     * sends nothing holds no more than a chunk.
     */
    static byte[] readBytes(DataInputStream in, int maxBytes) throws IOException {
        int n = in.readInt();
        if (n < 0 || n > maxBytes) {
            throw new IOException("rendezvous protocol: value length=" + n + " outside [0, " + maxBytes + "] (fix: store"
                    + " set-up values only, or raise StoreLimits.maxValueBytes; only symmem4j ranks of one version may use MASTER_PORT)");
        }
        byte[] buf = new byte[Math.min(n, READ_CHUNK)];
        int have = 0;
        while (have < n) {
            if (have == buf.length) {
                buf = Arrays.copyOf(buf, (int) Math.min(n, 2L * buf.length));
            }
            int got = in.read(buf, have, buf.length - have);
            if (got < 0) {
                throw new EOFException("rendezvous protocol: connection closed after " + have + " of " + n + " value bytes"
                        + " (the other side exited or dropped the connection; fix: see its own error)");
            }
            have += got;
        }
        return buf;
    }

    /** Reads a key and checks its length against {@code maxKeyBytes} (in modified-UTF-8 bytes, as on the wire). */
    static String readKey(DataInputStream in, int maxKeyBytes) throws IOException {
        int len = in.readUnsignedShort();
        if (len > maxKeyBytes) {
            throw new IOException("rendezvous protocol: key of " + len + " bytes (at most " + maxKeyBytes + "; fix: use"
                    + " shorter keys, or raise StoreLimits.maxKeyBytes)");
        }
        byte[] framed = new byte[2 + len];
        framed[0] = (byte) (len >>> 8);
        framed[1] = (byte) len;
        in.readFully(framed, 2, len);
        return DataInputStream.readUTF(new DataInputStream(new java.io.ByteArrayInputStream(framed)));
    }

    static void writeKeys(DataOutputStream out, List<String> keys) throws IOException {
        out.writeInt(keys.size());
        for (String k : keys) {
            out.writeUTF(k);
        }
    }

    static List<String> readKeys(DataInputStream in, int maxKeyBytes) throws IOException {
        int n = in.readInt();
        if (n < 0 || n > MAX_KEYS_PER_REQUEST) {
            throw new IOException("rendezvous protocol: key count=" + n + " outside [0, " + MAX_KEYS_PER_REQUEST + "]"
                    + " (fix: ask for at most " + MAX_KEYS_PER_REQUEST + " keys per call)");
        }
        List<String> keys = new ArrayList<>(Math.min(n, 1024));
        for (int i = 0; i < n; i++) {
            keys.add(readKey(in, maxKeyBytes));
        }
        return keys;
    }
}
