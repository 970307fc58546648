package org.symmem4j.parallel.host;

import java.lang.foreign.MemorySegment;
import org.symmem4j.parallel.Algorithm;
import org.symmem4j.parallel.CollectiveMismatchException;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.CommunicatorOptions;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.Invariants;
import org.symmem4j.parallel.PeerTimeoutException;
import org.symmem4j.parallel.ReduceOp;
import org.symmem4j.parallel.ShardPartition;
import org.symmem4j.parallel.SymmemException;
import org.symmem4j.parallel.SymmetricMemory;
import org.symmem4j.parallel.Transport;
import org.symmem4j.parallel.control.ControlPlane;
import org.symmem4j.parallel.control.FlightRecording;
import org.symmem4j.parallel.control.OpDescriptorLayout.Descriptor;
import org.symmem4j.parallel.control.OpDescriptorLayout.Kind;
import org.symmem4j.parallel.control.OpDescriptorLayout.Problem;
import org.symmem4j.parallel.control.PadSynchronizer;
import org.symmem4j.parallel.numeric.Reducer;

/**
 * Collectives on host symmetric memory: plain loads and stores into peers' buffers plus the flag
 * protocols of {@link PadSynchronizer}. The same class serves threads ({@code host-in-jvm}) and
 * processes ({@code host-shm}); only the memory's mapping differs.
 *
 * <p>Every collective starts with an <em>entry barrier</em> ({@link ControlPlane}, over the pads of this
 * communicator's scratch): each rank writes its op descriptor into every peer's pad
 * ({@link PadSynchronizer#arrive}), and every rank compares all descriptors before
 * it reads any peer's data or writes anything a peer reads, so a disagreement throws the same
 * {@link CollectiveMismatchException} on every rank and leaves the group usable. What a rank can
 * check alone about its own arguments — a buffer null, too short, read-only where the collective
 * writes it, freed (its arena or symmetric memory closed) or confined to another thread — is checked
 * before it arrives and carried in its descriptor ({@link Problem}), so a bad buffer on one rank is
 * refused on every rank, naming that rank, before any rank writes anything. Staged collectives
 * copy their first piece into this rank's own staging half before arriving, so the entry barrier
 * also publishes that piece: a small staged collective costs one barrier. Peers read a staging
 * half only after the check passed, so a rejected call leaves nothing that anyone reads.
 *
 * <p>Scratch memory (one collective allocation at creation):
 * <pre>
 *   [ staging half 0 | staging half 1 | ring partials slot 0 | ring partials slot 1 ]
 * </pre>
 * Plain (non-symmetric) buffers are copied into a staging half piece by piece; consecutive pieces and
 * consecutive collectives alternate halves, so a rank can fill one half while a slow peer still reads
 * the other, and staged collectives need no exit barrier. Collectives on a caller's
 * {@link SymmetricMemory} run in place and end with a barrier where peers read the caller's buffer
 * after this rank last wrote it.
 *
 * <p>Scratch layout and the per-algorithm synchronization are documented on each method.
 */
public final class HostCommunicator implements Communicator {

    /** Chunk boundaries of TWO_SHOT and RING are multiples of this many elements (≥ one cache line). */
    private static final long CHUNK_ALIGN_ELEMENTS = 16;

    private final Group group;
    private final int rank;
    private final int worldSize;
    private final HostSymmetricMemory scratch;
    private final PadSynchronizer sync;
    /** Numbers the collectives and runs their entry barriers, over the pads of {@link #scratch}. */
    private final ControlPlane control;
    private final long halfBytes;
    private final long ringSlotBytes;
    private final long ringSlotsOffset;
    private final Reducer reducer = Reducer.forThisJvm();

    private int nextHalf;
    /** Ring steps this rank has completed on this communicator (equal on all ranks between collectives). */
    private long ringSteps;

    /** The current call's descriptor, reused: the hot path allocates nothing. */
    private final Descriptor call = new Descriptor();

    // Operand arrays reused by every reduction (one thread per rank, so no sharing).
    private final MemorySegment[] srcs;
    private final long[] srcOffsets;
    private final DType[] srcTypes;

    HostCommunicator(Group group, CommunicatorOptions options) {
        this(group, group.transport(), options);
    }

