package org.symmem4j.serving.speculative;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.Objects;

import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.symmem4j.parallel.Group;
import org.symmem4j.state.SymmetricRingBuffer;

/**
 * Speculative decoding with the draft and the target network on two ranks of a group (two threads of a JVM, or two
 * processes of a machine): the draft rank puts each round's proposals into a ring buffer in the target rank's
 * memory (put + signal: the consumer sees the record once its header is released), the target rank verifies them
 * in one pass and puts its verdict (accepted count and its own next token) into a ring in the draft rank's
 * memory. Both ranks end with the same tokens: those {@link Tokens#greedy} gives with the target alone.
 *
 * <pre>{@code
 * try (SpeculativePair pair = SpeculativePair.create(group, 0, 1)) {          // collective
 *     MultiLayerNetwork mine = group.rank() == 0 ? draft : target;
 *     SpeculativeDecoder.Result r = pair.decode(mine, 4, prompt, 200);        // on both ranks
 * }
 * }</pre>
 *
 * The rounds are the same as {@link SpeculativeDecoder}'s; only the hand-off differs. Other ranks of the group
 * take part in creating and closing the rings only.
 */
public final class SpeculativePair implements AutoCloseable {

    private static final int START = 1;
    private static final int READY = 2;
    private static final int REFUSED = 3;
    private static final int PROPOSALS = 4;
    private static final int VERDICT = 5;

    private final Group group;
    private final int draftRank;
    private final int targetRank;
    private final SymmetricRingBuffer toTarget;
    private final SymmetricRingBuffer toDraft;
    private final int[] inbox = new int[70];
    private int inboxType;
    private int inboxInts;
    private String inboxText;

    private SpeculativePair(Group group, int draftRank, int targetRank, SymmetricRingBuffer toTarget,
                            SymmetricRingBuffer toDraft) {
        this.group = group;
        this.draftRank = draftRank;
        this.targetRank = targetRank;
        this.toTarget = toTarget;
        this.toDraft = toDraft;
    }

    /**
     * Collective on every rank of {@code group}: the two rings between the draft rank and the target rank.
     *
     * @param group      this rank's group
     * @param draftRank  the rank that runs the draft network
     * @param targetRank the rank that runs the target network, not the draft rank
     * @return this rank's view; close it collectively
     */
    public static SpeculativePair create(Group group, int draftRank, int targetRank) {
        Objects.requireNonNull(group, "group");
        if (draftRank == targetRank || draftRank < 0 || targetRank < 0 || draftRank >= group.worldSize()
                || targetRank >= group.worldSize()) {
            throw new IllegalArgumentException("speculative pair draftRank=" + draftRank + " targetRank=" + targetRank
                    + " expected two different ranks of 0.." + (group.worldSize() - 1) + " (fix: pass two different"
                    + " ranks below the group's worldSize=" + group.worldSize() + ")");
        }
        SymmetricRingBuffer toTarget = SymmetricRingBuffer.oneToOne(group, draftRank, targetRank, 4096);
        try {
            SymmetricRingBuffer toDraft = SymmetricRingBuffer.oneToOne(group, targetRank, draftRank, 4096);
            return new SpeculativePair(group, draftRank, targetRank, toTarget, toDraft);
        } catch (RuntimeException e) {
            toTarget.close();
            throw e;
        }
    }

