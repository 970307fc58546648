package org.symmem4j.serving.speculative;

import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.factory.Nd4j;

/**
 * Token networks as the decoders use them: a recurrent {@link MultiLayerNetwork} whose input is a one-hot token
 * ({@code [1, vocab, time]}) and whose output is a distribution over the next token ({@code [1, vocab, time]}),
 * such as a char-level LSTM with an {@code RnnOutputLayer}.
 */
public final class Tokens {

    private Tokens() {
    }

    /**
     * One-hot inputs of a token sequence.
     *
     * @param tokens the tokens, each 0..vocab-1
     * @param vocab  the vocabulary size
     * @return {@code [1, vocab, tokens.length]}
     * @throws IllegalArgumentException for a token outside the vocabulary
     */
    public static INDArray oneHot(int[] tokens, int vocab) {
        float[] v = new float[vocab * tokens.length];
        for (int t = 0; t < tokens.length; t++) {
            if (tokens[t] < 0 || tokens[t] >= vocab) {
                throw new IllegalArgumentException("token=" + tokens[t] + " at position " + t + " expected 0.."
                        + (vocab - 1) + " (the network's vocabulary; fix: encode the tokens with that vocabulary)");
            }
            v[tokens[t] * tokens.length + t] = 1f;
        }
        return Nd4j.create(v, new long[] {1, vocab, tokens.length}, DataType.FLOAT);
    }

    /**
     * Feeds {@code tokens} through {@code net} from its stored state, in one {@code rnnTimeStep} call, and returns the
     * greedy next token after each position (the first index of the largest probability).
     *
     * @param net    the network
     * @param tokens the tokens fed, at least one
     * @param vocab  the vocabulary size
     * @return the argmax at every position
     */
    public static int[] stepGreedy(MultiLayerNetwork net, int[] tokens, int vocab) {
        INDArray out = net.rnnTimeStep(oneHot(tokens, vocab));
        float[] p = out.dup('c').data().asFloat();
        int steps = tokens.length;
        if (p.length != vocab * steps) {
            throw new IllegalArgumentException("network output has values=" + p.length + " expected vocab=" + vocab
                    + " x steps=" + steps + " (a [1, vocab, time] distribution over the next token; fix: end the network"
                    + " with an RnnOutputLayer of nOut=vocab and a softmax)");
        }
        int[] best = new int[steps];
        for (int t = 0; t < steps; t++) {
            int arg = 0;
            for (int v = 1; v < vocab; v++) {
                if (p[v * steps + t] > p[arg * steps + t]) {
                    arg = v;
                }
            }
            best[t] = arg;
        }
        return best;
    }

    /**
     * Greedy decoding with one network alone, one token per call: the reference speculative decoding must equal.
     * Clears the network's state, feeds all of the prompt but its last token in one call, then feeds one token at
     * a time.
     *
     * @param net    the network
     * @param vocab  the vocabulary size
     * @param prompt the prompt, at least one token
     * @param count  tokens to generate
     * @return the generated tokens
     */
    public static int[] greedy(MultiLayerNetwork net, int vocab, int[] prompt, int count) {
        checkPrompt(prompt, count);
        net.rnnClearPreviousState();
        if (prompt.length > 1) {
            net.rnnTimeStep(oneHot(java.util.Arrays.copyOf(prompt, prompt.length - 1), vocab));
        }
        int[] out = new int[count];
        int pending = prompt[prompt.length - 1];
        for (int i = 0; i < count; i++) {
            pending = stepGreedy(net, new int[] {pending}, vocab)[0];
            out[i] = pending;
        }
        return out;
    }

    static void checkPrompt(int[] prompt, int count) {
        if (prompt == null || prompt.length == 0) {
            throw new IllegalArgumentException("prompt has no token (expected at least one; fix: start the"
                    + " prompt with at least one token)");
        }
        if (count < 0) {
            throw new IllegalArgumentException("count=" + count + " expected >= 0 (fix: pass how many tokens to"
                    + " generate, 0 or more)");
        }
    }

    static int vocabOf(MultiLayerNetwork net, String role) {
        long in = net.layerInputSize(0);
        long out = net.layerSize(net.getnLayers() - 1);
        if (in != out) {
            throw new IllegalArgumentException(role + " network takes inputs=" + in + " and gives outputs=" + out
                    + " expected the same vocabulary size for both (one-hot tokens in, next-token distribution out;"
                    + " fix: give the network nIn equal to its output layer's nOut)");
        }
        return (int) in;
    }
}
