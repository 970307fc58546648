package org.symmem4j.serving.session;

import java.lang.foreign.MemorySegment;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.Map;
import java.util.Objects;
import java.util.TreeMap;

import org.deeplearning4j.nn.api.layers.RecurrentLayer;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.factory.Nd4j;

/**
 * A recurrent {@link MultiLayerNetwork}'s decoding state ({@code rnnGetPreviousState} of every recurrent layer:
 * LSTM, GravesLSTM, SimpleRnn, ...) as bytes, and back: what a worker stores in a {@link SessionCache} after a
 * {@code rnnTimeStep} and loads before the session's next step, on whichever worker that runs. The bytes are exact
 * (every array's data type, shape and values as they are), so a session continued elsewhere steps bitwise as it
 * would have on one network.
 *
 * <pre>
 * int layers; per layer: int index, int entries; per entry (keys sorted):
 *   short keyLength, key (UTF-8), byte dataType ordinal, byte rank, long[rank] shape, values (little-endian, c order)
 * </pre>
 *
 * A network with no state yet (before its first step, or after {@code rnnClearPreviousState}) encodes every
 * recurrent layer with zero entries; restoring that clears the network's state.
 */
public final class RnnSessionState {

    private RnnSessionState() {
    }

    /**
     * The network's current state as bytes.
     *
     * @param net the network
     * @return the bytes
     */
    public static byte[] capture(MultiLayerNetwork net) {
        Objects.requireNonNull(net, "net");
        int layers = net.getnLayers();
        Map<Integer, Map<String, INDArray>> states = new TreeMap<>();
        long size = 4;
        for (int i = 0; i < layers; i++) {
            if (net.getLayer(i) instanceof RecurrentLayer) {
                Map<String, INDArray> m = net.rnnGetPreviousState(i);
                Map<String, INDArray> sorted = m == null ? new TreeMap<>() : new TreeMap<>(m);
                states.put(i, sorted);
                size += 8;
                for (Map.Entry<String, INDArray> e : sorted.entrySet()) {
                    INDArray a = e.getValue();
                    size += 2 + e.getKey().getBytes(StandardCharsets.UTF_8).length + 2 + 8L * a.rank()
                            + a.length() * a.dataType().width();
                }
            }
        }
        ByteBuffer buf = ByteBuffer.allocate(Math.toIntExact(size)).order(ByteOrder.LITTLE_ENDIAN);
        buf.putInt(states.size());
        for (Map.Entry<Integer, Map<String, INDArray>> layer : states.entrySet()) {
            buf.putInt(layer.getKey());
            buf.putInt(layer.getValue().size());
            for (Map.Entry<String, INDArray> e : layer.getValue().entrySet()) {
                byte[] key = e.getKey().getBytes(StandardCharsets.UTF_8);
                INDArray a = e.getValue();
                buf.putShort((short) key.length).put(key);
                buf.put((byte) a.dataType().ordinal()).put((byte) a.rank());
                for (long d : a.shape()) {
                    buf.putLong(d);
                }
                INDArray c = a.isView() || a.ordering() != 'c' ? a.dup('c') : a;
                ByteBuffer data = c.data().asNio().order(ByteOrder.nativeOrder());
                int width = a.dataType().width();
                long offset = c.offset() * width;
                byte[] raw = new byte[Math.toIntExact(a.length() * width)];
                data.position(Math.toIntExact(offset));
                data.get(raw);
                if (ByteOrder.nativeOrder() != ByteOrder.LITTLE_ENDIAN) {
                    throw new UnsupportedOperationException("session state on a " + ByteOrder.nativeOrder() + " machine,"
                            + " expected LITTLE_ENDIAN (fix: serve sessions on a little-endian machine, e.g. x86-64 or"
                            + " AArch64)");
                }
                buf.put(raw);
            }
        }
        return buf.array();
    }

    /**
     * Captures the network's state and stores it as session {@code id}'s.
     *
     * @param cache the cache
     * @param id    the session's id
     * @param net   the network, after its step
     */
    public static void save(SessionCache cache, String id, MultiLayerNetwork net) {
        cache.put(id, MemorySegment.ofArray(capture(net)));
    }

    /**
     * Loads session {@code id}'s state into the network (clearing what it had).
     *
     * @param cache the cache
     * @param id    the session's id
     * @param net   the network, before the session's next step
     * @return false when the session is unknown (the network's state is then cleared: a new session)
     * @throws SessionExpiredException when the session was evicted or lost
     */
    public static boolean load(SessionCache cache, String id, MultiLayerNetwork net) {
        byte[] bytes = cache.get(id);
        if (bytes == null) {
            net.rnnClearPreviousState();
            return false;
        }
        restore(net, bytes);
        return true;
    }

    /**
     * Sets the network's state from {@link #capture}'s bytes.
     *
     * @param net   the network (the same configuration as the one captured)
     * @param bytes the bytes
     * @throws IllegalArgumentException when the bytes do not fit the network's layers
     */
    public static void restore(MultiLayerNetwork net, byte[] bytes) {
        ByteBuffer buf = ByteBuffer.wrap(bytes).order(ByteOrder.LITTLE_ENDIAN);
        net.rnnClearPreviousState();
        int layers = buf.getInt();
        for (int l = 0; l < layers; l++) {
            int index = buf.getInt();
            if (index < 0 || index >= net.getnLayers() || !(net.getLayer(index) instanceof RecurrentLayer)) {
                throw new IllegalArgumentException("session state names layer=" + index + ", which is not a recurrent"
                        + " layer of this network (layers=" + net.getnLayers() + "): the state was captured from"
                        + " another network configuration (fix: restore states only into a network of the configuration"
                        + " that captured them, or start the session again)");
            }
            int entries = buf.getInt();
            Map<String, INDArray> m = new HashMap<>();
            for (int e = 0; e < entries; e++) {
                byte[] key = new byte[buf.getShort()];
                buf.get(key);
                DataType type = DataType.values()[buf.get()];
                long[] shape = new long[buf.get()];
                for (int d = 0; d < shape.length; d++) {
                    shape[d] = buf.getLong();
                }
                INDArray a = Nd4j.create(type, shape, 'c');
                int n = Math.toIntExact(a.length() * type.width());
                ByteBuffer dst = a.data().asNio().order(ByteOrder.nativeOrder());
                dst.position(0);
                dst.put(buf.array(), buf.position(), n);
                buf.position(buf.position() + n);
                m.put(new String(key, StandardCharsets.UTF_8), a);
            }
            if (!m.isEmpty()) {
                net.rnnSetPreviousState(index, m);
            }
        }
        if (buf.hasRemaining()) {
            throw new IllegalArgumentException("session state has bytes=" + buf.remaining() + " after its last layer"
                    + " (expected none): not a state written by RnnSessionState.capture (fix: pass the bytes capture"
                    + " returned, unchanged, or start the session again)");
        }
    }
}