    /**
     * Collective: a host communicator of {@code group} whose scratch memory comes from
     * {@code hostTransport} rather than the group's own transport: the host collectives of a group on
     * a device transport ({@link Group#hostTransport()}), whose own transport allocates device memory
     * that Java code cannot touch.
     *
     * @param group         this rank's group
     * @param hostTransport a host transport that reaches every rank of {@code group} (host-in-jvm for
     *                      ranks that are threads of this JVM)
     * @param options       scratch sizes, equal on every rank
     * @throws IllegalArgumentException when {@code hostTransport}'s memory is not host-addressable
     */
    HostCommunicator(Group group, Transport hostTransport, CommunicatorOptions options) {
        this.group = group;
        this.rank = group.rank();
        this.worldSize = group.worldSize();
        this.halfBytes = options.stagingBytes();
        this.ringSlotBytes = options.ringSegmentBytes();
        this.ringSlotsOffset = 2 * halfBytes;
        SymmetricMemory memory = hostTransport.allocate(group, 2 * halfBytes + 2 * ringSlotBytes);
        if (!(memory instanceof HostSymmetricMemory host)) {
            memory.close();
            throw new IllegalArgumentException("host communicator needs host symmetric memory; transport="
                    + hostTransport.name() + " gave " + memory.getClass().getSimpleName()
                    + " (fix: pass a host transport: host-in-jvm or host-shm)");
        }
        this.scratch = host;
        this.sync = scratch.sync();
        this.control = ControlPlane.over(group, sync, scratch);
        this.srcs = new MemorySegment[worldSize];
        this.srcOffsets = new long[worldSize];
        this.srcTypes = new DType[worldSize];
    }

    @Override
    public Group group() {
        return group;
    }

    @Override
    public String transportName() {
        return scratch.transportName();
    }

    @Override
    public boolean supports(Algorithm algorithm) {
        return algorithm == Algorithm.ONE_SHOT || algorithm == Algorithm.TWO_SHOT || algorithm == Algorithm.RING;
    }

    /** The reducer this communicator uses (vectorized or scalar). */
    String reducerName() {
        return reducer.name();
    }

    // ------------------------------------------------------------------ all-reduce

    @Override
    public void allReduce(MemorySegment buffer, long count, DType dtype, ReduceOp op, Algorithm algorithm) {
        long s = control.begin("all-reduce");
        try {
            Problem problem = buffer == null ? Problem.NULL_BUFFER
                    : either(commonProblem(count, dtype, op, algorithm), segmentProblem(buffer, true));
            call.set(s, Kind.ALL_REDUCE, ordinal(dtype), ordinal(op), ordinal(algorithm), -1, count,
                    buffer == null ? -1 : buffer.byteSize(), -1, 0, 0, problem);
            stagedAllReduce(buffer, 0, count, dtype, op, algorithm);
        } catch (Throwable t) {
            throw failedInside(t);
        } finally {
            control.completed(s); // no-op when it failed
        }
    }

    @Override
    public void allReduce(SymmetricMemory memory, long offsetBytes, long count, DType dtype, ReduceOp op,
                          Algorithm algorithm) {
        long s = control.begin("all-reduce");
        try {
            Problem problem = commonProblem(count, dtype, op, algorithm);
            HostSymmetricMemory mem = null;
            if (memory == null) {
                problem = Problem.NULL_BUFFER;
            } else if (!(memory instanceof HostSymmetricMemory h) || h.group() != group) {
                problem = Problem.FOREIGN_MEMORY;
            } else if (offsetBytes < 0 || offsetBytes > memory.byteSize()) {
                problem = Problem.OFFSET_OUT_OF_RANGE;
            } else {
                mem = h;
                problem = either(problem, regionProblem(h));
            }
            long available = mem == null ? -1 : mem.byteSize() - offsetBytes;
            call.set(s, Kind.ALL_REDUCE, ordinal(dtype), ordinal(op), ordinal(algorithm), -1, count,
                    available, memory == null ? -1 : memory.id(), offsetBytes, 0, problem);
            if (algorithm == Algorithm.ONE_SHOT || mem == null) {
                // ONE_SHOT cannot write its result into a region peers are still reading, so it stages
                // the region like a plain buffer: one barrier, and no temporary of the full size.
                stagedAllReduce(mem == null ? null : mem.local(), offsetBytes, count, dtype, op, algorithm);
                return;
            }
            enter(call, nextHalf); // publishes every rank's data in its region
            if (count == 0 || worldSize == 1) {
                return;
            }
            if (algorithm == Algorithm.TWO_SHOT) {
                twoShot(mem, offsetBytes, mem.local(), offsetBytes, true, count, dtype, op);
            } else {
                ring(mem, offsetBytes, mem.local(), offsetBytes, true, count, dtype, op);
            }
        } catch (Throwable t) {
            throw failedInside(t);
        } finally {
            control.completed(s); // no-op when it failed
        }
    }

