package org.symmem4j.parallel.control;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.VarHandle;

/**
 * Layout of one rank's signal pad: the flags peers write to synchronize with it. Every field that a
 * different rank writes sits on its own 128-byte line (x86 prefetches 64-byte lines in adjacent
 * pairs, so 128 keeps two writers off one prefetch pair).
 *
 * <pre>
 *  offset                      field                                     written by       read by
 *  0                           HEADER: magic, version, worldSize,        owner, once      peers, verify
 *                                      ownerRank, signalSlots, dataBytes,
 *                                      launch token (long: the group's launch,
 *                                      so a file of another launch is refused)
 *  128                         ABORT word (long): 0 = none, -1 = being   any rank (CAS)   owner
 *                                      written, r+1 = aborted by rank r
 *  256..511                    ABORT reason: int length + UTF-8 bytes    the CAS winner   owner
 *  512                         WAIT line: heartbeat (long), bumped while owner           peers, on a
 *                                      the owner is blocked in a wait, and                timeout only
 *                                      waitingFor (long, r+1 of the first rank
 *                                      it waits for, 0 = none): a timed-out
 *                                      waiter follows these to the rank that
 *                                      holds everyone up (neither arrives nor
 *                                      waits), instead of naming a neighbour
 *                                      that is itself blocked
 *  768 + 128*(2p + seq%2)     ENTRY line of rank p for its op number    rank p           owner
 *                                      seq: epoch (long, seq+1) and the op's
 *                                      descriptor ({@link OpDescriptorLayout});
 *                                      one line, so the owner's wait and its
 *                                      argument check read what one cache-line
 *                                      transfer brought; two alternate, so rank
 *                                      p writing op seq+1 never overwrites op
 *                                      seq while the owner still checks it
 *  768 + 128*(2N+p)            BARRIER slot of rank p (long epoch)       rank p           owner
 *  768 + 128*(3N+p)            STEP slot of rank p (long ring step)      rank p           owner
 *  768 + 128*(4N+p)            LEFT slot of rank p (long): 1 once rank   rank p           owner
 *                                      p closed this memory; a rank that
 *                                      waits for p and sees it fails at
 *                                      once, a closing rank waits for it
 *  768 + 128*(5N+k)            SIGNAL slot k, k &lt; signalSlots (long)     any rank         owner
 *  rounded up to 4096          end
 * </pre>
 *
 * Slots only grow (epochs and step counters are monotonic), so a slot never has to be reset and a
 * late reader can never mistake an old value for a new one.
 */
public final class SignalPadLayout {

    /** Bytes per pad line: every field a different rank writes gets its own line. */
    public static final int LINE_BYTES = 128;
    /** Header magic, {@code "SYMP"}. */
    public static final int MAGIC = 0x53594D50; // "SYMP"
    /** Pad layout version; ranks of different versions refuse each other's pads. */
    public static final int VERSION = 3;
    /** User signal slots a pad has unless told otherwise. */
    public static final int DEFAULT_SIGNAL_SLOTS = 64;

    /** Byte offset of the magic (int). */
    public static final long MAGIC_OFFSET = 0;
    /** Byte offset of the layout version (int). */
    public static final long VERSION_OFFSET = 4;
    /** Byte offset of the world size (int). */
    public static final long WORLD_SIZE_OFFSET = 8;
    /** Byte offset of the owner's rank (int). */
    public static final long OWNER_RANK_OFFSET = 12;
    /** Byte offset of the number of signal slots (int). */
    public static final long SIGNAL_SLOTS_OFFSET = 16;
    /** Byte offset of the data region's size in bytes (long). */
    public static final long DATA_BYTES_OFFSET = 24;
    /** Byte offset of the launch token (long): equal in every pad of one group's launch, 0 where there is none. */
    public static final long LAUNCH_TOKEN_OFFSET = 32;

