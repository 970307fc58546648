package org.symmem4j.benchmarks;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.PrintWriter;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.List;
import java.util.Locale;

/**
 * The raw CSV a benchmark writes beside its markdown report: one header row naming the columns (with
 * their units), then one row per measurement, flushed as it is measured so that a run cut short keeps
 * what it measured. As {@code ScalingBench --raw}, an existing file is appended to, after checking that
 * its header is this benchmark's: several calls of one script (other flags, other machines) collect
 * into one file. Fields holding a comma, a quote or a line break are quoted ({@code ""} for a quote),
 * which {@code Plots.readCsv} reads back.
 */
public final class RawCsv implements AutoCloseable {

    private final Path file;
    private final List<String> columns;
    private final PrintWriter out;

    private RawCsv(Path file, List<String> columns, PrintWriter out) {
        this.file = file;
        this.columns = columns;
        this.out = out;
    }

    /**
     * Opens {@code file} for appending rows under {@code columns}; writes the header when the file is
     * new or empty.
     *
     * @param file    the CSV file; its directory is created when missing
     * @param columns the column names, units in the names ({@code fit_s}, {@code state_bytes})
     * @return the open file
     * @throws IOException              when the file cannot be read or written
     * @throws IllegalArgumentException when the file exists with another header (another benchmark's,
     *                                  or an older version's), which appending would mix up
     */
    public static RawCsv open(Path file, List<String> columns) throws IOException {
        String header = String.join(",", columns);
        Path parent = file.toAbsolutePath().getParent();
        if (parent != null) {
            Files.createDirectories(parent);
        }
        boolean fresh = !Files.exists(file) || Files.size(file) == 0;
        if (!fresh) {
            String existing;
            try (BufferedReader r = Files.newBufferedReader(file, StandardCharsets.UTF_8)) {
                existing = r.readLine();
            }
            if (!header.equals(existing)) {
                throw new IllegalArgumentException("raw CSV file=" + file + " has header=" + existing + " expected="
                        + header + " (appending would mix two layouts: name a new file, or move the old one away)");
            }
        }
        PrintWriter out = new PrintWriter(Files.newBufferedWriter(file, StandardCharsets.UTF_8, StandardOpenOption.CREATE,
                StandardOpenOption.APPEND), true);
        if (fresh) {
            out.println(header);
        }
        return new RawCsv(file, List.copyOf(columns), out);
    }

    /**
     * Appends one row and flushes it.
     *
     * @param fields one value per column, in the header's order: numbers already formatted (with
     *               {@link #num}), text as it is (quoted here where needed)
     * @throws IllegalArgumentException when the count differs from the header's
     */
    public void row(Object... fields) {
        if (fields.length != columns.size()) {
            throw new IllegalArgumentException("raw CSV file=" + file + ": row of " + fields.length + " fields, expected "
                    + columns.size() + " (" + String.join(",", columns) + ")");
        }
        StringBuilder line = new StringBuilder();
        for (int i = 0; i < fields.length; i++) {
            line.append(i == 0 ? "" : ",").append(quote(String.valueOf(fields[i])));
        }
        out.println(line);
        if (out.checkError()) {
            throw new UncheckedIOException(new IOException("raw CSV file=" + file + ": writing a row failed"));
        }
    }

    /**
     * A number as the CSV holds it: {@code format} in {@link Locale#ROOT}, empty for NaN (a value not
     * measured, as the hand-made CSVs in bench/results leave it).
     *
     * @param format a {@link String#format} pattern for one number, such as {@code %.4f}
     * @param value  the number
     * @return the formatted number, or the empty string for NaN
     */
    public static String num(String format, double value) {
        return Double.isNaN(value) ? "" : String.format(Locale.ROOT, format, value);
    }

    static String quote(String field) {
        if (field.indexOf(',') < 0 && field.indexOf('"') < 0 && field.indexOf('\n') < 0 && field.indexOf('\r') < 0) {
            return field;
        }
        return '"' + field.replace("\"", "\"\"") + '"';
    }

    /** The file the rows go to. */
    public Path file() {
        return file;
    }

    @Override
    public void close() {
        out.close();
    }
}