    /**
     * All-reduce of {@code count} elements at {@code bufferOffset} of a buffer peers cannot read
     * (or must not read while this rank overwrites it), through the staging halves, piece by piece.
     * The first piece is staged before the entry barrier, which then publishes it.
     */
    private void stagedAllReduce(MemorySegment buffer, long bufferOffset, long count, DType dtype, ReduceOp op,
                                 Algorithm algorithm) {
        boolean stageFirst = worldSize > 1 && count > 0 && buffersLargeEnough(call, call.bufferBytes(), 0)
                && call.problem() == Problem.NONE;
        long dsize = stageFirst ? dtype.byteSize() : 1;
        long pieceElements = halfBytes / dsize;
        int halfBefore = nextHalf;
        long firstHalf = stageFirst ? stage(buffer, bufferOffset, Math.min(pieceElements, count) * dsize) : -1;
        enter(call, halfBefore);
        if (!stageFirst) {
            return; // count 0 or one rank: the buffer already holds the result (x/1 == x for AVG)
        }
        for (long start = 0; start < count; start += pieceElements) {
            long len = Math.min(pieceElements, count - start);
            long half = firstHalf;
            if (start > 0) {
                half = stage(buffer, bufferOffset + start * dsize, len * dsize);
                sync.barrier("staged piece"); // publishes the piece to every peer
            }
            MemorySegment dst = buffer;
            long dstOffset = bufferOffset + start * dsize;
            switch (algorithm) {
                case ONE_SHOT -> oneShot(scratch, half, dst, dstOffset, len, dtype, op);
                case TWO_SHOT -> twoShot(scratch, half, dst, dstOffset, false, len, dtype, op);
                case RING -> ring(scratch, half, dst, dstOffset, false, len, dtype, op);
                case NCCL, NCCL_SYMMETRIC, MPI, HIERARCHICAL, NVSHMEM ->
                        throw Invariants.violated("unreachable: " + algorithm + " rejected at entry");
            }
        }
    }

    /** Copies {@code bytes} from {@code src} into the next staging half; returns the half's offset. */
    private long stage(MemorySegment src, long srcOffset, long bytes) {
        long half = takeHalf();
        MemorySegment.copy(src, srcOffset, scratch.local(), half, bytes);
        return half;
    }

    /**
     * Every rank reduces every peer's staged piece, in rank order, straight into its own buffer. The
     * staged pieces live in alternating halves, so no barrier is needed before a rank overwrites its
     * buffer or stages the next piece.
     */
    private void oneShot(HostSymmetricMemory mem, long regionOffset, MemorySegment dst, long dstOffset, long count,
                         DType dtype, ReduceOp op) {
        for (int r = 0; r < worldSize; r++) {
            setSource(r, mem.peer(r), regionOffset, dtype);
        }
        reducer.reduce(srcs, srcOffsets, srcTypes, worldSize, dst, dstOffset, dtype, count, op,
                op == ReduceOp.AVG ? worldSize : 0, true); // every rank computes every element: canonical NaNs
    }

    /**
     * Reduce-scatter then all-gather. Rank r reduces chunk r of every peer's region (rank order) and
     * writes it into chunk r of its own region, which no peer reads during this phase; a barrier;
     * then rank r copies every peer's chunk q from that peer's region. In place, a final barrier
     * keeps the caller from overwriting chunk r while peers still copy it.
     */
    private void twoShot(HostSymmetricMemory mem, long regionOffset, MemorySegment dst, long dstOffset,
                         boolean inPlace, long count, DType dtype, ReduceOp op) {
        long dsize = dtype.byteSize();
        long chunk = chunkElements(count);
        long lo = Math.min(rank * chunk, count);
        long hi = Math.min(lo + chunk, count);
        if (hi > lo) {
            for (int r = 0; r < worldSize; r++) {
                setSource(r, mem.peer(r), regionOffset + lo * dsize, dtype);
            }
            // one rank computes each element and the others copy it: bits agree without canonical NaNs
            reducer.reduce(srcs, srcOffsets, srcTypes, worldSize, mem.local(), regionOffset + lo * dsize, dtype,
                    hi - lo, op, op == ReduceOp.AVG ? worldSize : 0, false);
            if (!inPlace) {
                MemorySegment.copy(mem.local(), regionOffset + lo * dsize, dst, dstOffset + lo * dsize, (hi - lo) * dsize);
            }
        }
        sync.barrier("two-shot reduce-scatter done"); // publishes each rank's reduced chunk
        for (int q = 0; q < worldSize; q++) {
            long qlo = Math.min(q * chunk, count);
            long qhi = Math.min(qlo + chunk, count);
            if (q != rank && qhi > qlo) {
                MemorySegment.copy(mem.peer(q), regionOffset + qlo * dsize, dst, dstOffset + qlo * dsize, (qhi - qlo) * dsize);
            }
        }
        if (inPlace) {
            sync.barrier("two-shot all-gather done");
        }
    }