    /** Byte offset of the abort word (long): 0 none, {@link #ABORT_CLAIMED}, or r+1 when rank r aborted. */
    public static final long ABORT_WORD_OFFSET = LINE_BYTES;
    /** Byte offset of the abort reason: an int length, then UTF-8 bytes. */
    public static final long ABORT_REASON_OFFSET = 2L * LINE_BYTES;
    /** Most UTF-8 bytes of abort reason the pad holds. */
    public static final int ABORT_REASON_MAX_BYTES = 2 * LINE_BYTES - Integer.BYTES;
    /** Byte offset of the owner's wait heartbeat (long), bumped (release) while the owner is blocked in a wait. */
    public static final long WAIT_HEARTBEAT_OFFSET = 4L * LINE_BYTES;
    /** Byte offset of the rank the owner waits for (long: rank + 1, 0 = none), written before each heartbeat. */
    public static final long WAITING_FOR_OFFSET = WAIT_HEARTBEAT_OFFSET + Long.BYTES;
    /** Byte offset of the first entry line; all per-rank and signal slots follow it. */
    public static final long SLOTS_BASE = 6L * LINE_BYTES;

    /** {@code abortWord} while the winner of the abort CAS is still writing its reason. */
    public static final long ABORT_CLAIMED = -1;

    /** Plain/acquire/release/CAS access to a long at (segment, offset). */
    public static final VarHandle LONG = ValueLayout.JAVA_LONG.varHandle();

    private SignalPadLayout() {
    }

    /**
     * The entry line rank {@code fromRank} writes for its op number {@code seq}; two alternate by parity.
     *
     * @param fromRank the writing rank
     * @param seq the op's sequence number
     * @return byte offset of the line in the owner's pad
     */
    public static long entryLineOffset(int fromRank, long seq) {
        return SLOTS_BASE + (long) LINE_BYTES * (2L * fromRank + (seq & 1));
    }

    /**
     * The barrier slot (long epoch) rank {@code fromRank} writes.
     *
     * @param worldSize ranks in the group
     * @param fromRank the writing rank
     * @return byte offset of the slot in the owner's pad
     */
    public static long barrierSlotOffset(int worldSize, int fromRank) {
        return SLOTS_BASE + (long) LINE_BYTES * (2L * worldSize + fromRank);
    }

    /**
     * The step slot (long ring step) rank {@code fromRank} writes.
     *
     * @param worldSize ranks in the group
     * @param fromRank the writing rank
     * @return byte offset of the slot in the owner's pad
     */
    public static long stepSlotOffset(int worldSize, int fromRank) {
        return SLOTS_BASE + (long) LINE_BYTES * (3L * worldSize + fromRank);
    }

    /**
     * The left slot (long, 1 once the rank closed the memory) rank {@code fromRank} writes.
     *
     * @param worldSize ranks in the group
     * @param fromRank the writing rank
     * @return byte offset of the slot in the owner's pad
     */
    public static long leftSlotOffset(int worldSize, int fromRank) {
        return SLOTS_BASE + (long) LINE_BYTES * (4L * worldSize + fromRank);
    }

    /**
     * User signal slot {@code slot} (long), written by any rank.
     *
     * @param worldSize ranks in the group
     * @param slot the slot index, {@code < signalSlots}
     * @return byte offset of the slot in the owner's pad
     */
    public static long signalSlotOffset(int worldSize, int slot) {
        return SLOTS_BASE + (long) LINE_BYTES * (5L * worldSize + slot);
    }

    /**
     * Bytes of one pad for a group of {@code worldSize} ranks with {@code signalSlots} user slots.
     *
     * @param worldSize ranks in the group
     * @param signalSlots user signal slots
     * @return the pad size in bytes, rounded up to 4096
     */
    public static long padBytes(int worldSize, int signalSlots) {
        long end = signalSlotOffset(worldSize, signalSlots);
        return (end + 4095) & ~4095L;
    }

    /**
     * Writes the header of a freshly zeroed pad; done by the owner before the pad is shared.
     *
     * @param pad the owner's pad
     * @param worldSize ranks in the group
     * @param ownerRank the owner's rank
     * @param signalSlots user signal slots
     * @param dataBytes size of the data region in bytes
     */
    public static void initialize(MemorySegment pad, int worldSize, int ownerRank, int signalSlots, long dataBytes) {
        initialize(pad, worldSize, ownerRank, signalSlots, dataBytes, 0);
    }

