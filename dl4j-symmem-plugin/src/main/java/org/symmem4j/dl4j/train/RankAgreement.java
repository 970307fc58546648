package org.symmem4j.dl4j.train;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.function.BiFunction;
import org.symmem4j.parallel.Group;

/**
 * Agreement across the ranks of a group, for trainers in group mode: every rank contributes a short text and learns
 * every other rank's, over the group's byte all-gather ({@link Group#allGatherBytes}), so that all ranks take the same
 * decision (go on, or fail naming the rank that differs) before any of them goes on.
 *
 * <p>Every method is collective: every rank of the group calls it at the same point with the same tag.
 */
public final class RankAgreement {

    private RankAgreement() {
    }

    /**
     * Every rank's {@code mine}, in rank order (UTF-8 over the group's byte all-gather).
     *
     * @param tag unique per exchange on the group (the group's all-gather keys its exchange by it)
     */
    public static List<String> allGather(Group group, String tag, String mine) {
        List<byte[]> all = group.allGatherBytes(tag, mine.getBytes(StandardCharsets.UTF_8));
        List<String> texts = new ArrayList<>(all.size());
        for (byte[] bytes : all) {
            texts.add(new String(bytes, StandardCharsets.UTF_8));
        }
        return texts;
    }

    /**
     * Every rank learns whether every rank got here without a failure of its own: a rank that had none throws
     * {@code othersFailure.apply(rank, failure text)} for the first rank that had one; a rank that had one returns
     * (its caller throws its own error).
     *
     * @param failure this rank's failure, or null
     */
    public static void failTogether(Group group, String tag, Throwable failure,
                                    BiFunction<Integer, String, ? extends RuntimeException> othersFailure) {
        List<String> all = allGather(group, tag, failure == null ? "" : failure.toString());
        if (failure != null) {
            return; // the caller throws this rank's own error
        }
        for (int r = 0; r < all.size(); r++) {
            if (!all.get(r).isEmpty()) {
                throw othersFailure.apply(r, all.get(r));
            }
        }
    }
}