    /**
     * Ring reduce-scatter and all-gather, 2(N-1) steps per segment round, each rank reading only its
     * left neighbour. Chunks are cut into segments of {@code ringSegmentBytes} (in the accumulation
     * type) so partial sums fit the two ring slots.
     *
     * <p>Reduce-scatter step t (chunk k = rank-1-t): t = 0 reads the left rank's own data; later
     * steps read the partial sum the left rank wrote to its ring slot at its previous step; the
     * last step (t = N-2, chunk rank+1) writes the finished chunk into this rank's region.
     * All-gather step t copies chunk rank-t from the left rank's region into this rank's.
     *
     * <p>Synchronization: before its step g (counted over the communicator's life), a rank waits
     * until both neighbours have completed g steps, and after it tells both. Left ≥ g: the data this
     * step reads is there. Right ≥ g: the right rank has read what this step overwrites (the ring
     * slot written two steps ago, and chunks it read during reduce-scatter). Equal step counts on
     * every rank make slot parity ({@code g & 1}) agree.
     */
    private void ring(HostSymmetricMemory mem, long regionOffset, MemorySegment dst, long dstOffset,
                      boolean inPlace, long count, DType dtype, ReduceOp op) {
        int n = worldSize;
        int left = (rank - 1 + n) % n;
        int right = (rank + 1) % n;
        long dsize = dtype.byteSize();
        DType accType = dtype == DType.FLOAT64 ? DType.FLOAT64 : DType.FLOAT32;
        long chunk = chunkElements(count);
        long segment = ringSlotBytes / accType.byteSize();
        long rounds = (chunk + segment - 1) / segment;
        MemorySegment myRegion = mem.local();
        MemorySegment leftRegion = mem.peer(left);
        MemorySegment myScratch = scratch.local();
        MemorySegment leftScratch = scratch.peer(left);
        for (long round = 0; round < rounds; round++) {
            long segStart = round * segment;
            for (int t = 0; t < n - 1; t++) {
                int k = Math.floorMod(rank - 1 - t, n);
                long g = ringSteps;
                awaitNeighbours(left, right, g, "ring reduce-scatter");
                long lo = Math.min(k * chunk + segStart, chunkEnd(k, chunk, count));
                long hi = Math.min(lo + segment, chunkEnd(k, chunk, count));
                if (hi > lo) {
                    long len = hi - lo;
                    if (t == 0) {
                        setSource(0, leftRegion, regionOffset + lo * dsize, dtype);
                    } else {
                        setSource(0, leftScratch, ringSlotOffset(g - 1), accType);
                    }
                    setSource(1, myRegion, regionOffset + lo * dsize, dtype);
                    if (t == n - 2) {
                        reducer.reduce(srcs, srcOffsets, srcTypes, 2, myRegion, regionOffset + lo * dsize, dtype, len,
                                op, op == ReduceOp.AVG ? n : 0, false);
                        if (!inPlace) {
                            MemorySegment.copy(myRegion, regionOffset + lo * dsize, dst, dstOffset + lo * dsize, len * dsize);
                        }
                    } else {
                        reducer.reduce(srcs, srcOffsets, srcTypes, 2, myScratch, ringSlotOffset(g), accType, len, op, 0, false);
                    }
                }
                completeStep(left, right, g);
            }
            for (int t = 0; t < n - 1; t++) {
                int k = Math.floorMod(rank - t, n);
                long g = ringSteps;
                awaitNeighbours(left, right, g, "ring all-gather");
                long lo = Math.min(k * chunk + segStart, chunkEnd(k, chunk, count));
                long hi = Math.min(lo + segment, chunkEnd(k, chunk, count));
                if (hi > lo) {
                    long bytes = (hi - lo) * dsize;
                    MemorySegment.copy(leftRegion, regionOffset + lo * dsize, myRegion, regionOffset + lo * dsize, bytes);
                    if (!inPlace) {
                        MemorySegment.copy(myRegion, regionOffset + lo * dsize, dst, dstOffset + lo * dsize, bytes);
                    }
                }
                completeStep(left, right, g);
            }
        }
        if (inPlace) {
            sync.barrier("ring done");
        }
    }