    /**
     * Writes the header of a freshly zeroed pad of a group's launch; done by the owner before the pad is shared.
     *
     * @param pad the owner's pad
     * @param worldSize ranks in the group
     * @param ownerRank the owner's rank
     * @param signalSlots user signal slots
     * @param dataBytes size of the data region in bytes
     * @param launchToken the group's launch token (every rank learns it when the group forms), 0 for none
     */
    public static void initialize(MemorySegment pad, int worldSize, int ownerRank, int signalSlots, long dataBytes,
                                  long launchToken) {
        pad.set(ValueLayout.JAVA_LONG, LAUNCH_TOKEN_OFFSET, launchToken);
        pad.set(ValueLayout.JAVA_INT, MAGIC_OFFSET, MAGIC);
        pad.set(ValueLayout.JAVA_INT, VERSION_OFFSET, VERSION);
        pad.set(ValueLayout.JAVA_INT, WORLD_SIZE_OFFSET, worldSize);
        pad.set(ValueLayout.JAVA_INT, OWNER_RANK_OFFSET, ownerRank);
        pad.set(ValueLayout.JAVA_INT, SIGNAL_SLOTS_OFFSET, signalSlots);
        pad.set(ValueLayout.JAVA_LONG, DATA_BYTES_OFFSET, dataBytes);
    }

    /**
     * Checks a mapped peer pad: right magic, version, size and owner. Catches a rank that mapped
     * the wrong file or a peer built from another version of symmem4j.
     *
     * @param pad the mapped peer pad
     * @param worldSize expected ranks in the group
     * @param ownerRank expected owner rank
     * @param signalSlots expected user signal slots
     * @param dataBytes expected data region size in bytes
     * @throws IllegalStateException if the pad is too small or any header field differs
     */
    public static void verify(MemorySegment pad, int worldSize, int ownerRank, int signalSlots, long dataBytes) {
        verify(pad, worldSize, ownerRank, signalSlots, dataBytes, 0);
    }

    /**
     * As {@link #verify(MemorySegment, int, int, int, long)}, and checks that the pad belongs to this group's
     * launch: a file that another launch's process created (two jobs started with one run id) is refused.
     *
     * @param pad the mapped peer pad
     * @param worldSize expected ranks in the group
     * @param ownerRank expected owner rank
     * @param signalSlots expected user signal slots
     * @param dataBytes expected data region size in bytes
     * @param launchToken the group's launch token
     * @throws IllegalStateException if the pad is too small, any header field differs, or the token differs
     */
    public static void verify(MemorySegment pad, int worldSize, int ownerRank, int signalSlots, long dataBytes,
                              long launchToken) {
        long need = padBytes(worldSize, signalSlots);
        if (pad.byteSize() < need) {
            throw new IllegalStateException("signal pad of rank " + ownerRank + ": size=" + pad.byteSize()
                    + " expected>=" + need + " (all ranks must run the same symmem4j version and allocate the same"
                    + " size; fix: put the same symmem4j jars on every rank's class path and pass the same sizes)");
        }
        int magic = pad.get(ValueLayout.JAVA_INT, MAGIC_OFFSET);
        int version = pad.get(ValueLayout.JAVA_INT, VERSION_OFFSET);
        int ws = pad.get(ValueLayout.JAVA_INT, WORLD_SIZE_OFFSET);
        int owner = pad.get(ValueLayout.JAVA_INT, OWNER_RANK_OFFSET);
        int slots = pad.get(ValueLayout.JAVA_INT, SIGNAL_SLOTS_OFFSET);
        long bytes = pad.get(ValueLayout.JAVA_LONG, DATA_BYTES_OFFSET);
        if (magic != MAGIC || version != VERSION || ws != worldSize || owner != ownerRank || slots != signalSlots
                || bytes != dataBytes) {
            throw new IllegalStateException(String.format(
                    "signal pad of rank %d does not match: magic=0x%x version=%d worldSize=%d owner=%d slots=%d"
                            + " dataBytes=%d expected magic=0x%x version=%d worldSize=%d owner=%d slots=%d dataBytes=%d"
                            + " (all ranks must run the same symmem4j version and allocate the same size; fix: put the"
                            + " same symmem4j jars on every rank's class path and pass the same sizes)",
                    ownerRank, magic, version, ws, owner, slots, bytes, MAGIC, VERSION, worldSize, ownerRank,
                    signalSlots, dataBytes));
        }
        long token = pad.get(ValueLayout.JAVA_LONG, LAUNCH_TOKEN_OFFSET);
        if (token != launchToken) {
            throw new IllegalStateException(String.format("signal pad of rank %d belongs to another launch: launch token"
                    + "=%016x expected=%016x (a process of another job with the same run id created it; fix:"
                    + " give each job"
                    + " its own SYMMEM4J_RUN_ID and MASTER_PORT)", ownerRank, token, launchToken));
        }
    }
}
