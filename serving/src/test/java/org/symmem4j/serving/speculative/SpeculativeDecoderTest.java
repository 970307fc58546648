package org.symmem4j.serving.speculative;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;

import org.deeplearning4j.nn.conf.MultiLayerConfiguration;
import org.deeplearning4j.nn.conf.NeuralNetConfiguration;
import org.deeplearning4j.nn.conf.layers.LSTM;
import org.deeplearning4j.nn.conf.layers.RnnOutputLayer;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.junit.jupiter.api.Test;
import org.nd4j.linalg.activations.Activation;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.factory.Nd4j;
import org.nd4j.linalg.lossfunctions.LossFunctions;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.group.InJvmWorld;

/**
 * Speculative decoding's greedy output equals the target's alone, token for token, for several seeds, k values,
 * prompts and drafts: the target itself (every proposal accepted), a noisy copy of it (some accepted), an unrelated
 * network (most rejected); on one thread and as two ranks handing tokens through ring buffers.
 */
class SpeculativeDecoderTest {

    static final int VOCAB = 11;

    /**
     * Tokens decoded per stream: enough for several rounds at every k (and rejections mid-stream), few enough that
     * the class runs in seconds (one DL4J {@code rnnTimeStep} of these tiny LSTMs costs milliseconds on a loaded
     * 2-core machine, and every round makes several).
     */
    static final int TOKENS = 12;

    static MultiLayerNetwork net(long seed, int hidden, int layers) {
        NeuralNetConfiguration.ListBuilder b = new NeuralNetConfiguration.Builder().seed(seed)
                .dataType(DataType.FLOAT).list();
        int in = VOCAB;
        for (int l = 0; l < layers; l++) {
            b.layer(new LSTM.Builder().nIn(in).nOut(hidden).activation(Activation.TANH).build());
            in = hidden;
        }
        MultiLayerConfiguration conf = b.layer(new RnnOutputLayer.Builder(LossFunctions.LossFunction.MCXENT).nIn(in)
                .nOut(VOCAB).activation(Activation.SOFTMAX).build()).build();
        MultiLayerNetwork net = new MultiLayerNetwork(conf);
        net.init();
        return net;
    }

    /** A copy of {@code net} with noise of {@code scale} added to every parameter. */
    static MultiLayerNetwork noisy(MultiLayerNetwork net, double scale, long seed) {
        MultiLayerNetwork copy = net.clone();
        INDArray noise = Nd4j.randn(seed, copy.params().shape()).castTo(DataType.FLOAT).muli(scale);
        copy.params().addi(noise);
        return copy;
    }

    static int[] prompt(long seed, int length) {
        SplittableRandom r = new SplittableRandom(seed);
        int[] p = new int[length];
        for (int i = 0; i < length; i++) {
            p[i] = r.nextInt(VOCAB);
        }
        return p;
    }

    @Test
    void greedyOutputEqualsTheTargetAloneForSeedsKsPromptsAndDrafts() {
        int cases = 0;
        // seed 1 with a one-token prompt, seed 2 with an eight-token one: each seed's nets, both prompt paths
        for (long[] seedAndLength : new long[][] {{1, 1}, {2, 8}}) {
            long seed = seedAndLength[0];
            int length = (int) seedAndLength[1];
            MultiLayerNetwork target = net(seed, 16, 2);
            int[] prompt = prompt(seed * 31 + length, length);
            int[] expected = Tokens.greedy(target, VOCAB, prompt, TOKENS); // the reference, once per prompt
            List<MultiLayerNetwork> drafts = new ArrayList<>();
            drafts.add(net(seed, 16, 2)); // the target itself: every proposal accepted
            drafts.add(noisy(target, 0.05, seed)); // close to it: some accepted
            drafts.add(net(seed + 100, 8, 1)); // unrelated: most rejected
            for (int d = 0; d < drafts.size(); d++) {
                for (int k : new int[] {1, 3, 6}) {
                    SpeculativeDecoder.Result r = new SpeculativeDecoder(target, drafts.get(d), k)
                            .decode(prompt, TOKENS);
                    String what = "seed=" + seed + " draft=" + d + " k=" + k + " prompt=" + length + " " + r;
                    assertArrayEquals(expected, r.tokens(), what);
                    if (d == 0) {
                        assertEquals(1.0, r.acceptanceRate(), what);
                        assertEquals((TOKENS + k) / (k + 1), r.rounds(), what);
                    }
                    if (d == 2 && k >= 3) {
                        assertTrue(r.acceptanceRate() < 0.9, "the unrelated draft was rejected sometimes: " + what);
                    }
                    cases++;
                }
            }
        }
        assertEquals(18, cases);
    }

