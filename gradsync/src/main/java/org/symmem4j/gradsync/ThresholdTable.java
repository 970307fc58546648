package org.symmem4j.gradsync;

import java.io.IOException;
import java.io.InputStream;
import java.io.Reader;
import java.io.StringReader;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.symmem4j.parallel.Algorithm;
import org.symmem4j.parallel.Configuration;
import org.symmem4j.parallel.DType;

/**
 * Which all-reduce algorithm is fastest for which message size, per transport and world size, as
 * measured by {@code CalibrateThresholds} (benchmarks module, {@code bench/calibrate.sh}) on a machine. Properties format, one row per
 * {@code <transport>.<worldSize>}, thresholds ascending, the last one {@code max}:
 * <pre>
 *   host-in-jvm.2=ONE_SHOT:2048,TWO_SHOT:max
 * </pre>
 * meaning ONE_SHOT up to 2048 bytes, TWO_SHOT above. A row may be for one dtype only, keyed
 * {@code <transport>.<worldSize>.<dtype>} (for example {@code cuda-nvidia-h200.4.float32}); it
 * takes precedence over the plain row for messages of that dtype (on GPUs the kernels' crossover
 * points differ between fp32 and bf16). Algorithm names are read by {@link Algorithm#parse} (any case, {@code -} for
 * {@code _}) and written as the constants' names, so files written before stay valid.
 *
 * <p>{@link #load()} reads, in order: the file named by {@code -Dsymmem4j.thresholds}, else
 * {@code ~/.symmem4j/thresholds.properties} if it exists; its rows override the shipped defaults
 * ({@code default-thresholds.properties} in this package, measured on the dev machines).
 */
public final class ThresholdTable {

    /**
     * Up to {@code maxBytes} inclusive, use {@code algorithm}.
     *
     * @param maxBytes  the largest message of this threshold, in bytes ({@code Long.MAX_VALUE}: no bound)
     * @param algorithm the algorithm up to there
     */
    public record Threshold(long maxBytes, Algorithm algorithm) {
    }

    /** The shipped table: a class-path resource next to this class. */
    public static final String DEFAULTS_RESOURCE = "default-thresholds.properties";
    /**
     * The system property naming a calibration file (default {@code ~/.symmem4j/thresholds.properties}):
     * {@link Configuration#THRESHOLDS}.
     */
    public static final String PROPERTY = Configuration.THRESHOLDS.property();

    private static final Logger LOG = LoggerFactory.getLogger(ThresholdTable.class);

    private final Map<String, List<Threshold>> rows;
    private final String source;

    private ThresholdTable(Map<String, List<Threshold>> rows, String source) {
        this.rows = rows;
        this.source = source;
    }

    /**
     * Where the rows came from (for logs).
     *
     * @return a description of the sources, e.g. {@code "shipped defaults"}
     */
    public String source() {
        return source;
    }

    /**
     * The shipped table, without the user's calibration.
     *
     * @return the thresholds measured for the project's machines
     * @throws IllegalStateException when the resource is missing or unreadable (a broken jar)
     */
    public static ThresholdTable defaults() {
        try (InputStream in = ThresholdTable.class.getResourceAsStream(DEFAULTS_RESOURCE)) {
            if (in == null) {
                throw new IllegalStateException("missing resource " + DEFAULTS_RESOURCE + " next to " + ThresholdTable.class
                        + " (expected in the symmem4j-gradsync jar; fix: put the unmodified symmem4j-gradsync jar on the"
                        + " class path, or keep org/symmem4j/gradsync/" + DEFAULTS_RESOURCE + " when shading it)");
            }
            return parse(new String(in.readAllBytes(), java.nio.charset.StandardCharsets.UTF_8), "shipped defaults");
        } catch (IOException e) {
            throw new IllegalStateException("cannot read " + DEFAULTS_RESOURCE + ": " + e + " (fix: put an unmodified,"
                    + " uncorrupted symmem4j-gradsync jar on the class path)", e);
        }
    }

