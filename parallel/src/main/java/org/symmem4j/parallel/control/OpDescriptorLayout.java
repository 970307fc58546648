package org.symmem4j.parallel.control;

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
    public enum Kind {
        /** All-reduce. */
        ALL_REDUCE,
        /** Reduce-scatter. */
        REDUCE_SCATTER,
        /** All-gather. */
        ALL_GATHER,
        /** Broadcast from a root. */
        BROADCAST,
        /** Barrier (no data). */
        BARRIER
    }

    /** Byte offset of the epoch (long, seq + 1), stored last with release. */
    public static final long EPOCH = 0;
    /** Byte offset of the collective sequence number (long). */
    public static final long SEQ = 8;
    /** Byte offset of the {@link Kind} ordinal (int). */
    public static final long KIND = 16;
    /** Byte offset of the DType ordinal (int). */
    public static final long DTYPE = 20;
    /** Byte offset of the ReduceOp ordinal (int), or -1. */
    public static final long OP = 24;
    /** Byte offset of the Algorithm ordinal (int), or -1. */
    public static final long ALGORITHM = 28;
    /** Byte offset of the broadcast root (int), or -1. */
    public static final long ROOT = 32;
    /** Byte offset of the {@link Problem} ordinal (int). */
    public static final long PROBLEM = 36;
    /** Byte offset of the element count (long). */
    public static final long COUNT = 40;
    /** Byte offset of the bytes this rank's (send) buffer holds (long). */
    public static final long BUFFER_BYTES = 48;
    /** Byte offset of the SymmetricMemory id (long), -1 for staged ops. */
    public static final long MEMORY_ID = 56;
    /** Byte offset of the byte offset in that memory (long). */
    public static final long MEMORY_OFFSET = 64;
    /** Byte offset of the bytes this rank's receive buffer holds (long). */
    public static final long RECV_BYTES = 72;
    /** Size of the descriptor in bytes (fits one 128-byte pad line). */
    public static final long BYTES = 80;

    /** Problems a rank finds with its own arguments; carried in the descriptor so every rank reports them. */
    public enum Problem {
        /** No problem. */
        NONE("none"),
        /** The buffer is null. */
        NULL_BUFFER("buffer is null"),
        /** The count is negative. */
        NEGATIVE_COUNT("count is negative"),
        /** The symmetric memory belongs to another group or transport. */
        FOREIGN_MEMORY("symmetric memory belongs to another group or transport (allocate it on this communicator's group)"),
        /** The offset is outside the symmetric memory. */
        OFFSET_OUT_OF_RANGE("offsetBytes is outside the symmetric memory"),
        /** The root is outside [0, worldSize). */
        ROOT_OUT_OF_RANGE("root is outside [0, worldSize)"),
        /** dtype, op or algorithm is null. */
        NULL_ARGUMENT("dtype, op or algorithm is null"),
        /** The algorithm cannot run on this transport. */
        UNSUPPORTED_ALGORITHM("algorithm cannot run on this transport"),
        /** The segment the collective writes on this rank is read-only. */
        READ_ONLY_DESTINATION("destination is read-only: isReadOnly=true expected=false (pass a writable segment, not a"
                + " view from asReadOnly())"),
        /** A buffer's memory was freed: its arena, or its symmetric memory, is closed. */
        FREED_BUFFER("buffer memory is freed: alive=false expected=true (its arena or symmetric memory was closed;"
                + " pass memory that is still open)"),
        /** A buffer is confined to a thread other than the rank's. */
        CONFINED_TO_ANOTHER_THREAD("buffer is confined to another thread: accessibleByRankThread=false expected=true"
                + " (allocate it from Arena.ofShared() or Arena.ofAuto(), or from a confined arena of the rank's own thread)"),
        /** A device kernel needs a 16-byte aligned offset (GPU transports). */
        MISALIGNED_OFFSET("offsetBytes is not 16-byte aligned: offsetBytes%16!=0 expected=0 (the device kernels move"
                + " 16-byte vectors; start the region at a multiple of 16 bytes)"),
        /** A buffer is on the Java heap where native memory is needed (MPI between machines). */
        HEAP_BUFFER("buffer is on the Java heap: isNative=false expected=true (MPI cannot read the heap; allocate the"
                + " buffer from an Arena)"),
        /** A buffer holds fewer bytes than the count needs (where the sizes are not in the descriptor). */
        SHORT_BUFFER("buffer is shorter than the count needs: byteSize<count*dtype.byteSize() (every rank's buffers must"
                + " hold the count; recv of all-gather and send of reduce-scatter hold worldSize blocks)"),
        /** The dtype cannot travel between machines. */
        UNSUPPORTED_DTYPE("dtype cannot travel between machines: expected FLOAT32 or FLOAT64 (Open MPI has no bfloat16;"
                + " widen to FLOAT32)");

        private final String text;

        Problem(String text) {
            this.text = text;
        }

        /**
         * What makes a caller's segment unusable for a collective on the calling thread, or
         * {@link #NONE}: its memory freed, confined to another thread, or read-only where the
         * collective writes it. A rank checks this before it arrives, so the verdict travels in its
         * descriptor and every rank refuses the call before any byte moves. Allocation-free.
         *
         * @param segment a non-null segment the caller passed
         * @param written whether the collective writes {@code segment} on this rank (a destination)
         * @return the first problem found, or {@link #NONE}
         */
        public static Problem ofSegment(MemorySegment segment, boolean written) {
            if (!segment.scope().isAlive()) {
                return FREED_BUFFER;
            }
            if (!segment.isAccessibleBy(Thread.currentThread())) {
                return CONFINED_TO_ANOTHER_THREAD;
            }
            return written && segment.isReadOnly() ? READ_ONLY_DESTINATION : NONE;
        }

        /**
         * Returns the human-readable description used in error messages.
         *
         * @return the description
         */
        public String text() {
            return text;
        }

        /**
         * As {@link #text()}, with a read-only destination named as the caller passed it.
         *
         * @param destination the destination argument's name, for example {@code recv}
         * @return the description
         */
        public String text(String destination) {
            return this == READ_ONLY_DESTINATION ? destination + text.substring("destination".length()) : text;
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

        /** An empty descriptor; a communicator fills it before each call ({@link #read} decodes a peer's). */
        public Descriptor() {
        }

        /**
         * Sets every field; returns this. Ordinals are -1 where the call has no such argument.
         *
         * @param seq collective sequence number on the communicator
         * @param kind the collective kind
         * @param dtype DType ordinal
         * @param op ReduceOp ordinal, or -1
         * @param algorithm Algorithm ordinal, or -1
         * @param root broadcast root rank, or -1
         * @param count element count
         * @param bufferBytes bytes this rank's (send) buffer holds
         * @param memoryId SymmetricMemory id for in-place ops, -1 for staged
         * @param memoryOffset byte offset in that memory
         * @param recvBytes bytes this rank's receive buffer holds
         * @param problem a problem found locally, or {@link Problem#NONE}
         * @return this descriptor
         */
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

        /** {@return the collective sequence number} */
        public long seq() {
            return seq;
        }

        /** {@return the collective kind} */
        public Kind kind() {
            return kind;
        }

        /** {@return the DType ordinal} */
        public int dtype() {
            return dtype;
        }

        /** {@return the ReduceOp ordinal, or -1} */
        public int op() {
            return op;
        }

        /** {@return the Algorithm ordinal, or -1} */
        public int algorithm() {
            return algorithm;
        }

        /** {@return the broadcast root, or -1} */
        public int root() {
            return root;
        }

        /** {@return the element count} */
        public long count() {
            return count;
        }

        /** {@return the (send) buffer size in bytes} */
        public long bufferBytes() {
            return bufferBytes;
        }

        /** {@return the SymmetricMemory id, or -1 for staged ops} */
        public long memoryId() {
            return memoryId;
        }

        /** {@return the byte offset in that memory} */
        public long memoryOffset() {
            return memoryOffset;
        }

        /** {@return the receive buffer size in bytes} */
        public long recvBytes() {
            return recvBytes;
        }

        /** {@return the problem found locally} */
        public Problem problem() {
            return problem;
        }

        @Override
        public String toString() {
            return "Descriptor[seq=" + seq + ", kind=" + kind + ", dtype=" + dtype + ", op=" + op + ", algorithm="
                    + algorithm + ", root=" + root + ", count=" + count + ", bufferBytes=" + bufferBytes + ", memoryId="
                    + memoryId + ", memoryOffset=" + memoryOffset + ", recvBytes=" + recvBytes + ", problem=" + problem + "]";
        }

        /**
         * Writes the descriptor fields of the line at {@code base} (plain stores, published by the epoch's release).
         *
         * @param pad the signal pad to write into
         * @param base byte offset of the entry line in {@code pad}
         */
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
         *
         * @param pad the signal pad to read from
         * @param base byte offset of the entry line in {@code pad}
         * @return true if the line matches this descriptor and reports no problem
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

        /**
         * Reads a descriptor at {@code base} (plain loads, after the acquire that published it).
         * An unknown kind decodes as null, an unknown problem as {@link Problem#NONE}.
         *
         * @param pad the signal pad to read from
         * @param base byte offset of the entry line in {@code pad}
         * @return a fresh descriptor
         */
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
