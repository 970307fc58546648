package org.symmem4j.serving.session;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.junit.jupiter.api.Test;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.group.InJvmWorld;

/**
 * Sessions of a recurrent network whose steps alternate between three workers (threads, each with its own copy of
 * the network) through the session cache produce, bitwise, what one network stepping each session alone does.
 */
class RnnSessionStateTest {

    private static final GroupOptions OPTIONS = GroupOptions.defaults().withTimeout(Duration.ofSeconds(60));
    static final int SESSIONS = 4;
    static final int STEPS = 9;

    /** What one network stepping each session alone outputs: [session][step]. */
    static float[][][] reference(long seed) {
        float[][][] out = new float[SESSIONS][STEPS][];
        MultiLayerNetwork net = RnnNets.net(seed);
        for (int s = 0; s < SESSIONS; s++) {
            net.rnnClearPreviousState();
            for (int t = 0; t < STEPS; t++) {
                out[s][t] = RnnNets.step(net, s, t);
            }
        }
        return out;
    }

    @Test
    void stepsAlternatingBetweenWorkersMatchOneNetworkBitwise() {
        float[][][] expected = reference(42);
        Map<String, float[]> got = new ConcurrentHashMap<>();
        InJvmWorld.runOnEveryRank(3, OPTIONS, group -> {
            MultiLayerNetwork net = RnnNets.net(42);
            try (SessionCache cache = SessionCache.create(group, SessionCache.Settings.of(256, 64 * 1024, 16, 4096))) {
                for (int t = 0; t < STEPS; t++) {
                    for (int s = 0; s < SESSIONS; s++) {
                        if ((s + t) % 3 == group.rank()) { // a different worker at every step
                            boolean known = RnnSessionState.load(cache, "session-" + s, net);
                            assertEquals(t > 0, known, "session " + s + " at step " + t);
                            got.put(s + "/" + t, RnnNets.step(net, s, t));
                            RnnSessionState.save(cache, "session-" + s, net);
                        }
                    }
                    group.allGatherBytes("step-" + t, new byte[0]);
                }
            }
            return null;
        });
        for (int s = 0; s < SESSIONS; s++) {
            for (int t = 0; t < STEPS; t++) {
                assertArrayEquals(expected[s][t], got.get(s + "/" + t), "session " + s + " step " + t);
            }
        }
    }

    @Test
    void captureAndRestoreRoundTripAndRefuseAnotherNetwork() {
        MultiLayerNetwork a = RnnNets.net(7);
        byte[] empty = RnnSessionState.capture(a);
        RnnNets.step(a, 0, 0);
        RnnNets.step(a, 0, 1);
        byte[] state = RnnSessionState.capture(a);
        float[] next = RnnNets.step(a, 0, 2);

        MultiLayerNetwork b = RnnNets.net(7);
        RnnSessionState.restore(b, state);
        assertArrayEquals(state, RnnSessionState.capture(b));
        assertArrayEquals(next, RnnNets.step(b, 0, 2));
        RnnSessionState.restore(b, empty);
        MultiLayerNetwork fresh = RnnNets.net(7);
        assertArrayEquals(RnnNets.step(fresh, 0, 0), RnnNets.step(b, 0, 0), "an empty state starts afresh");

        byte[] wrongLayer = state.clone();
        wrongLayer[4] = 2; // the first layer entry names layer 2: the output layer, not recurrent
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> RnnSessionState.restore(b, wrongLayer));
        assertTrue(e.getMessage().contains("layer=2"), e.getMessage());
        assertFalse(e.getMessage().isEmpty());
    }
}
