package org.symmem4j.serving.speculative;

import java.util.Arrays;

import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.symmem4j.serving.session.RnnSessionState;

/**
 * One network's position in a decoded stream, for speculative decoding: its stored state has consumed a prefix of
 * the committed tokens, {@code replay} holds committed tokens not fed yet, and {@code pending} is the last
 * committed token (the next call feeds {@code replay ++ [pending] ++ ...}). Rolling back a rejected speculation
 * restores the state captured before the round and adds the accepted tokens to {@code replay}, so the next round
 * feeds them in its one call instead of a call of their own.
 */
final class TokenStream {

    /** Past this many replay tokens, a rollback feeds them at once (bounds the next call's length). */
    static final int MAX_REPLAY = 32;

    private final MultiLayerNetwork net;
    private final int vocab;
    private int[] replay = new int[0];
    private int pending;
    private byte[] snapshot;
    private int[] fedThisRound = new int[0];
    /** Tokens of this round before its proposals: the replay and the pending token. */
    private int roundPrefix;
    private long calls;

    TokenStream(MultiLayerNetwork net, int vocab) {
        this.net = net;
        this.vocab = vocab;
    }

    /** Clears the state and feeds the prompt but its last token (as {@link Tokens#greedy} does). */
    void start(int[] prompt) {
        net.rnnClearPreviousState();
        if (prompt.length > 1) {
            net.rnnTimeStep(Tokens.oneHot(Arrays.copyOf(prompt, prompt.length - 1), vocab));
            calls++;
        }
        replay = new int[0];
        pending = prompt[prompt.length - 1];
    }

    /**
     * Starts a round: captures the state, then feeds {@code replay ++ [pending] ++ extra} in one call.
     *
     * @return the greedy next token after each of {@code [pending] ++ extra} (length 1 + extra.length)
     */
    int[] feedRound(int[] extra) {
        snapshot = RnnSessionState.capture(net);
        int[] in = new int[replay.length + 1 + extra.length];
        System.arraycopy(replay, 0, in, 0, replay.length);
        in[replay.length] = pending;
        System.arraycopy(extra, 0, in, replay.length + 1, extra.length);
        fedThisRound = in;
        roundPrefix = replay.length + 1;
        int[] best = Tokens.stepGreedy(net, in, vocab);
        calls++;
        return Arrays.copyOfRange(best, replay.length, best.length);
    }

    /** Feeds one more token within the round (the draft's autoregressive steps). */
    int feedOne(int token) {
        int[] in = Arrays.copyOf(fedThisRound, fedThisRound.length + 1);
        in[fedThisRound.length] = token;
        fedThisRound = in;
        calls++;
        return Tokens.stepGreedy(net, new int[] {token}, vocab)[0];
    }

    /**
     * Ends the round: {@code accepted} of the round's {@code proposals} were accepted and {@code next} is the new
     * pending token, so the state must stand after the round's replay, its pending token and the accepted
     * proposals. When exactly those were fed, nothing is done; when more were fed (rejected proposals), the state
     * captured at the round's start is restored and the kept tokens go to the replay; when fewer were fed (the
     * draft never feeds its last proposal), the missing ones go to the replay.
     */
    void endRound(int[] proposals, int accepted, int next) {
        int[] kept = new int[roundPrefix + accepted];
        System.arraycopy(fedThisRound, 0, kept, 0, Math.min(roundPrefix, fedThisRound.length));
        System.arraycopy(proposals, 0, kept, roundPrefix, accepted);
        if (kept.length < fedThisRound.length) {
            RnnSessionState.restore(net, snapshot);
            replay = kept;
            if (replay.length > MAX_REPLAY) {
                net.rnnTimeStep(Tokens.oneHot(replay, vocab));
                calls++;
                replay = new int[0];
            }
        } else {
            replay = Arrays.copyOfRange(kept, fedThisRound.length, kept.length);
        }
        pending = next;
        snapshot = null;
    }

    int replayLength() {
        return replay.length;
    }

    int fedThisRound() {
        return fedThisRound.length;
    }

    long calls() {
        return calls;
    }
}