    private void awaitNeighbours(int left, int right, long steps, String phase) {
        sync.awaitStep(left, steps, phase);
        if (right != left) {
            sync.awaitStep(right, steps, phase);
        }
    }

    private void completeStep(int left, int right, long g) {
        ringSteps = g + 1;
        // release (inside publishStep): publishes this step's writes to both neighbours
        sync.publishStep(left, ringSteps);
        if (right != left) {
            sync.publishStep(right, ringSteps);
        }
    }

    private long ringSlotOffset(long step) {
        return ringSlotsOffset + (step & 1) * ringSlotBytes;
    }

    private static long chunkEnd(int k, long chunk, long count) {
        return Math.min((k + 1) * chunk, count);
    }

    /** Elements per rank chunk: ceil(count / N) rounded up to {@link #CHUNK_ALIGN_ELEMENTS}. */
    private long chunkElements(long count) {
        long c = (count + worldSize - 1) / worldSize;
        return (c + CHUNK_ALIGN_ELEMENTS - 1) / CHUNK_ALIGN_ELEMENTS * CHUNK_ALIGN_ELEMENTS;
    }

    // ------------------------------------------------------------------ reduce-scatter, all-gather, broadcast

    /** Staged: each rank packs piece j of its N send blocks into its staging half; rank r reduces block r. */
    @Override
    public void reduceScatter(MemorySegment send, MemorySegment recv, long recvCount, DType dtype, ReduceOp op) {
        long s = control.begin("reduce-scatter");
        try {
            Problem problem = send == null || recv == null ? Problem.NULL_BUFFER
                    : either(commonProblem(recvCount, dtype, op, Algorithm.ONE_SHOT),
                            either(segmentProblem(send, false), segmentProblem(recv, true)));
            call.set(s, Kind.REDUCE_SCATTER, ordinal(dtype), ordinal(op), -1, -1, recvCount,
                    send == null ? -1 : send.byteSize(), -1, 0, recv == null ? -1 : recv.byteSize(), problem);
            boolean stageFirst = worldSize > 1 && recvCount > 0 && problem == Problem.NONE
                    && buffersLargeEnough(call, call.bufferBytes(), call.recvBytes());
            long dsize = stageFirst ? dtype.byteSize() : 1;
            long pieceElements = halfBytes / ((long) worldSize * dsize);
            int halfBefore = nextHalf;
            long firstHalf = stageFirst ? stageBlocks(send, recvCount, 0, Math.min(pieceElements, recvCount), pieceElements, dsize) : -1;
            enter(call, halfBefore);
            if (recvCount == 0) {
                return;
            }
            if (worldSize == 1) {
                MemorySegment.copy(send, 0, recv, 0, recvCount * dtype.byteSize());
                return;
            }
            for (long start = 0; start < recvCount; start += pieceElements) {
                long len = Math.min(pieceElements, recvCount - start);
                long half = firstHalf;
                if (start > 0) {
                    half = stageBlocks(send, recvCount, start, len, pieceElements, dsize);
                    sync.barrier("staged piece");
                }
                for (int r = 0; r < worldSize; r++) {
                    setSource(r, scratch.peer(r), half + rank * pieceElements * dsize, dtype);
                }
                reducer.reduce(srcs, srcOffsets, srcTypes, worldSize, recv, start * dsize, dtype, len, op,
                        op == ReduceOp.AVG ? worldSize : 0, false); // each block is computed by one rank only
            }
        } catch (Throwable t) {
            throw failedInside(t);
        } finally {
            control.completed(s); // no-op when it failed
        }
    }

    /** Packs elements [start, start+len) of each of the N send blocks into the next staging half. */
    private long stageBlocks(MemorySegment send, long blockElements, long start, long len, long pieceElements, long dsize) {
        long half = takeHalf();
        for (int b = 0; b < worldSize; b++) {
            MemorySegment.copy(send, (b * blockElements + start) * dsize, scratch.local(), half + b * pieceElements * dsize,
                    len * dsize);
        }
        return half;
    }

