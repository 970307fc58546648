package org.symmem4j.examples;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.SplittableRandom;

import org.deeplearning4j.nn.conf.MultiLayerConfiguration;
import org.deeplearning4j.nn.conf.NeuralNetConfiguration;
import org.deeplearning4j.nn.conf.layers.DenseLayer;
import org.deeplearning4j.nn.conf.layers.LSTM;
import org.deeplearning4j.nn.conf.layers.RnnOutputLayer;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.nd4j.linalg.activations.Activation;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.dataset.DataSet;
import org.nd4j.linalg.factory.Nd4j;
import org.nd4j.linalg.learning.config.Adam;
import org.nd4j.linalg.lossfunctions.LossFunctions;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.group.InJvmWorld;
import org.symmem4j.serving.speculative.SpeculativeDecoder;
import org.symmem4j.serving.speculative.SpeculativePair;
import org.symmem4j.serving.speculative.Tokens;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/**
 * Speculative decoding of a char-level LSTM: trains a small draft and a larger target network on text from a
 * small stochastic grammar (generated here, no download), then decodes with the target alone and speculatively
 * (the draft proposes k characters, the target verifies them in one pass), checks that both give the same text,
 * and prints the acceptance rate and the speed-up. The draft and the target run as two ranks (threads) that hand
 * proposals and verdicts through ring buffers.
 *
 * <pre>
 *   bin/speculative-decoding-example [--k 4] [--tokens 400] [--iterations 120]
 * </pre>
 */
public final class SpeculativeDecodingExample {

    private SpeculativeDecodingExample() {
    }

    @Command(name = "SpeculativeDecodingExample", mixinStandardHelpOptions = true, versionProvider = Cli.Version.class,
            showDefaultValues = true, description = "Trains a draft/target char-level LSTM pair on generated text,"
            + " then compares greedy decoding with the target alone and speculative decoding (same text, speed-up).")
    static final class Flags {
        @Option(names = "--k", paramLabel = "K", description = "characters the draft proposes per round")
        int k = 4;
        @Option(names = "--tokens", paramLabel = "N", description = "characters to generate per prompt")
        int tokens = 300;
        @Option(names = "--iterations", paramLabel = "I", description = "training iterations of each network")
        int iterations = 150;
        @Option(names = "--seed", description = "seed of the grammar, the networks and the prompts")
        long seed = 1;
    }

    /** The text: sentences of a small stochastic grammar. */
    public static final class Grammar {
        private static final String[] DET = {"the", "a", "every", "my"};
        private static final String[] ADJ = {"small", "red", "quiet", "old", "happy"};
        private static final String[] NOUN = {"cat", "dog", "bird", "farmer", "river", "house"};
        private static final String[] VERB = {"sees", "likes", "finds", "follows", "paints"};
        private static final String[] PREP = {"near", "under", "behind"};
        /** The characters, the vocabulary: one token each. */
        public static final String ALPHABET = " .abcdefghijklmnopqrstuvwxyz";

        private final SplittableRandom rnd;

        public Grammar(long seed) {
            this.rnd = new SplittableRandom(seed);
        }

        private String pick(String[] words) {
            return words[rnd.nextInt(words.length)];
        }

        private String nounPhrase() {
            return pick(DET) + " " + (rnd.nextInt(3) == 0 ? pick(ADJ) + " " : "") + pick(NOUN);
        }

        /** {@return one sentence, with a trailing space} */
        public String sentence() {
            String s = nounPhrase() + " " + pick(VERB) + " " + nounPhrase();
            if (rnd.nextInt(3) == 0) {
                s += " " + pick(PREP) + " " + nounPhrase();
            }
            return s + ". ";
        }

        /** {@return at least {@code chars} characters of sentences} */
        public String text(int chars) {
            StringBuilder b = new StringBuilder();
            while (b.length() < chars) {
                b.append(sentence());
            }
            return b.substring(0, chars);
        }

        public static int[] encode(String s) {
            int[] t = new int[s.length()];
            for (int i = 0; i < t.length; i++) {
                t[i] = ALPHABET.indexOf(s.charAt(i));
                if (t[i] < 0) {
                    throw new IllegalArgumentException("character '" + s.charAt(i) + "' is not in the alphabet");
                }
            }
            return t;
        }

