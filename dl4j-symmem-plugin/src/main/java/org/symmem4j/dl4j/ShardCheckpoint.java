package org.symmem4j.dl4j;

import java.io.BufferedInputStream;
import java.io.BufferedOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.EOFException;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.AtomicMoveNotSupportedException;
import java.nio.file.StandardOpenOption;
import org.symmem4j.dl4j.train.CheckpointDirectory;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.zip.CRC32;
import java.util.zip.CheckedInputStream;
import java.util.zip.CheckedOutputStream;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.symmem4j.parallel.Invariants;

/**
 * One rank's shard of a sharded checkpoint: a file {@code shard-RRRRR-of-NNNNN.bin} holding the rank's updater-state
 * shard and what is needed to check where it belongs and to re-slice it for another rank count. Next to the shards a
 * checkpoint directory holds {@code model.zip}, written by DL4J's {@code ModelSerializer} with the full (gathered)
 * updater state, which a plain DL4J user loads.
 *
 * <p>A shard is described by <em>global flat ranges</em>, so that any rank count (and any way of cutting, one block
 * per rank or one block per layer per rank) writes the same format: the parameter ranges it owns, elements of the
 * model's flat parameter vector, and the state ranges it holds, elements of the trainer's flat updater-state space
 * (DL4J's full updater-state view for the data-parallel wrapper). The state bytes are the state ranges' elements, range
 * after range, in the order listed: element {@code e} of state range {@code i} lies at state element
 * {@code (sum of the lengths of ranges 0..i-1) + (e - start_i)} of the file. Restoring onto another rank count is
 * then a copy from every file's ranges into every new shard's ranges ({@link ShardedCheckpoints}).
 *
 * <pre>
 *  header, big-endian (DataOutputStream), format 2:
 *    magic           8 bytes   "S4JSHARD"
 *    formatVersion   int       2 ({@link #FORMAT_VERSION}; 1 is still read, below)
 *    worldSize       int       N, the number of shards
 *    rank            int       this shard's rank
 *    stage           UTF       what wrote it: a ZeroStage name, PIPELINE, ... (decides who may read it)
 *    dataType        UTF       DL4J DataType of the state
 *    byteOrder       UTF       byte order of the state bytes (the machine's native order)
 *    paramCount      long      elements of the flat parameter vector
 *    stateCount      long      elements of the whole flat state space the state ranges lie in
 *    paramRanges     int n, then n x (long start, long end)   the parameters this shard owns, ascending
 *    stateRanges     int m, then m x (long start, long end)   the state it holds, in the order of its bytes
 *    stateElements   long      sum of the state ranges' lengths: elements of the state that follows
 *    iterationCount  int       DL4J counters at the save
 *    epochCount      int
 *    layoutHash      long      the fingerprint of the state space's layout (UpdaterLayout#fingerprint() for the wrapper)
 *  stateElements x dataType bytes, as in memory
 *  crc32             long      of every byte before it
 *
 *  format 1 (read only): after byteOrder: paramCount, shardStart, shardEnd, stateElements (longs), iterationCount,
 *  epochCount (ints), layoutHash (long); one parameter range [shardStart, shardEnd); its state ranges are not in the
 *  file: the reader derives them from the layout, as the writer laid them out.
 * </pre>
 */
final class ShardCheckpoint {

    static final int FORMAT_VERSION = 2;
    static final String MODEL_FILE = "model.zip";
    private static final byte[] MAGIC = "S4JSHARD".getBytes(java.nio.charset.StandardCharsets.US_ASCII);
    private static final Pattern SHARD_FILE = Pattern.compile("shard-(\\d{5})-of-(\\d{5})\\.bin");
    /**
     * A rank's parameter shard ({@code params-RRRRR-of-NNNNN.bin}, ZeRO stage 3): the same format, its "state" the
     * parameters it owns, its state ranges elements of the flat parameter vector.
     */
    private static final Pattern PARAMS_FILE = Pattern.compile("params-(\\d{5})-of-(\\d{5})\\.bin");
    private static final int CHUNK = 1 << 20;

    /**
     * A shard file's header.
     *
     * @param stateCount  elements of the whole state space; -1 in a format-1 file (which does not say)
     * @param stateRanges null in a format-1 file (which does not say)
     * @param dataOffset  bytes of the header: where the state begins in the file
     */
    record Header(int formatVersion, int worldSize, int rank, String stage, String dataType, String byteOrder,
                  long paramCount, long stateCount, List<ShardedCheckpoints.Range> paramRanges,
                  List<ShardedCheckpoints.Range> stateRanges, long stateElements, int iterationCount, int epochCount,
                  long layoutHash, long dataOffset) {
    }