    /**
     * Decodes {@code count} tokens after {@code prompt}, on the draft rank and the target rank together (each passes
     * its own network and the same k, prompt and count; a mismatch fails both with its reason).
     *
     * @param net    the draft network on the draft rank, the target network on the target rank
     * @param k      proposals per round, 1..64
     * @param prompt the prompt
     * @param count  tokens to generate
     * @return the tokens and counts, the same on both ranks
     */
    public SpeculativeDecoder.Result decode(MultiLayerNetwork net, int k, int[] prompt, int count) {
        Objects.requireNonNull(net, "net");
        SpeculativeDecoder.checkK(k);
        Tokens.checkPrompt(prompt, count);
        boolean isDraft = group.rank() == draftRank;
        if (!isDraft && group.rank() != targetRank) {
            throw new IllegalStateException("speculative decode on rank=" + group.rank() + ": only the draft rank="
                    + draftRank + " and the target rank=" + targetRank + " decode (fix: call decode only on those two"
                    + " ranks)");
        }
        int vocab = Tokens.vocabOf(net, isDraft ? "draft" : "target");
        Tokens.oneHot(prompt, vocab);
        int promptHash = Arrays.hashCode(prompt);
        TokenStream stream = new TokenStream(net, vocab);
        long callsBefore = stream.calls();
        if (isDraft) {
            send(toTarget, START, new int[] {vocab, k, count, promptHash});
            receive(toDraft);
            if (inboxType == REFUSED) {
                throw new IllegalArgumentException(inboxText);
            }
            expect(READY);
        } else {
            receive(toTarget);
            expect(START);
            int[] theirs = Arrays.copyOf(inbox, 4);
            int[] mine = {vocab, k, count, promptHash};
            if (!Arrays.equals(theirs, mine)) {
                String why = "speculative decode: the draft rank=" + draftRank + " has vocab=" + theirs[0] + " k="
                        + theirs[1] + " count=" + theirs[2] + " prompt hash=" + theirs[3] + ", the target rank="
                        + targetRank + " vocab=" + vocab + " k=" + k + " count=" + count + " prompt hash=" + promptHash
                        + " (both ranks must pass networks over one vocabulary and the same k, prompt and count)";
                sendText(toDraft, REFUSED, why);
                throw new IllegalArgumentException(why);
            }
            send(toDraft, READY, new int[0]);
        }
        stream.start(prompt);
        int[] out = new int[count];
        int n = 0;
        int rounds = 0;
        long accepted = 0;
        long otherCalls = 0;
        while (n < count) {
            int[] proposals;
            SpeculativeDecoder.Verdict v;
            if (isDraft) {
                proposals = SpeculativeDecoder.propose(stream, k);
                int[] msg = Arrays.copyOf(proposals, k + 1);
                msg[k] = (int) (stream.calls() - callsBefore);
                send(toTarget, PROPOSALS, msg);
                receive(toDraft);
                expect(VERDICT);
                v = new SpeculativeDecoder.Verdict(inbox[0], inbox[1]);
                otherCalls = inbox[2];
                stream.endRound(proposals, v.accepted(), v.next());
            } else {
                receive(toTarget);
                expect(PROPOSALS);
                proposals = Arrays.copyOf(inbox, k);
                otherCalls = inbox[k];
                v = SpeculativeDecoder.verify(stream, proposals);
                send(toDraft, VERDICT, new int[] {v.accepted(), v.next(), (int) (stream.calls() - callsBefore)});
            }
            n = SpeculativeDecoder.emit(out, n, proposals, v);
            rounds++;
            accepted += v.accepted();
        }
        long mine = stream.calls() - callsBefore;
        return new SpeculativeDecoder.Result(out, rounds, (long) rounds * k, accepted, isDraft ? otherCalls : mine,
                isDraft ? mine : otherCalls);
    }

    private void expect(int type) {
        if (inboxType != type) {
            throw new IllegalStateException("speculative decode on rank=" + group.rank() + ": got message type="
                    + inboxType + " expected " + type + " (" + (inboxType == REFUSED ? inboxText : "the two ranks are"
                    + " not in the same round: did one rank's earlier decode fail?") + "; fix: call decode on both"
                    + " ranks with the same prompt, count and k; after a failed decode, create a new pair)");
        }
    }

    private void send(SymmetricRingBuffer ring, int type, int[] ints) {
        MemorySegment seg = MemorySegment.ofArray(ints);
        ring.put(type, seg, 0, Math.toIntExact(seg.byteSize()));
    }

    private void sendText(SymmetricRingBuffer ring, int type, String text) {
        ring.put(type, text.getBytes(StandardCharsets.UTF_8));
    }

    private void receive(SymmetricRingBuffer ring) {
        ring.take((type, buf, off, len) -> {
            inboxType = type;
            if (type == REFUSED) {
                inboxText = new String(buf.asSlice(off, len).toArray(ValueLayout.JAVA_BYTE), StandardCharsets.UTF_8);
                inboxInts = 0;
            } else {
                inboxInts = len / Integer.BYTES;
                for (int i = 0; i < inboxInts; i++) {
                    inbox[i] = buf.get(ValueLayout.JAVA_INT_UNALIGNED, off + (long) i * Integer.BYTES);
                }
            }
        }, 1);
    }

    /** Collective: frees the rings. */
    @Override
    public void close() {
        toDraft.close();
        toTarget.close();
    }
}
