package org.symmem4j.serving.speculative;

import java.util.Objects;

import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;

/**
 * Greedy speculative decoding with recurrent token networks: a small draft network proposes {@code k} tokens one
 * at a time; the target network verifies them in one pass (it is fed its pending token and the {@code k}
 * proposals as one sequence, from its stored state); the longest prefix of proposals that match the target's own
 * greedy choices is accepted, plus the target's token after it. The output is, token for token, what
 * {@link Tokens#greedy} gives with the target alone (up to the rounding of a sequence pass against single steps,
 * which can only matter where two tokens' probabilities tie to the last bit).
 *
 * <p>A rejected speculation rolls both networks back: each restores the state it captured at the round's start
 * ({@link org.symmem4j.serving.session.RnnSessionState}) and keeps the accepted tokens to feed at the start of its
 * next call, so a round costs the target one call whatever is accepted.
 *
 * <p>This class runs both networks on the calling thread; {@link SpeculativePair} runs them as two ranks that hand
 * proposals and verdicts through ring buffers. One decoder decodes one stream at a time.
 */
public final class SpeculativeDecoder {

    /**
     * What a decode produced.
     *
     * @param tokens      the generated tokens
     * @param rounds      draft-and-verify rounds
     * @param proposed    tokens the draft proposed
     * @param accepted    proposals the target accepted
     * @param targetCalls {@code rnnTimeStep} calls of the target (the prompt's included)
     * @param draftCalls  {@code rnnTimeStep} calls of the draft (the prompt's included)
     */
    public record Result(int[] tokens, int rounds, long proposed, long accepted, long targetCalls, long draftCalls) {

        /** {@return accepted / proposed, 0 when nothing was proposed} */
        public double acceptanceRate() {
            return proposed == 0 ? 0 : (double) accepted / proposed;
        }

        /** {@return generated tokens per target call after the prompt's} */
        public double tokensPerRound() {
            return rounds == 0 ? 0 : (double) tokens.length / rounds;
        }

        @Override
        public String toString() {
            return "Result[tokens=" + tokens.length + ", rounds=" + rounds + ", acceptance="
                    + String.format("%.3f", acceptanceRate()) + ", targetCalls=" + targetCalls + ", draftCalls="
                    + draftCalls + "]";
        }
    }

    /** The target's answer to one round's proposals. */
    record Verdict(int accepted, int next) {
    }

    private final int vocab;
    private final int k;
    private final TokenStream target;
    private final TokenStream draft;

    /**
     * @param target the target network (one-hot tokens in, next-token distribution out)
     * @param draft  the draft network, over the same vocabulary
     * @param k      proposals per round, at least 1
     * @throws IllegalArgumentException for a bad k or networks over different vocabularies
     */
    public SpeculativeDecoder(MultiLayerNetwork target, MultiLayerNetwork draft, int k) {
        Objects.requireNonNull(target, "target");
        Objects.requireNonNull(draft, "draft");
        this.vocab = Tokens.vocabOf(target, "target");
        int draftVocab = Tokens.vocabOf(draft, "draft");
        if (draftVocab != vocab) {
            throw new IllegalArgumentException("draft vocabulary=" + draftVocab + " expected the target's=" + vocab
                    + " (fix: train the draft on the target's vocabulary)");
        }
        this.k = checkK(k);
        this.target = new TokenStream(target, vocab);
        this.draft = new TokenStream(draft, vocab);
    }

    static int checkK(int k) {
        if (k < 1 || k > 64) {
            throw new IllegalArgumentException("speculative k=" + k + " expected 1..64 proposals per round"
                    + " (fix: pass e.g. 4)");
        }
        return k;
    }

    /**
     * Decodes {@code count} tokens after {@code prompt}.
     *
     * @param prompt the prompt, at least one token, each in the vocabulary
     * @param count  tokens to generate
     * @return the tokens and counts
     */
    public Result decode(int[] prompt, int count) {
        Tokens.checkPrompt(prompt, count);
        Tokens.oneHot(prompt, vocab); // refuses a token outside the vocabulary before any state changes
        long targetBefore = target.calls();
        long draftBefore = draft.calls();
        target.start(prompt);
        draft.start(prompt);
        int[] out = new int[count];
        int n = 0;
        int rounds = 0;
        long proposed = 0;
        long accepted = 0;
        while (n < count) {
            int[] proposals = propose(draft, k);
            Verdict v = verify(target, proposals);
            draft.endRound(proposals, v.accepted(), v.next());
            n = emit(out, n, proposals, v);
            rounds++;
            proposed += k;
            accepted += v.accepted();
        }
        return new Result(out, rounds, proposed, accepted, target.calls() - targetBefore, draft.calls() - draftBefore);
    }

    /** The draft's side of a round: k greedy proposals, one call each. */
    static int[] propose(TokenStream draft, int k) {
        int[] d = new int[k];
        d[0] = draft.feedRound(new int[0])[0];
        for (int i = 1; i < k; i++) {
            d[i] = draft.feedOne(d[i - 1]);
        }
        return d;
    }

    /** The target's side of a round: one call over the pending token and the proposals, then the rollback. */
    static Verdict verify(TokenStream target, int[] proposals) {
        int[] best = target.feedRound(proposals);
        int m = 0;
        while (m < proposals.length && best[m] == proposals[m]) {
            m++;
        }
        Verdict v = new Verdict(m, best[m]);
        target.endRound(proposals, m, v.next());
        return v;
    }

    /** Appends the round's accepted proposals and the target's token, up to {@code out}'s length. */
    static int emit(int[] out, int n, int[] proposals, Verdict v) {
        for (int i = 0; i < v.accepted() && n < out.length; i++) {
            out[n++] = proposals[i];
        }
        if (n < out.length) {
            out[n++] = v.next();
        }
        return n;
    }

    @Override
    public String toString() {
        return "SpeculativeDecoder[vocab=" + vocab + ", k=" + k + "]";
    }
}