    /**
     * Defaults overlaid with the user's calibration file, if any (see the class comment).
     *
     * @return the shipped table, with the rows of {@code -Dsymmem4j.thresholds} (or {@code ~/.symmem4j/thresholds.properties}) over it
     * @throws IllegalArgumentException when the named file cannot be read or parsed
     */
    public static ThresholdTable load() {
        ThresholdTable table = defaults();
        Path configured = Configuration.THRESHOLDS.get();
        Path file = configured != null ? configured
                : Path.of(System.getProperty("user.home"), ".symmem4j", "thresholds.properties");
        if (configured != null && !Files.isReadable(file)) {
            throw new IllegalArgumentException("invalid setting: " + PROPERTY + "=" + configured + " is not a readable"
                    + " file (set by -D" + PROPERTY + " or " + Configuration.THRESHOLDS.env() + "; fix: write one with"
                    + " CalibrateThresholds, or drop the setting to use the shipped defaults)");
        }
        if (Files.isReadable(file)) {
            try {
                ThresholdTable user = parse(Files.readString(file), file.toString());
                table = table.overlay(user);
                LOG.info("all-reduce thresholds from " + file + " over the shipped defaults");
            } catch (IOException e) {
                throw new IllegalArgumentException("cannot read threshold file " + file + ": " + e + " (fix: make it"
                        + " readable, rewrite it with CalibrateThresholds (bench/calibrate.sh), or delete it to use the"
                        + " shipped defaults)", e);
            }
        }
        return table;
    }

    /**
     * Parses the properties format; errors name the row and say what was expected.
     *
     * @param text   properties text: {@code <transport>.<worldSize>[.<dtype>]=<ALGORITHM>:<maxBytes>,...,<ALGORITHM>:max}
     * @param source where the text came from, for messages
     * @return the table
     * @throws IllegalArgumentException when a row is malformed (the message names it and what was expected)
     */
    public static ThresholdTable parse(String text, String source) {
        Properties p = new Properties();
        try (Reader r = new StringReader(text)) {
            p.load(r);
        } catch (IOException e) {
            throw org.symmem4j.parallel.Invariants.violated(source + ": reading properties from a string failed: " + e, e);
        }
        Map<String, List<Threshold>> rows = new TreeMap<>();
        for (String key : p.stringPropertyNames()) {
            // <transport>.<worldSize>, optionally .<dtype>; stored with the dtype in lower case
            String plainKey = key;
            String dtypeSuffix = "";
            int dot = key.lastIndexOf('.');
            DType dtype = dot > 0 ? dtypeOf(key.substring(dot + 1)) : null;
            if (dtype != null) {
                plainKey = key.substring(0, dot);
                dtypeSuffix = "." + dtype.name().toLowerCase(Locale.ROOT);
                dot = plainKey.lastIndexOf('.');
            }
            if (dot <= 0) {
                throw new IllegalArgumentException(source + ": key=" + key + " expected <transport>.<worldSize>"
                        + " or <transport>.<worldSize>.<dtype> (fix: name the row like host-in-jvm.2 or"
                        + " cuda-nvidia-h200.4.float32, or rewrite the file with CalibrateThresholds)");
            }
            try {
                Integer.parseInt(plainKey.substring(dot + 1));
            } catch (NumberFormatException e) {
                throw new IllegalArgumentException(source + ": key=" + key + " world size is not a number (a dtype suffix"
                        + " is one of " + java.util.Arrays.toString(DType.values()) + "; fix: end the key with the world"
                        + " size, optionally followed by a dtype, e.g. host-in-jvm.2 or cuda-nvidia-h200.4.float32)", e);
            }
            String rowKey = plainKey + dtypeSuffix;
            rows.put(rowKey, parseRow(source, key, p.getProperty(key)));
        }
        return new ThresholdTable(rows, source);
    }

    private static DType dtypeOf(String name) {
        for (DType d : DType.values()) {
            if (d.name().equalsIgnoreCase(name)) {
                return d;
            }
        }
        return null;
    }

    private static List<Threshold> parseRow(String source, String key, String value) {
        List<Threshold> row = new ArrayList<>();
        long previous = -1;
        for (String part : value.split(",")) {
            String[] ab = part.trim().split(":");
            if (ab.length != 2) {
                throw new IllegalArgumentException(source + ": " + key + "=" + value + " part=" + part
                        + " expected <ALGORITHM>:<maxBytes|max> (fix: write the row as comma-separated pairs, e.g."
                        + " ONE_SHOT:2048,TWO_SHOT:max)");
            }
            Algorithm a;
            try {
                a = Algorithm.parse(ab[0]);
            } catch (IllegalArgumentException e) {
                throw new IllegalArgumentException(source + ": " + key + " algorithm=" + ab[0] + " expected one of "
                        + java.util.Arrays.toString(Algorithm.values()) + " (fix: spell the algorithm as one of these)", e);
            }
            long max = ab[1].trim().equals("max") ? Long.MAX_VALUE : Long.parseLong(ab[1].trim());
            if (max <= previous) {
                throw new IllegalArgumentException(source + ": " + key + "=" + value + " thresholds must ascend, found "
                        + max + " after " + previous + " (fix: list the pairs from the smallest maxBytes to max, e.g."
                        + " ONE_SHOT:2048,TWO_SHOT:max)");
            }
            previous = max;
            row.add(new Threshold(max, a));
        }
        if (row.isEmpty() || row.getLast().maxBytes() != Long.MAX_VALUE) {
            throw new IllegalArgumentException(source + ": " + key + "=" + value + " must end with <ALGORITHM>:max"
                    + " (fix: end the row with the algorithm for every larger message, e.g. ...,TWO_SHOT:max)");
        }
        return List.copyOf(row);
    }