        public static String decode(int[] tokens) {
            StringBuilder b = new StringBuilder();
            for (int t : tokens) {
                b.append(ALPHABET.charAt(t));
            }
            return b.toString();
        }
    }

    /** The small draft: one LSTM of 48 units. */
    public static MultiLayerNetwork draft(long seed) {
        return build(seed, 48, 0);
    }

    /**
     * The target: an LSTM of 128 units, then two wide per-character dense layers (most of its weights), whose
     * single-character steps read every weight for one character, while a verification pass reads them once for
     * k + 1 characters.
     */
    public static MultiLayerNetwork target(long seed, int dense) {
        return build(seed, 128, dense);
    }

    private static MultiLayerNetwork build(long seed, int hidden, int dense) {
        int v = Grammar.ALPHABET.length();
        NeuralNetConfiguration.ListBuilder b = new NeuralNetConfiguration.Builder().seed(seed)
                .dataType(DataType.FLOAT).updater(new Adam(0.01)).list()
                .layer(new LSTM.Builder().nIn(v).nOut(hidden).activation(Activation.TANH).build());
        int in = hidden;
        if (dense > 0) {
            b.layer(new DenseLayer.Builder().nIn(hidden).nOut(dense).activation(Activation.RELU).build());
            b.layer(new DenseLayer.Builder().nIn(dense).nOut(dense).activation(Activation.RELU).build());
            in = dense;
        }
        MultiLayerConfiguration conf = b.layer(new RnnOutputLayer.Builder(LossFunctions.LossFunction.MCXENT).nIn(in)
                        .nOut(v).activation(Activation.SOFTMAX).build())
                .setInputType(org.deeplearning4j.nn.conf.inputs.InputType.recurrent(v)).build();
        MultiLayerNetwork net = new MultiLayerNetwork(conf);
        net.init();
        return net;
    }

    /** A trained draft and target, over {@link Grammar#ALPHABET}. */
    public record Pair(MultiLayerNetwork draft, MultiLayerNetwork target) {
    }

    /**
     * Trains the target on the text, then the draft on the target's own greedy choices over the same kind of
     * windows (distillation, as DistillSpec does for speculative decoding): speculative decoding accepts a proposal
     * exactly when it is the target's greedy token, so a draft taught those tokens — rather than the text's, where
     * the grammar's random choices leave near-ties that two independently trained networks break differently — is
     * accepted far more often, and the output stays the target's, whatever the draft learnt.
     *
     * @param dense width of the target's two dense layers
     */
    public static Pair trainPair(long seed, int iterations, int dense) {
        MultiLayerNetwork target = target(seed + 1, dense);
        train(target, seed, iterations, 16, 48);
        MultiLayerNetwork draft = draft(seed);
        distill(draft, target, seed + 7, iterations, 32, 48);
        return new Pair(draft, target);
    }

    /** Trains on random windows of generated text: next-character prediction. */
    public static void train(MultiLayerNetwork net, long seed, int iterations, int batch, int length) {
        Windows windows = new Windows(seed, batch, length);
        for (int it = 0; it < iterations; it++) {
            INDArray[] xy = windows.next();
            net.fit(new DataSet(xy[0], xy[1]));
        }
    }

    /**
     * Trains {@code student} to predict {@code teacher}'s greedy next character (its argmax at every position of
     * random windows of generated text, the teacher's state starting empty at each window as the student's does).
     */
    public static void distill(MultiLayerNetwork student, MultiLayerNetwork teacher, long seed, int iterations,
            int batch, int length) {
        int v = Grammar.ALPHABET.length();
        Windows windows = new Windows(seed, batch, length);
        for (int it = 0; it < iterations; it++) {
            INDArray x = windows.next()[0];
            INDArray best = teacher.output(x).argMax(1); // [batch, length]: the teacher's greedy token
            float[] y = new float[batch * v * length];
            for (int b = 0; b < batch; b++) {
                for (int t = 0; t < length; t++) {
                    y[(b * v + best.getInt(b, t)) * length + t] = 1f;
                }
            }
            student.fit(new DataSet(x, Nd4j.create(y, new long[] {batch, v, length}, 'c')));
        }
    }

    /** Random windows of generated text, one-hot as [batch, vocabulary, length], with next-character labels. */
    private static final class Windows {
        private final int[] text;
        private final SplittableRandom rnd;
        private final int batch;
        private final int length;