    /** Staged: each rank puts piece j of its send buffer in its staging half; every rank copies all N. */
    @Override
    public void allGather(MemorySegment send, MemorySegment recv, long sendCount, DType dtype) {
        long s = control.begin("all-gather");
        try {
            Problem problem = send == null || recv == null ? Problem.NULL_BUFFER
                    : either(commonProblem(sendCount, dtype, ReduceOp.SUM, Algorithm.ONE_SHOT),
                            either(segmentProblem(send, false), segmentProblem(recv, true)));
            call.set(s, Kind.ALL_GATHER, ordinal(dtype), -1, -1, -1, sendCount,
                    send == null ? -1 : send.byteSize(), -1, 0, recv == null ? -1 : recv.byteSize(), problem);
            boolean stageFirst = worldSize > 1 && sendCount > 0 && problem == Problem.NONE
                    && buffersLargeEnough(call, call.bufferBytes(), call.recvBytes());
            long dsize = stageFirst ? dtype.byteSize() : 1;
            long pieceElements = halfBytes / dsize;
            int halfBefore = nextHalf;
            long firstHalf = stageFirst ? stage(send, 0, Math.min(pieceElements, sendCount) * dsize) : -1;
            enter(call, halfBefore);
            if (sendCount == 0) {
                return;
            }
            if (worldSize == 1) {
                MemorySegment.copy(send, 0, recv, 0, sendCount * dtype.byteSize());
                return;
            }
            for (long start = 0; start < sendCount; start += pieceElements) {
                long len = Math.min(pieceElements, sendCount - start);
                long half = firstHalf;
                if (start > 0) {
                    half = stage(send, start * dsize, len * dsize);
                    sync.barrier("staged piece");
                }
                for (int q = 0; q < worldSize; q++) {
                    MemorySegment.copy(scratch.peer(q), half, recv, (q * sendCount + start) * dsize, len * dsize);
                }
            }
        } catch (Throwable t) {
            throw failedInside(t);
        } finally {
            control.completed(s); // no-op when it failed
        }
    }

    /**
     * In place: rank r reduces block r of every peer's region (rank order) into block r of its own
     * region, which no peer reads during this call; the same loop as TWO_SHOT's first phase, so the
     * same bits. A final barrier keeps each rank from overwriting its region while peers still read
     * their blocks from it.
     */
    @Override
    public void reduceScatter(SymmetricMemory memory, long offsetBytes, long count, DType dtype, ReduceOp op) {
        long s = control.begin("reduce-scatter");
        try {
            Problem problem = commonProblem(count, dtype, op, Algorithm.TWO_SHOT);
            problem = problem != Problem.NONE ? problem : inPlaceProblem(memory, offsetBytes);
            HostSymmetricMemory mem = problem == Problem.NONE ? (HostSymmetricMemory) memory : null;
            call.set(s, Kind.REDUCE_SCATTER, ordinal(dtype), ordinal(op), -1, -1, count,
                    mem == null ? -1 : mem.byteSize() - offsetBytes, memory == null ? -1 : memory.id(), offsetBytes, 0, problem);
            enter(call, nextHalf); // publishes every rank's data in its region
            if (count == 0 || worldSize == 1) {
                return; // one rank: its block already holds the result (x/1 == x for AVG)
            }
            ShardPartition blocks = ShardPartition.of(count, worldSize, dtype);
            long dsize = dtype.byteSize();
            long lo = blocks.start(rank);
            long len = blocks.size(rank);
            if (len > 0) {
                for (int r = 0; r < worldSize; r++) {
                    setSource(r, mem.peer(r), offsetBytes + lo * dsize, dtype);
                }
                // one rank computes each element, as TWO_SHOT does: no canonical NaNs, the same bits
                reducer.reduce(srcs, srcOffsets, srcTypes, worldSize, mem.local(), offsetBytes + lo * dsize, dtype, len, op,
                        op == ReduceOp.AVG ? worldSize : 0, false);
            }
            sync.barrier("reduce-scatter done"); // every rank has read its block from every region
        } catch (Throwable t) {
            throw failedInside(t);
        } finally {
            control.completed(s); // no-op when it failed
        }
    }

