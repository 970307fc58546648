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
import java.nio.ByteOrder;
import java.nio.file.AtomicMoveNotSupportedException;
import org.symmem4j.dl4j.train.CheckpointDirectory;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.Arrays;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.zip.CRC32;
import java.util.zip.CheckedInputStream;
import java.util.zip.CheckedOutputStream;
import org.nd4j.linalg.api.ndarray.INDArray;

/**
 * One worker's shard of a sharded checkpoint: a file {@code shard-RRRRR-of-NNNNN.bin} holding the
 * worker's updater-state shard and what is needed to check it belongs where it is restored. Next
 * to the shards a checkpoint directory holds {@code model.zip}, written by DL4J's
 * {@code ModelSerializer} with the full (gathered) updater state, which a plain DL4J user loads.
 *
 * <pre>
 *  header, big-endian (DataOutputStream):
 *    magic          8 bytes   "S4JSHARD"
 *    formatVersion  int       {@link #FORMAT_VERSION}
 *    worldSize      int       N, the number of shards
 *    rank           int       this shard's worker
 *    stage          UTF       ZeroStage name when saved (informational: both stages keep the same state)
 *    dataType       UTF       DL4J DataType of the state
 *    byteOrder      UTF       byte order of the state bytes (the machine's native order)
 *    paramCount     long      elements of the flat parameter vector
 *    shardStart     long      first parameter of the shard
 *    shardEnd       long      one past the last
 *    stateElements  long      elements of the state that follows
 *    iterationCount int       DL4J counters at the save
 *    epochCount     int
 *    layoutHash     long      {@link UpdaterLayout#fingerprint()}: DL4J's updater blocks
 *  stateElements x dataType bytes, as in memory
 *  crc32            long      of every byte before it
 * </pre>
 */
final class ShardCheckpoint {

    static final int FORMAT_VERSION = 1;
    static final String MODEL_FILE = "model.zip";
    private static final byte[] MAGIC = "S4JSHARD".getBytes(java.nio.charset.StandardCharsets.US_ASCII);
    private static final Pattern SHARD_FILE = Pattern.compile("shard-(\\d{5})-of-(\\d{5})\\.bin");
    private static final int CHUNK = 1 << 20;

    record Header(int formatVersion, int worldSize, int rank, String stage, String dataType, String byteOrder,
                  long paramCount, long shardStart, long shardEnd, long stateElements, int iterationCount, int epochCount,
                  long layoutHash) {
    }

    private ShardCheckpoint() {
    }

    static String shardFileName(int rank, int worldSize) {
        return String.format("shard-%05d-of-%05d.bin", rank, worldSize);
    }

    /** The world size a shard file's name says, or -1 if it is not a shard file. */
    static int worldSizeOf(Path file) {
        Matcher m = SHARD_FILE.matcher(file.getFileName().toString());
        return m.matches() ? Integer.parseInt(m.group(2)) : -1;
    }

    /** Writes a shard file through a temporary file and a rename, so a crash never leaves a torn shard under the final name. */
    static void write(Path file, Header h, INDArray state) throws IOException {
        Path tmp = file.resolveSibling(file.getFileName() + ".tmp");
        CRC32 crc = new CRC32();
        try (OutputStream raw = Files.newOutputStream(tmp);
             CheckedOutputStream checked = new CheckedOutputStream(new BufferedOutputStream(raw, CHUNK), crc);
             DataOutputStream out = new DataOutputStream(checked)) {
            out.write(MAGIC);
            out.writeInt(h.formatVersion());
            out.writeInt(h.worldSize());
            out.writeInt(h.rank());
            out.writeUTF(h.stage());
            out.writeUTF(h.dataType());
            out.writeUTF(h.byteOrder());
            out.writeLong(h.paramCount());
            out.writeLong(h.shardStart());
            out.writeLong(h.shardEnd());
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

    /** Reads a shard file's header (the state and checksum are read by {@link #readState}). */
    static Header readHeader(Path file) throws IOException {
        try (DataInputStream in = new DataInputStream(new BufferedInputStream(Files.newInputStream(file)))) {
            return header(in, file);
        }
    }

    private static Header header(DataInputStream in, Path file) throws IOException {
        byte[] magic = new byte[MAGIC.length];
        in.readFully(magic);
        if (!Arrays.equals(magic, MAGIC)) {
            throw new IOException(file + ": not a symmem4j shard file (magic " + new String(magic,
                    java.nio.charset.StandardCharsets.ISO_8859_1) + ", expected S4JSHARD)");
        }
        int version = in.readInt();
        if (version != FORMAT_VERSION) {
            throw new IOException(file + ": shard format version=" + version + ", this symmem4j reads version="
                    + FORMAT_VERSION + " (restore with the symmem4j that wrote it, or load model.zip with ModelSerializer)");
        }
        return new Header(version, in.readInt(), in.readInt(), in.readUTF(), in.readUTF(), in.readUTF(), in.readLong(),
                in.readLong(), in.readLong(), in.readLong(), in.readInt(), in.readInt(), in.readLong());
    }

    /**
     * Reads the state of a shard file whose header was checked into {@code state}, verifying the
     * checksum over the whole file. On a checksum failure {@code state} holds the file's (damaged)
     * bytes and an IOException says so.
     */
    static void readState(Path file, INDArray state) throws IOException {
        CRC32 crc = new CRC32();
        try (InputStream raw = new BufferedInputStream(Files.newInputStream(file), CHUNK);
             CheckedInputStream checked = new CheckedInputStream(raw, crc)) {
            DataInputStream in = new DataInputStream(checked);
            Header h = header(in, file);
            if (!ByteOrder.nativeOrder().toString().equals(h.byteOrder())) {
                throw new IOException(file + ": state bytes are " + h.byteOrder() + ", this machine is "
                        + ByteOrder.nativeOrder() + " (load model.zip with ModelSerializer instead)");
            }
            long bytes = state == null ? 0 : state.length() * state.dataType().width();
            if (h.stateElements() != (state == null ? 0 : state.length())) {
                throw new IOException(file + ": stateElements=" + h.stateElements() + " expected="
                        + (state == null ? 0 : state.length()));
            }
            if (state != null) {
                MemorySegment seg = ModelReplica.segmentOf(state);
                byte[] buf = new byte[(int) Math.min(CHUNK, Math.max(1, bytes))];
                for (long at = 0; at < bytes; at += buf.length) {
                    int len = (int) Math.min(buf.length, bytes - at);
                    in.readFully(buf, 0, len);
                    MemorySegment.copy(buf, 0, seg, ValueLayout.JAVA_BYTE, at, len);
                }
            }
            long computed = crc.getValue();
            long stored;
            try {
                stored = new DataInputStream(raw).readLong(); // past the checked bytes
            } catch (EOFException e) {
                throw new IOException(file + ": truncated (no checksum after the state)", e);
            }
            if (stored != computed) {
                throw new IOException(file + ": checksum mismatch: stored crc32=" + Long.toHexString(stored) + " computed="
                        + Long.toHexString(computed) + " (the file is damaged; save the checkpoint again)");
            }
        }
    }
}