    private ShardCheckpoint() {
    }

    static String shardFileName(int rank, int worldSize) {
        return String.format("shard-%05d-of-%05d.bin", rank, worldSize);
    }

    /** A parameter shard's file name (ZeRO stage 3). */
    static String paramsFileName(int rank, int worldSize) {
        return String.format("params-%05d-of-%05d.bin", rank, worldSize);
    }

    /** The world size a shard file's name says, or -1 if it is not a shard file. */
    static int worldSizeOf(Path file) {
        return worldSizeOf(file, false);
    }

    /** The world size a shard file's ({@code params}: a parameter shard file's) name says, or -1 if it is not one. */
    static int worldSizeOf(Path file, boolean params) {
        Matcher m = (params ? PARAMS_FILE : SHARD_FILE).matcher(file.getFileName().toString());
        return m.matches() ? Integer.parseInt(m.group(2)) : -1;
    }

    /** The rank a shard or parameter shard file's name says, or -1 if it is neither. */
    static int rankOf(Path file) {
        Matcher m = SHARD_FILE.matcher(file.getFileName().toString());
        if (m.matches()) {
            return Integer.parseInt(m.group(1));
        }
        m = PARAMS_FILE.matcher(file.getFileName().toString());
        return m.matches() ? Integer.parseInt(m.group(1)) : -1;
    }