    /**
     * In place: after the entry barrier (which publishes every rank's own block), rank r copies
     * block q from rank q's region into its own for every q != r. No rank writes a block a peer
     * reads: peers read only block q of rank q. A final barrier keeps rank q from overwriting block q
     * while peers still copy it.
     */
    @Override
    public void allGather(SymmetricMemory memory, long offsetBytes, long count, DType dtype) {
        long s = control.begin("all-gather");
        try {
            Problem problem = commonProblem(count, dtype, ReduceOp.SUM, Algorithm.TWO_SHOT);
            problem = problem != Problem.NONE ? problem : inPlaceProblem(memory, offsetBytes);
            HostSymmetricMemory mem = problem == Problem.NONE ? (HostSymmetricMemory) memory : null;
            call.set(s, Kind.ALL_GATHER, ordinal(dtype), -1, -1, -1, count,
                    mem == null ? -1 : mem.byteSize() - offsetBytes, memory == null ? -1 : memory.id(), offsetBytes, 0, problem);
            enter(call, nextHalf); // publishes every rank's own block
            if (count == 0 || worldSize == 1) {
                return;
            }
            ShardPartition blocks = ShardPartition.of(count, worldSize, dtype);
            long dsize = dtype.byteSize();
            for (int q = 0; q < worldSize; q++) {
                long len = blocks.size(q);
                if (q != rank && len > 0) {
                    long at = offsetBytes + blocks.start(q) * dsize;
                    MemorySegment.copy(mem.peer(q), at, mem.local(), at, len * dsize);
                }
            }
            sync.barrier("all-gather done"); // every rank has copied every block
        } catch (Throwable t) {
            throw failedInside(t);
        } finally {
            control.completed(s); // no-op when it failed
        }
    }

    /** What makes {@code memory} unusable for an in-place call on this communicator, or NONE. */
    private Problem inPlaceProblem(SymmetricMemory memory, long offsetBytes) {
        if (memory == null) {
            return Problem.NULL_BUFFER;
        }
        if (!(memory instanceof HostSymmetricMemory h) || h.group() != group) {
            return Problem.FOREIGN_MEMORY;
        }
        return offsetBytes < 0 || offsetBytes > memory.byteSize() ? Problem.OFFSET_OUT_OF_RANGE : regionProblem(h);
    }

    /** Staged: the root puts piece j in its staging half; every other rank copies it out. */
    @Override
    public void broadcast(MemorySegment buffer, long count, DType dtype, int root) {
        long s = control.begin("broadcast");
        try {
            Problem problem = buffer == null ? Problem.NULL_BUFFER
                    : root < 0 || root >= worldSize ? Problem.ROOT_OUT_OF_RANGE
                    : either(commonProblem(count, dtype, ReduceOp.SUM, Algorithm.ONE_SHOT),
                            segmentProblem(buffer, rank != root)); // the root only reads its buffer
            call.set(s, Kind.BROADCAST, ordinal(dtype), -1, -1, root, count,
                    buffer == null ? -1 : buffer.byteSize(), -1, 0, 0, problem);
            boolean staging = worldSize > 1 && count > 0 && problem == Problem.NONE
                    && buffersLargeEnough(call, call.bufferBytes(), 0);
            long dsize = staging ? dtype.byteSize() : 1;
            long pieceElements = halfBytes / dsize;
            int halfBefore = nextHalf;
            // every rank takes the half (the root fills it), so half parity stays equal on all ranks
            long firstHalf = !staging ? -1 : rank == root ? stage(buffer, 0, Math.min(pieceElements, count) * dsize) : takeHalf();
            enter(call, halfBefore);
            if (!staging) {
                return;
            }
            for (long start = 0; start < count; start += pieceElements) {
                long len = Math.min(pieceElements, count - start);
                long half = firstHalf;
                if (start > 0) {
                    half = rank == root ? stage(buffer, start * dsize, len * dsize) : takeHalf();
                    sync.barrier("staged piece");
                }
                if (rank != root) {
                    MemorySegment.copy(scratch.peer(root), half, buffer, start * dsize, len * dsize);
                }
            }
        } catch (Throwable t) {
            throw failedInside(t);
        } finally {
            control.completed(s); // no-op when it failed
        }
    }

    @Override
    public void barrier() {
        control.barrier();
    }

    // ------------------------------------------------------------------ entry check

    /**
     * Arrives at the entry barrier with this rank's descriptor and checks every rank's
     * ({@link ControlPlane#arriveAndCheck}). All ranks read the same descriptors, so all reach the
     * same verdict: all proceed, or all throw the same message and restore the staging parity they
     * had before the call.
     */
    private void enter(Descriptor mine, int halfBefore) {
        String error = control.arriveAndCheck(mine);
        if (error != null) {
            nextHalf = halfBefore;
            throw new CollectiveMismatchException(error);
        }
        control.started(mine);
    }

