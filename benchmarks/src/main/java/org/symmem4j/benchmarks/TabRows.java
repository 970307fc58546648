package org.symmem4j.benchmarks;

import java.util.ArrayList;
import java.util.List;
import java.util.function.Function;

/**
 * Rows of fields as text, a line each, tab-separated: how the rank processes of a benchmark's {@code --processes}
 * mode send their cells to rank 0 through the group. Fields must not hold tabs or newlines (names and numbers).
 */
final class TabRows {

    private TabRows() {
    }

    /** The rows as text: each row's fields (their {@code toString}) joined by tabs, a line each. */
    static <T> String encode(List<T> rows, Function<T, List<?>> fields) {
        StringBuilder out = new StringBuilder();
        for (T row : rows) {
            List<?> f = fields.apply(row);
            for (int i = 0; i < f.size(); i++) {
                out.append(i == 0 ? "" : "\t").append(f.get(i));
            }
            out.append('\n');
        }
        return out.toString();
    }

    /**
     * The rows of {@link #encode}'s text, each line's fields (exactly {@code count} of them) made into a row.
     *
     * @throws IllegalArgumentException naming the line, when it has another number of fields
     */
    static <T> List<T> decode(String text, int count, String what, Function<String[], T> row) {
        List<T> rows = new ArrayList<>();
        for (String line : text.split("\n")) {
            if (line.isEmpty()) {
                continue;
            }
            String[] f = line.split("\t");
            if (f.length != count) {
                throw new IllegalArgumentException(what + " line '" + line + "': expected " + count + " tab-separated fields,"
                        + " found " + f.length);
            }
            rows.add(row.apply(f));
        }
        return rows;
    }
}
