package org.symmem4j.parallel.host;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;

/**
 * The entry line a rank writes into every peer's pad (at {@link SignalPadLayout#entryLineOffset})
 * to arrive at a collective: its arguments, then the epoch. The owner waits for the epoch
 * (acquire) and compares every rank's arguments from its own pad before anyone touches shared
 * data. Descriptor fields are plain stores published by the release store of the epoch.
 *
 * <pre>
 *  0  epoch (long)        seq + 1, stored last with release
 *  8  seq (long)          collective sequence number on this communicator
 *  16 kind (int)          {@link Kind#ordinal()}
 *  20 dtype (int)         DType ordinal
 *  24 op (int)            ReduceOp ordinal, or -1
 *  28 algorithm (int)     Algorithm ordinal, or -1
 *  32 root (int)          broadcast root, or -1
 *  36 problem (int)       a {@link Problem} found locally, reported by every rank
 *  40 count (long)        element count
 *  48 bufferBytes (long)  bytes this rank's (send) buffer holds
 *  56 memoryId (long)     SymmetricMemory id for in-place ops, -1 for staged
 *  64 memoryOffset (long) byte offset in that memory
 *  72 recvBytes (long)    bytes this rank's receive buffer holds (reduce-scatter, all-gather)
 *  80 end (fits one 128-byte pad line)
 * </pre>
 */
public final class OpDescriptorLayout {

    /** Collective kinds, in descriptor order. */
    public enum Kind { ALL_REDUCE, REDUCE_SCATTER, ALL_GATHER, BROADCAST, BARRIER }

    public static final long EPOCH = 0;
    public static final long SEQ = 8;
    public static final long KIND = 16;
    public static final long DTYPE = 20;
    public static final long OP = 24;
    public static final long ALGORITHM = 28;
    public static final long ROOT = 32;
    public static final long PROBLEM = 36;
    public static final long COUNT = 40;
    public static final long BUFFER_BYTES = 48;
    public static final long MEMORY_ID = 56;
    public static final long MEMORY_OFFSET = 64;
    public static final long RECV_BYTES = 72;
    public static final long BYTES = 80;

    /** Problems a rank finds with its own arguments; carried in the descriptor so every rank reports them. */
    public enum Problem {
        NONE("none"),
        NULL_BUFFER("buffer is null"),
        NEGATIVE_COUNT("count is negative"),
        FOREIGN_MEMORY("symmetric memory belongs to another group or transport (allocate it on this communicator's group)"),
        OFFSET_OUT_OF_RANGE("offsetBytes is outside the symmetric memory"),
        ROOT_OUT_OF_RANGE("root is outside [0, worldSize)"),
        NULL_ARGUMENT("dtype, op or algorithm is null"),
        UNSUPPORTED_ALGORITHM("algorithm cannot run on this transport");

        private final String text;

        Problem(String text) {
            this.text = text;
        }

        public String text() {
            return text;
        }
    }

    private OpDescriptorLayout() {
    }

    private static final Kind[] KINDS = Kind.values();
    private static final Problem[] PROBLEMS = Problem.values();

    /**
     * One collective call's arguments. Mutable so a communicator reuses one instance per call: the
     * hot path allocates nothing. {@link #read} decodes a peer's line into a fresh instance for
     * error reports.
     */
    public static final class Descriptor {
        private long seq;
        private Kind kind;
        private int dtype;
        private int op;
        private int algorithm;
        private int root;
        private long count;
        private long bufferBytes;
        private long memoryId;
        private long memoryOffset;
        private long recvBytes;
        private Problem problem;

        /** Sets every field; returns this. Ordinals are -1 where the call has no such argument. */
        public Descriptor set(long seq, Kind kind, int dtype, int op, int algorithm, int root, long count,
                              long bufferBytes, long memoryId, long memoryOffset, long recvBytes, Problem problem) {
            this.seq = seq;
            this.kind = kind;
            this.dtype = dtype;
            this.op = op;
            this.algorithm = algorithm;
            this.root = root;
            this.count = count;
            this.bufferBytes = bufferBytes;
            this.memoryId = memoryId;
            this.memoryOffset = memoryOffset;
            this.recvBytes = recvBytes;
            this.problem = problem;
            return this;
        }

        public long seq() {
            return seq;
        }

        public Kind kind() {
            return kind;
        }

        public int dtype() {
            return dtype;
        }

        public int op() {
            return op;
        }

        public int algorithm() {
            return algorithm;
        }

        public int root() {
            return root;
        }

        public long count() {
            return count;
        }

        public long bufferBytes() {
            return bufferBytes;
        }