    /**
     * Writes a shard file in the current format through a temporary file and a rename, so a crash never leaves a torn
     * shard under the final name. {@code h}'s format version and data offset are ignored.
     */
    static void write(Path file, Header h, INDArray state) throws IOException {
        long elements = state == null ? 0 : state.length();
        if (h.stateElements() != elements || ShardedCheckpoints.Range.total(h.stateRanges()) != elements) {
            throw Invariants.violated(file + ": stateElements=" + h.stateElements() + " and state ranges of "
                    + ShardedCheckpoints.Range.total(h.stateRanges()) + " elements, expected both = the state's "
                    + elements + " elements");
        }
        Path tmp = file.resolveSibling(file.getFileName() + ".tmp");
        CRC32 crc = new CRC32();
        try (OutputStream raw = Files.newOutputStream(tmp);
             CheckedOutputStream checked = new CheckedOutputStream(new BufferedOutputStream(raw, CHUNK), crc);
             DataOutputStream out = new DataOutputStream(checked)) {
            out.write(MAGIC);
            out.writeInt(FORMAT_VERSION);
            out.writeInt(h.worldSize());
            out.writeInt(h.rank());
            out.writeUTF(h.stage());
            out.writeUTF(h.dataType());
            out.writeUTF(h.byteOrder());
            out.writeLong(h.paramCount());
            out.writeLong(h.stateCount());
            writeRanges(out, h.paramRanges());
            writeRanges(out, h.stateRanges());
            out.writeLong(h.stateElements());
            out.writeInt(h.iterationCount());
            out.writeInt(h.epochCount());
            out.writeLong(h.layoutHash());
            if (state != null) {
                MemorySegment seg = ModelReplica.segmentOf(state);
                byte[] buf = new byte[(int) Math.min(CHUNK, Math.max(1, seg.byteSize()))];
                for (long at = 0; at < seg.byteSize(); at += buf.length) {
                    int len = (int) Math.min(buf.length, seg.byteSize() - at);
                    MemorySegment.copy(seg, ValueLayout.JAVA_BYTE, at, buf, 0, len);
                    out.write(buf, 0, len);
                }
            }
            out.flush();
            new DataOutputStream(raw).writeLong(crc.getValue()); // after the checked bytes, not part of them
        }
        CheckpointDirectory.force(tmp); // on the device before the rename makes it the shard
        try {
            Files.move(tmp, file, StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
        } catch (AtomicMoveNotSupportedException e) {
            Files.move(tmp, file, StandardCopyOption.REPLACE_EXISTING);
        }
    }

    private static void writeRanges(DataOutputStream out, List<ShardedCheckpoints.Range> ranges) throws IOException {
        out.writeInt(ranges.size());
        for (ShardedCheckpoints.Range r : ranges) {
            out.writeLong(r.start());
            out.writeLong(r.end());
        }
    }

    /** Reads a shard file's header (the state and checksum are read by {@link #readState} or {@link #readRun}). */
    static Header readHeader(Path file) throws IOException {
        try (DataInputStream in = new DataInputStream(new BufferedInputStream(Files.newInputStream(file)))) {
            return header(in, file);
        }
    }

    /** Counts the bytes read, so the header knows where the state begins. */
    private static final class CountingInput extends java.io.FilterInputStream {
        long count;

        CountingInput(InputStream in) {
            super(in);
        }

        @Override
        public int read() throws IOException {
            int b = super.read();
            count += b >= 0 ? 1 : 0;
            return b;
        }

        @Override
        public int read(byte[] b, int off, int len) throws IOException {
            int n = super.read(b, off, len);
            count += Math.max(n, 0);
            return n;
        }
    }

    private static Header header(InputStream raw, Path file) throws IOException {
        CountingInput counting = new CountingInput(raw);
        DataInputStream in = new DataInputStream(counting);
        try {
            byte[] magic = new byte[MAGIC.length];
            in.readFully(magic);
            if (!Arrays.equals(magic, MAGIC)) {
                throw new IOException(file + ": not a symmem4j shard file (magic " + new String(magic,
                        java.nio.charset.StandardCharsets.ISO_8859_1) + ", expected S4JSHARD; fix: give the"
                                + " checkpoint directory that saveCheckpoint or checkpointEvery"
                        + " wrote, without other files named shard-*)");
            }
            int version = in.readInt();
            if (version == 1) {
                int worldSize = in.readInt();
                int rank = in.readInt();
                String stage = in.readUTF();
                String dataType = in.readUTF();
                String byteOrder = in.readUTF();
                long paramCount = in.readLong();
                long start = in.readLong();
                long end = in.readLong();
                long stateElements = in.readLong();
                int iterations = in.readInt();
                int epochs = in.readInt();
                long layoutHash = in.readLong();
                return new Header(1, worldSize, rank, stage, dataType, byteOrder, paramCount, -1,
                        List.of(new ShardedCheckpoints.Range(start, end)), null, stateElements, iterations, epochs,
                        layoutHash, counting.count);
            }
            if (version != FORMAT_VERSION) {
                throw new IOException(file + ": shard format version=" + version + ", this symmem4j reads versions 1 and "
                        + FORMAT_VERSION + " (fix: restore with the symmem4j that wrote it, or load model.zip"
                        + " with ModelSerializer)");
            }
            int worldSize = in.readInt();
            int rank = in.readInt();
            String stage = in.readUTF();
            String dataType = in.readUTF();
            String byteOrder = in.readUTF();
            long paramCount = in.readLong();
            long stateCount = in.readLong();
            List<ShardedCheckpoints.Range> paramRanges = readRanges(in, file, "paramRanges");
            List<ShardedCheckpoints.Range> stateRanges = readRanges(in, file, "stateRanges");
            long stateElements = in.readLong();
            if (stateElements != ShardedCheckpoints.Range.total(stateRanges)) {
                throw new IOException(file + ": stateElements=" + stateElements + " but its state ranges hold "
                        + ShardedCheckpoints.Range.total(stateRanges) + " (the file is damaged; fix: save the"
                        + " checkpoint again)");
            }
            return new Header(version, worldSize, rank, stage, dataType, byteOrder, paramCount, stateCount, paramRanges,
                    stateRanges, stateElements, in.readInt(), in.readInt(), in.readLong(), counting.count);
        } catch (EOFException e) {
            throw new IOException(file + ": truncated inside its header (the file is damaged or still being written;"
                    + " fix: save the checkpoint again)", e);
        }
    }

    private static List<ShardedCheckpoints.Range> readRanges(DataInputStream in, Path file, String what)
            throws IOException {
        int n = in.readInt();
        if (n < 0 || n > (1 << 24)) {
            throw new IOException(file + ": " + what + " count=" + n + " (the file is damaged; fix: save the"
                    + " checkpoint again)");
        }
        List<ShardedCheckpoints.Range> ranges = new ArrayList<>(n);
        for (int i = 0; i < n; i++) {
            long start = in.readLong();
            long end = in.readLong();
            if (start < 0 || end < start) {
                throw new IOException(file + ": " + what + "[" + i + "]=[" + start + "," + end + ") is not a range (the"
                        + " file is damaged; fix: save the checkpoint again)");
            }
            ranges.add(new ShardedCheckpoints.Range(start, end));
        }
        return List.copyOf(ranges);
    }

    /**
     * Checks a shard file's CRC-32 over the whole file, keeping nothing: for a file read in pieces by
     * {@link #readRun} when no manifest vouches for it.
     */
    static void verifyChecksum(Path file) throws IOException {
        readState(file, null, true);
    }

    /**
     * Reads the state of a shard file whose header was checked into {@code state}, verifying the checksum over the
     * whole file. On a checksum failure {@code state} holds the file's (damaged) bytes and an IOException says so.
     */
    static void readState(Path file, INDArray state) throws IOException {
        readState(file, state, false);
    }

    private static void readState(Path file, INDArray state, boolean checkOnly) throws IOException {
        CRC32 crc = new CRC32();
        try (InputStream raw = new BufferedInputStream(Files.newInputStream(file), CHUNK);
             CheckedInputStream checked = new CheckedInputStream(raw, crc)) {
            DataInputStream in = new DataInputStream(checked);
            Header h = header(in, file);
            if (!checkOnly && !java.nio.ByteOrder.nativeOrder().toString().equals(h.byteOrder())) {
                throw new IOException(file + ": state bytes are " + h.byteOrder() + ", this machine is "
                        + java.nio.ByteOrder.nativeOrder() + " (fix: load model.zip with ModelSerializer instead)");
            }
            long elements = checkOnly ? h.stateElements() : state == null ? 0 : state.length();
            if (h.stateElements() != elements) {
                throw new IOException(file + ": stateElements=" + h.stateElements() + " expected=" + elements
                        + " (fix: restore into a trainer built on the network configuration the checkpoint was"
                        + " saved from)");
            }
            long bytes = checkOnly ? elementBytes(file, h) : state == null ? 0 : state.length() * state.dataType().width();
            MemorySegment seg = checkOnly || state == null ? null : ModelReplica.segmentOf(state);
            byte[] buf = new byte[(int) Math.min(CHUNK, Math.max(1, bytes))];
            for (long at = 0; at < bytes; at += buf.length) {
                int len = (int) Math.min(buf.length, bytes - at);
                in.readFully(buf, 0, len);
                if (seg != null) {
                    MemorySegment.copy(buf, 0, seg, ValueLayout.JAVA_BYTE, at, len);
                }
            }
            long computed = crc.getValue();
            long stored;
            try {
                stored = new DataInputStream(raw).readLong(); // past the checked bytes
            } catch (EOFException e) {
                throw new IOException(file + ": truncated (no checksum after the state; fix: save the"
                        + " checkpoint again)", e);
            }
            if (stored != computed) {
                throw new IOException(file + ": checksum mismatch: stored crc32=" + Long.toHexString(stored) + " computed="
                        + Long.toHexString(computed) + " (the file is damaged; fix: save the checkpoint again)");
            }
        } catch (EOFException e) {
            throw new IOException(file + ": truncated inside its state (fix: save the checkpoint again)", e);
        }
    }

    /** Bytes of a file's state: its elements times its data type's width. */
    static long elementBytes(Path file, Header h) throws IOException {
        try {
            return h.stateElements() * org.nd4j.linalg.api.buffer.DataType.valueOf(h.dataType()).width();
        } catch (IllegalArgumentException e) {
            throw new IOException(file + ": dataType=" + h.dataType() + " is not a DL4J data type (the file is damaged;"
                    + " fix: save the checkpoint again)", e);
        }
    }

    /**
     * Copies {@code bytes} bytes of a shard file's state, from byte {@code stateByte} of the state on, into
     * {@code target} at {@code targetByte}: one run of a re-slice, read with positional reads (the file's checksum was
     * verified before, by its manifest or {@link #verifyChecksum}).
     */
    static void readRun(FileChannel channel, Path file, Header h, long stateByte, MemorySegment target, long targetByte,
                        long bytes) throws IOException {
        ByteBuffer dst = target.asSlice(targetByte, bytes).asByteBuffer();
        long at = h.dataOffset() + stateByte;
        while (dst.hasRemaining()) {
            int n = channel.read(dst, at);
            if (n < 0) {
                throw new IOException(file + ": truncated inside its state (at byte " + at + "; fix: save the"
                        + " checkpoint again)");
            }
            at += n;
        }
    }

    /** Opens a shard file for {@link #readRun}. */
    static FileChannel open(Path file) throws IOException {
        return FileChannel.open(file, StandardOpenOption.READ);
    }
}