        Windows(long seed, int batch, int length) {
            this.text = Grammar.encode(new Grammar(seed).text(200_000));
            this.rnd = new SplittableRandom(seed + 1);
            this.batch = batch;
            this.length = length;
        }

        INDArray[] next() {
            int v = Grammar.ALPHABET.length();
            float[] x = new float[batch * v * length];
            float[] y = new float[batch * v * length];
            for (int b = 0; b < batch; b++) {
                int start = rnd.nextInt(text.length - length - 1);
                for (int t = 0; t < length; t++) {
                    x[(b * v + text[start + t]) * length + t] = 1f;
                    y[(b * v + text[start + t + 1]) * length + t] = 1f;
                }
            }
            return new INDArray[] {Nd4j.create(x, new long[] {batch, v, length}, 'c'),
                    Nd4j.create(y, new long[] {batch, v, length}, 'c')};
        }
    }

    /** Prompts: the starts of fresh sentences. */
    public static List<int[]> prompts(long seed, int count) {
        Grammar g = new Grammar(seed + 1000);
        List<int[]> p = new ArrayList<>();
        for (int i = 0; i < count; i++) {
            String s = g.sentence();
            p.add(Grammar.encode(s.substring(0, Math.min(s.length(), 12))));
        }
        return p;
    }

    public static void main(String[] args) {
        Flags f = Cli.parse(new Flags(), args, flags -> {
            Cli.positive("--k", flags.k);
            Cli.positive("--tokens", flags.tokens);
            Cli.positive("--iterations", flags.iterations);
            return flags;
        });
        Nd4j.getRandom().setSeed(f.seed);
        int v = Grammar.ALPHABET.length();
        long t0 = System.nanoTime();
        Pair trained = trainPair(f.seed, f.iterations, 512);
        MultiLayerNetwork draft = trained.draft();
        MultiLayerNetwork target = trained.target();
        System.out.printf("trained draft (%,d parameters) and target (%,d parameters) in %.1f s%n",
                draft.numParams(), target.numParams(), (System.nanoTime() - t0) / 1e9);

        List<int[]> prompts = prompts(f.seed, 3);
        SpeculativeDecoder decoder = new SpeculativeDecoder(target, draft, f.k);
        Tokens.greedy(target, v, prompts.getFirst(), 50); // warm-up
        decoder.decode(prompts.getFirst(), 50);
        long alone = 0;
        long spec = 0;
        long proposed = 0;
        long accepted = 0;
        for (int[] prompt : prompts) {
            long a = System.nanoTime();
            int[] expected = Tokens.greedy(target, v, prompt, f.tokens);
            long b = System.nanoTime();
            SpeculativeDecoder.Result r = decoder.decode(prompt, f.tokens);
            long c = System.nanoTime();
            alone += b - a;
            spec += c - b;
            proposed += r.proposed();
            accepted += r.accepted();
            if (!Arrays.equals(expected, r.tokens())) {
                throw new IllegalStateException("speculative output differs from the target alone:\n  target: "
                        + Grammar.decode(expected) + "\n  spec:   " + Grammar.decode(r.tokens()));
            }
            System.out.println("prompt '" + Grammar.decode(prompt) + "' -> '"
                    + Grammar.decode(Arrays.copyOf(r.tokens(), Math.min(80, f.tokens))) + "...'");
        }
        System.out.printf("same text as the target alone: yes; acceptance %.3f; target alone %.1f ms, speculative"
                + " %.1f ms: speed-up %.2fx (one thread, k=%d)%n", (double) accepted / proposed, alone / 1e6, spec / 1e6,
                (double) alone / spec, f.k);

        // the same with the draft and the target as two ranks handing tokens through ring buffers
        List<int[]> pair = InJvmWorld.runOnEveryRank(2, GroupOptions.defaults(), group -> {
            try (SpeculativePair p = SpeculativePair.create(group, 0, 1)) {
                return p.decode(group.rank() == 0 ? draft : target, f.k, prompts.getFirst(), f.tokens).tokens();
            }
        });
        int[] expected = Tokens.greedy(target, v, prompts.getFirst(), f.tokens);
        if (!Arrays.equals(expected, pair.get(0)) || !Arrays.equals(expected, pair.get(1))) {
            throw new IllegalStateException("two-rank speculative output differs from the target alone");
        }
        System.out.println("two ranks (draft on rank 0, target on rank 1, ring buffers between them): same text");
    }
}
