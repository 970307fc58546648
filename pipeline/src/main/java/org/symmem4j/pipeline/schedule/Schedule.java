package org.symmem4j.pipeline.schedule;

import java.util.ArrayList;
import java.util.List;
import java.util.Objects;

/**
 * A pipeline schedule as a plain value: for each rank, the actions it runs, in order. A rank runs its
 * list strictly in order; it never reorders or skips.
 *
 * <p>The text form is one line per rank, ranks in order from 0, actions separated by one space:
 *
 * <pre>
 * rank 0: 0F0 0F1 0B0 0B1
 * rank 1: 1F0 1B0 1F1 1B1
 * </pre>
 *
 * A rank with no actions is written {@code rank 3:}. {@link #toText()} writes it (each line ends with
 * a newline) and {@link #parse(String)} reads it back; parsing also skips blank lines and lines
 * starting with {@code #}, so golden files can carry comments.
 *
 * <p>A schedule is not checked on construction: {@link ScheduleValidator} does that against a
 * {@link PipelineShape}, so that invalid schedules can be built, printed and diagnosed.
 *
 * @param actionsByRank element {@code r} is rank {@code r}'s actions in run order (copied, immutable)
 */
public record Schedule(List<List<Action>> actionsByRank) {

    /** Copies the action lists (the schedule is immutable). */
    public Schedule {
        Objects.requireNonNull(actionsByRank, "actionsByRank");
        List<List<Action>> copy = new ArrayList<>(actionsByRank.size());
        for (List<Action> actions : actionsByRank) {
            copy.add(List.copyOf(Objects.requireNonNull(actions, "actions of a rank")));
        }
        actionsByRank = List.copyOf(copy);
    }

    /**
     * Number of ranks (lines) in this schedule.
     *
     * @return the rank count
     */
    public int rankCount() {
        return actionsByRank.size();
    }

    /**
     * Number of actions over all ranks: {@code 2 × stages × microbatches} for a valid schedule whose
     * backwards are whole, one more per split backward.
     *
     * @return the action count
     */
    public int actionCount() {
        return actionsByRank.stream().mapToInt(List::size).sum();
    }

    /**
     * Rank {@code rank}'s actions, in run order.
     *
     * @param rank a rank in [0, {@link #rankCount()})
     * @return the actions (unmodifiable)
     */
    public List<Action> actions(int rank) {
        return actionsByRank.get(rank);
    }

    /**
     * The text form: one {@code rank r: a b c} line per rank, each ending with a newline.
     *
     * @return the text form
     */
    public String toText() {
        StringBuilder text = new StringBuilder();
        for (int rank = 0; rank < actionsByRank.size(); rank++) {
            text.append("rank ").append(rank).append(':');
            for (Action action : actionsByRank.get(rank)) {
                text.append(' ').append(action);
            }
            text.append('\n');
        }
        return text.toString();
    }

    /** Same as {@link #toText()}. */
    @Override
    public String toString() {
        return toText();
    }

    /**
     * Reads the text form written by {@link #toText()}. Blank lines and lines whose first non-blank
     * character is {@code #} are skipped; actions may be separated by any run of spaces or tabs.
     *
     * @param text the text form
     * @return the schedule
     * @throws IllegalArgumentException naming the line (1-based), rank and token (1-based) that is
     *                                  wrong, what was expected there and what was found
     */
    public static Schedule parse(String text) {
        Objects.requireNonNull(text, "text");
        List<List<Action>> actionsByRank = new ArrayList<>();
        String[] lines = text.split("\\R", -1);
        for (int lineIndex = 0; lineIndex < lines.length; lineIndex++) {
            String line = lines[lineIndex].strip();
            if (line.isEmpty() || line.startsWith("#")) {
                continue;
            }
            int lineNumber = lineIndex + 1;
            int rank = actionsByRank.size();
            String prefix = "rank " + rank + ":";
            boolean prefixThenSpace = line.startsWith(prefix)
                    && (line.length() == prefix.length() || Character.isWhitespace(line.charAt(prefix.length())));
            if (!prefixThenSpace) {
                throw new IllegalArgumentException("invalid schedule text: line=" + lineNumber
                        + " expected=\"" + prefix + " <actions>\" found=\"" + abbreviate(line)
                        + "\" (one line per rank, ranks in order from 0; fix: start line " + lineNumber + " with \""
                        + prefix + "\")");
            }
            String body = line.substring(prefix.length()).strip();
            List<Action> actions = new ArrayList<>();
            if (!body.isEmpty()) {
                String[] tokens = body.split("[ \t]+");
                for (int token = 0; token < tokens.length; token++) {
                    try {
                        actions.add(Action.parse(tokens[token]));
                    } catch (IllegalArgumentException e) {
                        // error-message: wraps Action.parse's message, which names the fix, with where the token is
                        throw new IllegalArgumentException("invalid schedule text: line=" + lineNumber
                                + " rank=" + rank + " token=" + (token + 1) + ": " + e.getMessage(), e);
                    }
                }
            }
            actionsByRank.add(actions);
        }
        if (actionsByRank.isEmpty()) {
            throw new IllegalArgumentException("invalid schedule text: expected=\"rank 0: <actions>\" found=no rank"
                    + " lines (fix: write one line per rank, e.g. \"rank 0: 0F0 0B0\")");
        }
        return new Schedule(actionsByRank);
    }

    private static String abbreviate(String line) {
        return line.length() <= 40 ? line : line.substring(0, 37) + "...";
    }
}
