package org.symmem4j.benchmarks.dl4j;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.nd4j.linalg.factory.Nd4j;
import org.symmem4j.examples.Cli;
import org.symmem4j.examples.SpeculativeDecodingExample;
import org.symmem4j.examples.SpeculativeDecodingExample.Grammar;
import org.symmem4j.serving.speculative.SpeculativeDecoder;
import org.symmem4j.serving.speculative.Tokens;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/**
 * Speculative decoding against the target alone, in the same run: trains the example's draft/target char-level
 * LSTM pair on generated text, then for every k decodes the same prompts greedily with the target alone and
 * speculatively, alternating the two per repetition, checks that the texts are identical, and prints per k the
 * acceptance rate, the median times and the speed-up (target alone / speculative), with the raw times.
 * Target of issue #34: speed-up >= 1.5 at acceptance >= 0.7.
 */
public final class SpeculativeDecodingBench {

    private SpeculativeDecodingBench() {
    }

    @Command(name = "SpeculativeDecodingBench", mixinStandardHelpOptions = true, versionProvider = Cli.Version.class,
            showDefaultValues = true, description = "Speculative decoding vs the target alone: acceptance and speed-up.")
    static final class Flags {
        @Option(names = "--k", split = ",", description = "proposals per round, comma-separated")
        int[] ks = {2, 4, 6};
        @Option(names = "--tokens", description = "characters generated per prompt")
        int tokens = 200;
        @Option(names = "--prompts", description = "prompts per repetition")
        int prompts = 3;
        @Option(names = "--repetitions", description = "timed repetitions (median reported)")
        int repetitions = 5;
        @Option(names = "--iterations", description = "training iterations of each network")
        int iterations = 150;
        @Option(names = "--dense", description = "width of the target's two dense layers")
        int dense = 512;
        @Option(names = "--seed", description = "seed")
        long seed = 1;
    }

    public static void main(String[] args) {
        Flags f = Cli.parse(new Flags(), args, flags -> {
            for (int k : flags.ks) {
                Cli.positive("--k", k);
            }
            Cli.positive("--tokens", flags.tokens);
            Cli.positive("--prompts", flags.prompts);
            Cli.positive("--repetitions", flags.repetitions);
            Cli.positive("--iterations", flags.iterations);
            Cli.positive("--dense", flags.dense);
            return flags;
        });
        Nd4j.getRandom().setSeed(f.seed);
        int v = Grammar.ALPHABET.length();
        System.out.println("# SpeculativeDecodingBench " + String.join(" ", args));
        System.out.println("# cores=" + Runtime.getRuntime().availableProcessors() + " cpu=" + MachineInfo.cpuModel());
        long t0 = System.nanoTime();
        SpeculativeDecodingExample.Pair trained = SpeculativeDecodingExample.trainPair(f.seed, f.iterations, f.dense);
        MultiLayerNetwork draft = trained.draft();
        MultiLayerNetwork target = trained.target();
        System.out.printf("# trained draft params=%d target params=%d in %.1f s%n", draft.numParams(),
                target.numParams(), (System.nanoTime() - t0) / 1e9);
        List<int[]> prompts = SpeculativeDecodingExample.prompts(f.seed, f.prompts);
        // what one call costs: the draft's single step, the target's single step and its k + 1 verification pass;
        // with acceptance a a round yields (1 - a^(k+1)) / (1 - a) tokens for k draft steps and one target pass
        int maxK = Arrays.stream(f.ks).max().orElse(1);
        double draftStep = callMicros(draft, v, 1);
        double targetStep = callMicros(target, v, 1);
        System.out.printf("# one call, median us: draft step %.1f, target step %.1f", draftStep, targetStep);
        for (int k : f.ks) {
            System.out.printf(", target pass of %d %.1f", k + 1, callMicros(target, v, k + 1));
        }
        System.out.printf("%n# (the speed-up's bound at k=%d and acceptance 1: %.2f)%n", maxK,
                (maxK + 1) * targetStep / (maxK * draftStep + callMicros(target, v, maxK + 1)));
        System.out.println("k,acceptance,tokens_per_round,target_alone_ms_median,speculative_ms_median,speedup,"
                + "target_alone_ms_raw,speculative_ms_raw");
        for (int k : f.ks) {
            SpeculativeDecoder decoder = new SpeculativeDecoder(target, draft, k);
            Tokens.greedy(target, v, prompts.getFirst(), f.tokens); // warm-up of both
            decoder.decode(prompts.getFirst(), f.tokens);
            List<Double> alone = new ArrayList<>();
            List<Double> spec = new ArrayList<>();
            long proposed = 0;
            long accepted = 0;
            long rounds = 0;
            long generated = 0;
            for (int r = 0; r < f.repetitions; r++) {
                long a = 0;
                long s = 0;
                for (int[] prompt : prompts) {
                    long t1 = System.nanoTime();
                    int[] expected = Tokens.greedy(target, v, prompt, f.tokens);
                    long t2 = System.nanoTime();
                    SpeculativeDecoder.Result res = decoder.decode(prompt, f.tokens);
                    long t3 = System.nanoTime();
                    if (!Arrays.equals(expected, res.tokens())) {
                        throw new IllegalStateException("k=" + k + ": speculative output differs from the target alone");
                    }
                    a += t2 - t1;
                    s += t3 - t2;
                    proposed += res.proposed();
                    accepted += res.accepted();
                    rounds += res.rounds();
                    generated += res.tokens().length;
                }
                alone.add(a / 1e6);
                spec.add(s / 1e6);
            }
            double ma = median(alone);
            double ms = median(spec);
            System.out.printf("%d,%.3f,%.2f,%.1f,%.1f,%.2f,%s,%s%n", k, (double) accepted / proposed,
                    (double) generated / rounds, ma, ms, ma / ms, join(alone), join(spec));
        }
    }

    /** Median microseconds of one {@code rnnTimeStep} over {@code length} tokens, from a cleared state each time. */
    private static double callMicros(MultiLayerNetwork net, int vocab, int length) {
        int[] tokens = new int[length];
        for (int i = 0; i < length; i++) {
            tokens[i] = (i * 7 + 3) % vocab;
        }
        List<Double> us = new ArrayList<>();
        for (int r = 0; r < 200; r++) {
            net.rnnClearPreviousState();
            long t0 = System.nanoTime();
            Tokens.stepGreedy(net, tokens, vocab);
            us.add((System.nanoTime() - t0) / 1e3);
        }
        net.rnnClearPreviousState();
        return median(us.subList(50, us.size()));
    }

    private static double median(List<Double> xs) {
        double[] s = xs.stream().mapToDouble(Double::doubleValue).sorted().toArray();
        return s.length % 2 == 1 ? s[s.length / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
    }

    private static String join(List<Double> xs) {
        StringBuilder b = new StringBuilder();
        for (double x : xs) {
            b.append(b.isEmpty() ? "" : " ").append(String.format("%.1f", x));
        }
        return b.toString();
    }
}