    @Test
    void theSameDecoderDecodesSeveralStreamsInTurn() {
        MultiLayerNetwork target = net(9, 16, 1);
        SpeculativeDecoder decoder = new SpeculativeDecoder(target, noisy(target, 0.1, 9), 4);
        for (int i = 0; i < 3; i++) {
            int[] prompt = prompt(100 + i, 5);
            assertArrayEquals(Tokens.greedy(target, VOCAB, prompt, TOKENS), decoder.decode(prompt, TOKENS).tokens());
        }
    }

    @Test
    void badInputIsRefused() {
        MultiLayerNetwork target = net(1, 8, 1);
        assertThrows(IllegalArgumentException.class, () -> new SpeculativeDecoder(target, target, 0));
        SpeculativeDecoder d = new SpeculativeDecoder(target, target, 2);
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> d.decode(new int[] {3, 11}, 5));
        assertTrue(e.getMessage().contains("token=11"), e.getMessage());
        assertThrows(IllegalArgumentException.class, () -> d.decode(new int[0], 5));
        MultiLayerConfiguration other = new NeuralNetConfiguration.Builder().list()
                .layer(new LSTM.Builder().nIn(5).nOut(4).build())
                .layer(new RnnOutputLayer.Builder(LossFunctions.LossFunction.MCXENT).nIn(4).nOut(5)
                        .activation(Activation.SOFTMAX).build()).build();
        MultiLayerNetwork small = new MultiLayerNetwork(other);
        small.init();
        IllegalArgumentException v = assertThrows(IllegalArgumentException.class,
                () -> new SpeculativeDecoder(target, small, 2));
        assertTrue(v.getMessage().contains("vocabulary=5"), v.getMessage());
    }

    @Test
    void draftAndTargetAsTwoRanksHandingTokensThroughRingsMatchTheTargetAlone() {
        GroupOptions options = GroupOptions.defaults().withTimeout(Duration.ofSeconds(60));
        MultiLayerNetwork reference = net(5, 16, 2);
        for (int k : new int[] {3}) {
            int[] prompt = prompt(77 + k, 6);
            int[] expected = Tokens.greedy(reference, VOCAB, prompt, TOKENS);
            List<SpeculativeDecoder.Result> results = InJvmWorld.runOnEveryRank(2, options, group -> {
                MultiLayerNetwork mine = group.rank() == 0 ? noisy(net(5, 16, 2), 0.05, 5) : net(5, 16, 2);
                try (SpeculativePair pair = SpeculativePair.create(group, 0, 1)) {
                    SpeculativeDecoder.Result first = pair.decode(mine, k, prompt, TOKENS);
                    SpeculativeDecoder.Result second = pair.decode(mine, k, prompt, TOKENS); // a second stream
                    assertArrayEquals(first.tokens(), second.tokens());
                    return first;
                }
            });
            assertArrayEquals(expected, results.get(0).tokens(), "draft rank, k=" + k);
            assertArrayEquals(expected, results.get(1).tokens(), "target rank, k=" + k);
            assertEquals(results.get(0).accepted(), results.get(1).accepted());
            assertEquals(results.get(0).targetCalls(), results.get(1).targetCalls());
            assertEquals(results.get(0).draftCalls(), results.get(1).draftCalls());
        }
    }

    @Test
    void ranksDisagreeingOnKFailBothWithTheReason() {
        GroupOptions options = GroupOptions.defaults().withTimeout(Duration.ofSeconds(30));
        List<String> messages = InJvmWorld.runOnEveryRank(2, options, group -> {
            MultiLayerNetwork mine = net(5, 8, 1);
            try (SpeculativePair pair = SpeculativePair.create(group, 0, 1)) {
                IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                        () -> pair.decode(mine, group.rank() == 0 ? 3 : 4, new int[] {1, 2}, 10));
                return e.getMessage();
            }
        });
        for (String m : messages) {
            assertTrue(m.contains("k=3") && m.contains("k=4"), m);
        }
    }
}