    /** Whether buffers of these sizes hold the call's count (overflow counts as too small). No allocation. */
    private boolean buffersLargeEnough(Descriptor d, long bufferBytes, long recvBytes) {
        return control.buffersLargeEnough(d, bufferBytes, recvBytes);
    }

    private Problem commonProblem(long count, DType dtype, ReduceOp op, Algorithm algorithm) {
        if (dtype == null || op == null || algorithm == null) {
            return Problem.NULL_ARGUMENT;
        }
        if (count < 0) {
            return Problem.NEGATIVE_COUNT;
        }
        if (!supports(algorithm)) {
            return Problem.UNSUPPORTED_ALGORITHM;
        }
        return Problem.NONE;
    }

    /**
     * What makes a caller's segment unusable on this rank ({@link Problem#ofSegment}), found before
     * the entry barrier so the verdict travels in the descriptor and every rank refuses the call
     * before any byte moves. Without it the access inside the collective threw on this rank only,
     * after peers had read or written shared data (and, with ONE_SHOT, returned).
     *
     * @param written whether the collective writes the segment on this rank (a destination)
     */
    private static Problem segmentProblem(MemorySegment segment, boolean written) {
        return Problem.ofSegment(segment, written);
    }

    /**
     * What makes this rank's region of {@code memory} unusable for an in-place collective, which
     * writes it: the memory closed here, or (registered memory) its segment freed, confined to
     * another thread or read-only.
     */
    private static Problem regionProblem(HostSymmetricMemory memory) {
        return memory.isClosed() ? Problem.FREED_BUFFER : segmentProblem(memory.local(), true);
    }

    /** The first of two problems that is one. */
    private static Problem either(Problem first, Problem second) {
        return first != Problem.NONE ? first : second;
    }

    private static int ordinal(Enum<?> e) {
        return e == null ? -1 : e.ordinal();
    }

    private long takeHalf() {
        long offset = nextHalf * halfBytes;
        nextHalf ^= 1;
        return offset;
    }

    private void setSource(int i, MemorySegment segment, long offset, DType type) {
        srcs[i] = segment;
        srcOffsets[i] = offset;
        srcTypes[i] = type;
    }

    /**
     * A collective failed on this rank with {@code t}. Unless the failure is a mismatch (nothing was
     * written, the group stays usable) or a peer's failure seen here, this rank poisons the group at
     * once, so every peer waiting for it in this collective throws within microseconds naming it,
     * instead of waiting out the timeout. Returns what to throw: {@code t}, or, when a peer had
     * already aborted (and this failure is a consequence, such as reading memory the peer freed),
     * the error naming that peer with {@code t} attached.
     */
    private RuntimeException failedInside(Throwable t) {
        control.failed(t); // flight recorder: marks the collective failed and dumps this rank's last ones
        if (t instanceof CollectiveMismatchException || t instanceof PeerTimeoutException) {
            return (RuntimeException) t;
        }
        if (sync.isAborted()) {
            try {
                sync.checkNotAborted("after a local failure");
            } catch (PeerTimeoutException peerFirst) {
                peerFirst.addSuppressed(t);
                return peerFirst;
            }
        }
        sync.abort("rank=" + rank + " failed inside " + sync.currentOp() + ": " + t);
        if (t instanceof RuntimeException r) {
            return r;
        }
        if (t instanceof Error e) {
            throw e;
        }
        return new SymmemException("rank=" + rank + " failed inside " + sync.currentOp() + " (fix: see the cause"
                + " below; the group is aborted, so its peers stop too)", t);
    }

    @Override
    public void abort(String reason) {
        control.abort(reason);
    }

    /**
     * {@inheritDoc}
     *
     * <p>Also {@link FlightRecording}: turns this rank's flight recorder off and on between collectives, for
     * benchmarks of its cost (empty when this communicator was made without one).
     */
    @Override
    public <T> java.util.Optional<T> unwrap(Class<T> type) {
        if (type == FlightRecording.class) {
            return java.util.Optional.ofNullable(control.recording()).map(type::cast);
        }
        return Communicator.super.unwrap(type);
    }

    @Override
    public void close() {
        scratch.close();
    }

    @Override
    public String toString() {
        return "HostCommunicator[" + transportName() + ", rank=" + rank + "/" + worldSize + ", reducer=" + reducer.name() + "]";
    }
}
