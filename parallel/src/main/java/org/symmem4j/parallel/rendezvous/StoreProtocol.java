package org.symmem4j.parallel.rendezvous;

import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.util.ArrayList;
import java.util.List;

/**
 * Wire format between {@link TcpStoreClient} and {@link TcpStoreServer}: one request, one reply,
 * over a {@code DataOutputStream}. Every request starts with {@link #MAGIC} and an op byte; keys
 * are modified UTF-8 ({@code writeUTF}); values are an int length plus bytes.
 *
 * <pre>
 *   SET     key value            -> OK
 *   GET_ALL n key*n timeoutMs    -> OK value*n | TIMEOUT n' missingKey*n'
 *   TRY_GET key                  -> OK value   | ABSENT
 *   ADD     key delta(long)      -> OK newValue(long)
 *   DELETE  key                  -> OK present(boolean)
 * </pre>
 */
final class StoreProtocol {

    static final int MAGIC = 0x53594D53; // "SYMS"

    static final byte SET = 1;
    static final byte GET_ALL = 2;
    static final byte TRY_GET = 3;
    static final byte ADD = 4;
    static final byte DELETE = 5;

    static final byte OK = 0;
    static final byte TIMEOUT = 1;
    static final byte ABSENT = 2;
    static final byte ERROR = 3;

    /** Largest value accepted, so a corrupt length cannot make the server allocate gigabytes. */
    static final int MAX_VALUE_BYTES = 16 << 20;

    private StoreProtocol() {
    }

    static void writeBytes(DataOutputStream out, byte[] v) throws IOException {
        out.writeInt(v.length);
        out.write(v);
    }

    static byte[] readBytes(DataInputStream in) throws IOException {
        int n = in.readInt();
        if (n < 0 || n > MAX_VALUE_BYTES) {
            throw new IOException("rendezvous protocol: value length=" + n + " outside [0, " + MAX_VALUE_BYTES + "]");
        }
        byte[] v = new byte[n];
        in.readFully(v);
        return v;
    }

    static void writeKeys(DataOutputStream out, List<String> keys) throws IOException {
        out.writeInt(keys.size());
        for (String k : keys) {
            out.writeUTF(k);
        }
    }

    static List<String> readKeys(DataInputStream in) throws IOException {
        int n = in.readInt();
        if (n < 0 || n > 1_000_000) {
            throw new IOException("rendezvous protocol: key count=" + n + " outside [0, 1000000]");
        }
        List<String> keys = new ArrayList<>(n);
        for (int i = 0; i < n; i++) {
            keys.add(in.readUTF());
        }
        return keys;
    }
}
