package org.symmem4j.serving;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.foreign.MemorySegment;
import java.util.ArrayDeque;
import java.util.Deque;
import java.util.Random;

import org.junit.jupiter.api.Test;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.symmem4j.serving.weights.Nets;

/**
 * A batch carries its version's configuration once per worker: the BATCH message with and without it, and the
 * router's mirror of a worker's configuration cache staying in step with the worker's own through refused offers,
 * evictions and a configuration that changes under the same version.
 */
class WireConfigsTest {

    private static final WireConfigs.Config MLP = new WireConfigs.Config("MULTI_LAYER", Nets.mlp(1).toJson());

    @Test
    void aBatchMessageCarriesTheConfigurationOnlyWhenAsked() {
        INDArray x = Nets.features(1, 3, 8);
        byte[] carrying = BatchWire.batch(7, 2, "m", MLP, x);
        byte[] referring = BatchWire.batch(7, 2, "m", null, x);
        assertEquals(8 + MLP.kind().length() + MLP.json().length(), carrying.length - referring.length);
        assertTrue(MLP.json().length() > 1000, "the configuration is what the cache saves: " + MLP.json().length());

        BatchWire.Batch a = BatchWire.readBatch(MemorySegment.ofArray(carrying), 0, carrying.length);
        assertEquals(7, a.id());
        assertEquals(2, a.version());
        assertEquals("m", a.model());
        assertEquals(MLP, a.config());
        assertEquals(x, a.features());
        BatchWire.Batch b = BatchWire.readBatch(MemorySegment.ofArray(referring), 0, referring.length);
        assertNull(b.config());
        assertEquals(x, b.features());
    }

    /** Router and worker through a simulated ring that refuses some offers; the worker checks every configuration. */
    @Test
    void theMirrorStaysInStepThroughRefusedOffersAndEvictions() {
        int capacity = 3;
        WireConfigs mirror = new WireConfigs(capacity);
        WireConfigs worker = new WireConfigs(capacity);
        Deque<BatchWire.Batch> ring = new ArrayDeque<>();
        Random random = new Random(42);
        WireConfigs.Config[] configs = new WireConfigs.Config[6];
        for (int v = 0; v < configs.length; v++) {
            configs[v] = new WireConfigs.Config("MULTI_LAYER", Nets.mlp(v).toJson());
        }
        INDArray x = Nets.features(2, 1, 8);
        int carried = 0;
        int sent = 0;
        for (int i = 0; i < 4000; i++) {
            int v = random.nextInt(10) < 7 ? random.nextInt(2) : random.nextInt(configs.length); // mostly 2 hot ones
            String key = "m@" + v;
            boolean carry = mirror.mustCarry(key, configs[v]);
            if (ring.size() < 5 && random.nextInt(4) != 0) { // the ring takes it
                byte[] m = BatchWire.batch(i, v, "m", carry ? configs[v] : null, x);
                ring.add(BatchWire.readBatch(MemorySegment.ofArray(m), 0, m.length));
                mirror.sent(key, configs[v], carry);
                carried += carry ? 1 : 0;
                sent++;
            }
            while (!ring.isEmpty() && random.nextBoolean()) { // the worker reads, later
                BatchWire.Batch b = ring.poll();
                assertEquals(configs[(int) b.version()], worker.received("m@" + b.version(), b.config()),
                        "batch " + b.id());
            }
        }
        while (!ring.isEmpty()) {
            BatchWire.Batch b = ring.poll();
            assertEquals(configs[(int) b.version()], worker.received("m@" + b.version(), b.config()));
        }
        assertEquals(capacity, worker.size());
        assertEquals(capacity, mirror.size());
        assertTrue(carried > configs.length, "evictions make some versions travel again: carried=" + carried);
        assertTrue(carried < sent / 4, "most batches refer to a held configuration: carried=" + carried + " of " + sent);
    }

    @Test
    void aDifferentConfigurationUnderTheSameVersionIsCarriedAgainAndReplacesTheHeldOne() {
        WireConfigs mirror = new WireConfigs();
        WireConfigs worker = new WireConfigs();
        assertTrue(mirror.mustCarry("m@1", MLP));
        mirror.sent("m@1", MLP, true);
        assertSame(MLP, worker.received("m@1", MLP));
        assertTrue(!mirror.mustCarry("m@1", new WireConfigs.Config(MLP.kind(), new String(MLP.json()))),
                "an equal configuration is held");
        WireConfigs.Config other = new WireConfigs.Config("MULTI_LAYER", Nets.mlp(9).toJson());
        assertTrue(mirror.mustCarry("m@1", other), "a new router counting versions from 1 again");
        mirror.sent("m@1", other, true);
        worker.received("m@1", other);
        assertSame(other, worker.received("m@1", null));
        mirror.clear();
        assertTrue(mirror.mustCarry("m@1", other), "a worker that died (or started anew) holds nothing");
    }

    @Test
    void aBatchReferringToAConfigurationTheWorkerDoesNotHoldIsAnInternalError() {
        IllegalStateException e = assertThrows(IllegalStateException.class,
                () -> new WireConfigs().received("m@3", null));
        assertTrue(e.getMessage().contains("m@3"), e.getMessage());
        assertThrows(IllegalArgumentException.class, () -> new WireConfigs(0));
    }
}