    /**
     * Rows of {@code other} replace this table's rows with the same key.
     *
     * @param other the table whose rows win
     * @return the merged table
     */
    public ThresholdTable overlay(ThresholdTable other) {
        Map<String, List<Threshold>> merged = new TreeMap<>(rows);
        merged.putAll(other.rows);
        return new ThresholdTable(merged, other.source + " over " + source);
    }

    /**
     * A copy with one row set.
     *
     * @param transport the transport name
     * @param worldSize the number of ranks
     * @param row       thresholds in ascending {@code maxBytes}, the last up to {@code Long.MAX_VALUE}
     * @return the new table
     */
    public ThresholdTable with(String transport, int worldSize, List<Threshold> row) {
        Map<String, List<Threshold>> merged = new TreeMap<>(rows);
        merged.put(transport + "." + worldSize, List.copyOf(row));
        return new ThresholdTable(merged, source);
    }

    /**
     * The algorithm for {@code bytes} on {@code transport} with {@code worldSize} ranks: that row,
     * else the transport's row with the nearest smaller world size, else the nearest larger, else
     * ONE_SHOT up to 64 KiB and TWO_SHOT above.
     *
     * @param transport the transport name
     * @param worldSize the number of ranks
     * @param bytes     the message size in bytes
     * @return the table's algorithm
     */
    public Algorithm lookup(String transport, int worldSize, long bytes) {
        return lookup(transport, worldSize, null, bytes);
    }

    /**
     * As {@link #lookup(String, int, long)}, but a row for exactly this transport, world size and
     * {@code dtype} comes first (a null dtype skips it).
     *
     * @param transport the transport name
     * @param worldSize the number of ranks
     * @param dtype     the element type, or null
     * @param bytes     the message size in bytes
     * @return the table's algorithm
     */
    public Algorithm lookup(String transport, int worldSize, DType dtype, long bytes) {
        List<Threshold> row = dtype == null ? null : rows.get(transport + "." + worldSize + "." + dtype.name().toLowerCase(Locale.ROOT));
        if (row == null) {
            row = rows.get(transport + "." + worldSize);
        }
        if (row == null) {
            int best = -1;
            for (String key : rows.keySet()) {
                if (key.startsWith(transport + ".") && key.indexOf('.', transport.length() + 1) < 0) {
                    int ws = Integer.parseInt(key.substring(transport.length() + 1));
                    boolean better = best < 0 || (ws <= worldSize ? (best > worldSize || ws > best) : (best > worldSize && ws < best));
                    if (better) {
                        best = ws;
                    }
                }
            }
            row = best < 0 ? null : rows.get(transport + "." + best);
        }
        if (row == null) {
            return bytes <= (64 << 10) ? Algorithm.ONE_SHOT : Algorithm.TWO_SHOT;
        }
        for (Threshold t : row) {
            if (bytes <= t.maxBytes()) {
                return t.algorithm();
            }
        }
        return row.getLast().algorithm();
    }

    /**
     * The row for a key, or null.
     *
     * @param transport the transport name
     * @param worldSize the number of ranks
     * @return the row, or null
     */
    public List<Threshold> row(String transport, int worldSize) {
        return rows.get(transport + "." + worldSize);
    }

    /**
     * The dtype-only row for a key, or null.
     *
     * @param transport the transport name
     * @param worldSize the number of ranks
     * @param dtype     the element type
     * @return the row, or null
     */
    public List<Threshold> row(String transport, int worldSize, DType dtype) {
        return rows.get(transport + "." + worldSize + "." + dtype.name().toLowerCase(Locale.ROOT));
    }

    /**
     * The properties text of this table, with {@code comment} lines on top.
     *
     * @param comment lines for the top, without {@code #}
     * @return text that {@link #parse} reads back
     */
    public String format(String comment) {
        StringBuilder b = new StringBuilder();
        for (String line : comment.split("\n")) {
            b.append("# ").append(line).append('\n');
        }
        for (Map.Entry<String, List<Threshold>> e : rows.entrySet()) {
            b.append(e.getKey()).append('=');
            List<String> parts = new ArrayList<>();
            for (Threshold t : e.getValue()) {
                parts.add(t.algorithm() + ":" + (t.maxBytes() == Long.MAX_VALUE ? "max" : Long.toString(t.maxBytes())));
            }
            b.append(String.join(",", parts)).append('\n');
        }
        return b.toString();
    }
}