        public long memoryId() {
            return memoryId;
        }

        public long memoryOffset() {
            return memoryOffset;
        }

        public long recvBytes() {
            return recvBytes;
        }

        public Problem problem() {
            return problem;
        }

        @Override
        public String toString() {
            return "Descriptor[seq=" + seq + ", kind=" + kind + ", dtype=" + dtype + ", op=" + op + ", algorithm="
                    + algorithm + ", root=" + root + ", count=" + count + ", bufferBytes=" + bufferBytes + ", memoryId="
                    + memoryId + ", memoryOffset=" + memoryOffset + ", recvBytes=" + recvBytes + ", problem=" + problem + "]";
        }

        /** Writes the descriptor fields of the line at {@code base} (plain stores, published by the epoch's release). */
        public void write(MemorySegment pad, long base) {
            pad.set(ValueLayout.JAVA_LONG, base + SEQ, seq);
            pad.set(ValueLayout.JAVA_INT, base + KIND, kind.ordinal());
            pad.set(ValueLayout.JAVA_INT, base + DTYPE, dtype);
            pad.set(ValueLayout.JAVA_INT, base + OP, op);
            pad.set(ValueLayout.JAVA_INT, base + ALGORITHM, algorithm);
            pad.set(ValueLayout.JAVA_INT, base + ROOT, root);
            pad.set(ValueLayout.JAVA_LONG, base + COUNT, count);
            pad.set(ValueLayout.JAVA_LONG, base + BUFFER_BYTES, bufferBytes);
            pad.set(ValueLayout.JAVA_LONG, base + MEMORY_ID, memoryId);
            pad.set(ValueLayout.JAVA_LONG, base + MEMORY_OFFSET, memoryOffset);
            pad.set(ValueLayout.JAVA_LONG, base + RECV_BYTES, recvBytes);
            pad.set(ValueLayout.JAVA_INT, base + PROBLEM, problem.ordinal());
        }

        /**
         * Whether the descriptor in the entry line at {@code base} names the same call with the same
         * arguments and no problem: the allocation-free check every collective runs. Buffer sizes are
         * not compared (each rank's own); see {@code HostCommunicator} for the size check.
         */
        public boolean sameCallAs(MemorySegment pad, long base) {
            return pad.get(ValueLayout.JAVA_LONG, base + SEQ) == seq
                    && pad.get(ValueLayout.JAVA_INT, base + KIND) == kind.ordinal()
                    && pad.get(ValueLayout.JAVA_INT, base + DTYPE) == dtype
                    && pad.get(ValueLayout.JAVA_INT, base + OP) == op
                    && pad.get(ValueLayout.JAVA_INT, base + ALGORITHM) == algorithm
                    && pad.get(ValueLayout.JAVA_INT, base + ROOT) == root
                    && pad.get(ValueLayout.JAVA_LONG, base + COUNT) == count
                    && pad.get(ValueLayout.JAVA_LONG, base + MEMORY_ID) == memoryId
                    && pad.get(ValueLayout.JAVA_LONG, base + MEMORY_OFFSET) == memoryOffset
                    && pad.get(ValueLayout.JAVA_INT, base + PROBLEM) == Problem.NONE.ordinal();
        }

        /** Reads a descriptor at {@code base} (plain loads, after the acquire that published it). */
        public static Descriptor read(MemorySegment pad, long base) {
            int kind = pad.get(ValueLayout.JAVA_INT, base + KIND);
            int problem = pad.get(ValueLayout.JAVA_INT, base + PROBLEM);
            return new Descriptor().set(pad.get(ValueLayout.JAVA_LONG, base + SEQ),
                    kind >= 0 && kind < KINDS.length ? KINDS[kind] : null,
                    pad.get(ValueLayout.JAVA_INT, base + DTYPE), pad.get(ValueLayout.JAVA_INT, base + OP),
                    pad.get(ValueLayout.JAVA_INT, base + ALGORITHM), pad.get(ValueLayout.JAVA_INT, base + ROOT),
                    pad.get(ValueLayout.JAVA_LONG, base + COUNT), pad.get(ValueLayout.JAVA_LONG, base + BUFFER_BYTES),
                    pad.get(ValueLayout.JAVA_LONG, base + MEMORY_ID), pad.get(ValueLayout.JAVA_LONG, base + MEMORY_OFFSET),
                    pad.get(ValueLayout.JAVA_LONG, base + RECV_BYTES),
                    problem >= 0 && problem < PROBLEMS.length ? PROBLEMS[problem] : Problem.NONE);
        }
    }
}
