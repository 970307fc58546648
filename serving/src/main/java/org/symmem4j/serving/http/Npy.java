package org.symmem4j.serving.http;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.factory.Nd4j;

/**
 * NumPy's {@code .npy} format (versions 1.0 to 3.0), little-endian float32 or float64 in C order: what
 * {@code numpy.save} writes and {@code numpy.load} reads. Parsed here in Java, with every field checked before an
 * array is made, so a malformed payload is a clear 400 and never reaches native code.
 */
public final class Npy {

    /** The media type the HTTP front takes and answers for .npy bodies. */
    public static final String MEDIA_TYPE = "application/x-npy";

    private static final byte[] MAGIC = {(byte) 0x93, 'N', 'U', 'M', 'P', 'Y'};
    private static final Pattern DESCR = Pattern.compile("'descr'\\s*:\\s*'([^']*)'");
    private static final Pattern FORTRAN = Pattern.compile("'fortran_order'\\s*:\\s*(True|False)");
    private static final Pattern SHAPE = Pattern.compile("'shape'\\s*:\\s*\\(([^)]*)\\)");

    private Npy() {
    }

    /**
     * Reads an array.
     *
     * @param bytes the .npy file's bytes
     * @return the array (float32 or float64)
     * @throws IllegalArgumentException naming what is wrong: magic, version, header, dtype, order, shape, length
     */
    public static INDArray read(byte[] bytes) {
        if (bytes.length < 10 || !Arrays.equals(Arrays.copyOf(bytes, 6), MAGIC)) {
            throw new IllegalArgumentException(".npy payload of bytes=" + bytes.length + " does not start with the"
                    + " magic \\x93NUMPY (fix: write it with numpy.save)");
        }
        int major = bytes[6];
        ByteBuffer b = ByteBuffer.wrap(bytes).order(ByteOrder.LITTLE_ENDIAN);
        long headerLength;
        int start;
        if (major == 1) {
            headerLength = b.getShort(8) & 0xFFFF;
            start = 10;
        } else if (major == 2 || major == 3) {
            if (bytes.length < 12) {
                throw new IllegalArgumentException(".npy version " + major + " payload of bytes=" + bytes.length
                        + " is shorter than its preamble (fix: send the whole file numpy.save writes)");
            }
            headerLength = b.getInt(8) & 0xFFFFFFFFL;
            start = 12;
        } else {
            throw new IllegalArgumentException(".npy version=" + major + "." + bytes[7] + " expected 1.0, 2.0 or 3.0"
                    + " (fix: send the bytes numpy.save writes)");
        }
        if (start + headerLength > bytes.length) {
            throw new IllegalArgumentException(".npy header of bytes=" + headerLength + " runs past the payload of bytes="
                    + bytes.length + " (fix: send the whole file numpy.save writes)");
        }
        String header = new String(bytes, start, (int) headerLength, StandardCharsets.UTF_8);
        String descr = group(DESCR, header, "descr");
        DataType type = switch (descr) {
            case "<f4", "=f4" -> DataType.FLOAT;
            case "<f8", "=f8" -> DataType.DOUBLE;
            default -> throw new IllegalArgumentException(".npy descr='" + descr + "' expected '<f4' or '<f8'"
                    + " (little-endian float32 or float64; fix: array.astype(numpy.float32))");
        };
        if (group(FORTRAN, header, "fortran_order").equals("True")) {
            throw new IllegalArgumentException(".npy fortran_order=True expected False (C order; fix:"
                    + " numpy.ascontiguousarray(array))");
        }
        List<Long> dims = new ArrayList<>();
        for (String d : group(SHAPE, header, "shape").split(",")) {
            if (!d.isBlank()) {
                try {
                    dims.add(Long.parseLong(d.trim()));
                } catch (NumberFormatException e) {
                    throw new IllegalArgumentException(".npy shape entry '" + d.trim() + "' is not an integer (fix:"
                            + " send the bytes numpy.save writes)");
                }
            }
        }
        long[] shape = dims.stream().mapToLong(Long::longValue).toArray();
        long count = 1;
        for (long d : shape) {
            if (d < 0) {
                throw new IllegalArgumentException(".npy shape=" + Arrays.toString(shape) + " has a negative dimension"
                        + " (fix: send the bytes numpy.save writes)");
            }
            count = Math.multiplyExact(count, d);
        }
        if (count == 0 || shape.length == 0) {
            throw new IllegalArgumentException(".npy shape=" + Arrays.toString(shape) + " holds no rows (expected"
                    + " [rows, ...] with rows >= 1; fix: send at least one row)");
        }
        long dataBytes = bytes.length - start - headerLength;
        if (dataBytes != count * type.width()) {
            throw new IllegalArgumentException(".npy data of bytes=" + dataBytes + " expected " + count * type.width()
                    + " for shape=" + Arrays.toString(shape) + " of " + descr + " (fix: send the whole file numpy.save"
                    + " writes)");
        }
        ByteBuffer data = ByteBuffer.wrap(bytes, (int) (start + headerLength), (int) dataBytes).order(ByteOrder.LITTLE_ENDIAN);
        if (type == DataType.FLOAT) {
            float[] v = new float[(int) count];
            data.asFloatBuffer().get(v);
            return Nd4j.create(v, shape, 'c');
        }
        double[] v = new double[(int) count];
        data.asDoubleBuffer().get(v);
        return Nd4j.create(v, shape, 'c');
    }

    /**
     * Writes an array as .npy 1.0 (float64 stays float64, every other type is written as float32).
     *
     * @param array the array
     * @return the .npy file's bytes
     */
    public static byte[] write(INDArray array) {
        boolean dbl = array.dataType() == DataType.DOUBLE;
        long[] shape = array.shape();
        String dims = shape.length == 1 ? shape[0] + "," : String.join(", ", Arrays.stream(shape)
                .mapToObj(Long::toString).toList());
        StringBuilder header = new StringBuilder("{'descr': '" + (dbl ? "<f8" : "<f4")
                + "', 'fortran_order': False, 'shape': (" + dims + "), }");
        while ((10 + header.length() + 1) % 64 != 0) {
            header.append(' ');
        }
        header.append('\n');
        byte[] h = header.toString().getBytes(StandardCharsets.US_ASCII);
        INDArray c = array.dup('c');
        int width = dbl ? 8 : 4;
        ByteBuffer out = ByteBuffer.allocate(10 + h.length + (int) c.length() * width).order(ByteOrder.LITTLE_ENDIAN);
        out.put(MAGIC).put((byte) 1).put((byte) 0).putShort((short) h.length).put(h);
        if (dbl) {
            out.asDoubleBuffer().put(c.data().asDouble());
        } else {
            out.asFloatBuffer().put(c.castTo(DataType.FLOAT).data().asFloat());
        }
        return out.array();
    }

    private static String group(Pattern p, String header, String key) {
        Matcher m = p.matcher(header);
        if (!m.find()) {
            throw new IllegalArgumentException(".npy header has no '" + key + "' (header: " + header.strip() + "; fix:"
                    + " send the bytes numpy.save writes)");
        }
        return m.group(1);
    }
}
