package org.symmem4j.serving;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.charset.StandardCharsets;

import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.factory.Nd4j;

/**
 * The messages between a router and its worker processes, as they lie in the rings' payloads (little-endian, no
 * alignment assumed):
 *
 * <pre>
 *  BATCH  (router to worker)  id:long  version:long  model:str  carried:int  [kind:str  config:str]  array
 *  OUTPUT (worker to router)  id:long  array
 *  ERROR  (worker to router)  id:long  message:str
 *  STOP   (router to worker)  (empty)
 *
 *  str   = length:int, UTF-8 bytes
 *  array = dataType:str  rank:int  shape:long[rank]  elements in C order (length x dataType width bytes)
 * </pre>
 *
 * A BATCH carries its version's network kind and configuration only when {@code carried} is 1: the first batch of
 * a version to a worker, or the first after the worker dropped it ({@link WireConfigs}); with 0 the worker takes them
 * from its cache. Both ends run the same build, so the data type travels as its enum name.
 */
final class BatchWire {

    static final int BATCH = 1;
    static final int OUTPUT = 2;
    static final int ERROR = 3;
    static final int STOP = 4;

    private static final ValueLayout.OfLong LONG = ValueLayout.JAVA_LONG_UNALIGNED;
    private static final ValueLayout.OfInt INT = ValueLayout.JAVA_INT_UNALIGNED;

    private BatchWire() {
    }

    /**
     * A decoded batch.
     *
     * @param config the configuration it carried, or null when it refers to the worker's cached one
     */
    record Batch(long id, long version, String model, WireConfigs.Config config, INDArray features) {
    }

    /**
     * {@return the bytes of a BATCH message}
     *
     * @param config the version's configuration to carry, or null to refer to the one the worker holds
     */
    static byte[] batch(long id, long version, String model, WireConfigs.Config config, INDArray features) {
        byte[] m = utf8(model);
        byte[] k = config == null ? new byte[0] : utf8(config.kind());
        byte[] c = config == null ? new byte[0] : utf8(config.json());
        INDArray f = contiguous(features);
        long configBytes = config == null ? 0 : 8 + k.length + c.length;
        byte[] out = new byte[Math.toIntExact(16 + 4 + m.length + 4 + configBytes + arrayBytes(f))];
        MemorySegment s = MemorySegment.ofArray(out);
        s.set(LONG, 0, id);
        s.set(LONG, 8, version);
        long at = putString(s, 16, m);
        s.set(INT, at, config == null ? 0 : 1);
        at += 4;
        if (config != null) {
            at = putString(s, at, k);
            at = putString(s, at, c);
        }
        putArray(s, at, f);
        return out;
    }

    /** Decodes a BATCH message, copying its features out of the ring. */
    static Batch readBatch(MemorySegment buffer, long offset, int length) {
        MemorySegment s = buffer.asSlice(offset, length);
        long[] at = {16};
        String model = getString(s, at);
        int carried = s.get(INT, at[0]);
        at[0] += 4;
        WireConfigs.Config config = null;
        if (carried == 1) {
            String kind = getString(s, at);
            config = new WireConfigs.Config(kind, getString(s, at));
        } else if (carried != 0) {
            throw org.symmem4j.parallel.Invariants.violated("a BATCH message with carried=" + carried
                    + ", expected 0 or 1");
        }
        return new Batch(s.get(LONG, 0), s.get(LONG, 8), model, config, getArray(s, at));
    }

    /** {@return the bytes of an OUTPUT message} */
    static byte[] output(long id, INDArray out) {
        INDArray o = contiguous(out);
        byte[] bytes = new byte[Math.toIntExact(8 + arrayBytes(o))];
        MemorySegment s = MemorySegment.ofArray(bytes);
        s.set(LONG, 0, id);
        putArray(s, 8, o);
        return bytes;
    }

    /** {@return the bytes of an ERROR message} */
    static byte[] error(long id, String message) {
        byte[] m = utf8(message);
        byte[] bytes = new byte[12 + m.length];
        MemorySegment s = MemorySegment.ofArray(bytes);
        s.set(LONG, 0, id);
        putString(s, 8, m);
        return bytes;
    }

    /** {@return the id a reply (OUTPUT or ERROR) answers} */
    static long replyId(MemorySegment buffer, long offset) {
        return buffer.get(LONG, offset);
    }

    /** {@return an OUTPUT message's array, copied out of the ring} */
    static INDArray readOutput(MemorySegment buffer, long offset, int length) {
        return getArray(buffer.asSlice(offset, length), new long[] {8});
    }

    /** {@return an ERROR message's text} */
    static String readError(MemorySegment buffer, long offset, int length) {
        return getString(buffer.asSlice(offset, length), new long[] {8});
    }

    private static byte[] utf8(String s) {
        return s.getBytes(StandardCharsets.UTF_8);
    }

    private static INDArray contiguous(INDArray a) {
        return a.isView() || a.ordering() != 'c' || a.offset() != 0 ? a.dup('c') : a;
    }

    private static long arrayBytes(INDArray a) {
        return 4 + a.dataType().name().length() + 4 + 8L * a.rank() + a.length() * a.dataType().width();
    }

    private static long putString(MemorySegment s, long at, byte[] bytes) {
        s.set(INT, at, bytes.length);
        MemorySegment.copy(MemorySegment.ofArray(bytes), 0, s, at + 4, bytes.length);
        return at + 4 + bytes.length;
    }

    private static String getString(MemorySegment s, long[] at) {
        int n = s.get(INT, at[0]);
        String v = new String(s.asSlice(at[0] + 4, n).toArray(ValueLayout.JAVA_BYTE), StandardCharsets.UTF_8);
        at[0] += 4 + n;
        return v;
    }

    private static void putArray(MemorySegment s, long at, INDArray a) {
        at = putString(s, at, utf8(a.dataType().name()));
        long[] shape = a.shape();
        s.set(INT, at, shape.length);
        at += 4;
        for (long d : shape) {
            s.set(LONG, at, d);
            at += 8;
        }
        long bytes = a.length() * a.dataType().width();
        MemorySegment data = MemorySegment.ofAddress(a.data().address()).reinterpret(bytes);
        MemorySegment.copy(data, 0, s, at, bytes);
    }

    private static INDArray getArray(MemorySegment s, long[] at) {
        DataType type = DataType.valueOf(getString(s, at));
        int rank = s.get(INT, at[0]);
        at[0] += 4;
        long[] shape = new long[rank];
        for (int i = 0; i < rank; i++) {
            shape[i] = s.get(LONG, at[0]);
            at[0] += 8;
        }
        INDArray a = Nd4j.createUninitialized(type, shape, 'c');
        long bytes = a.length() * type.width();
        MemorySegment.copy(s, at[0], MemorySegment.ofAddress(a.data().address()).reinterpret(bytes), 0, bytes);
        at[0] += bytes;
        return a;
    }
}
