package org.symmem4j.parallel.layout;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.VarHandle;
import java.nio.charset.StandardCharsets;

/**
 * Layout of one rank's part of a parameter cache: a directory of named entries, a line of last-use ticks, and a
 * heap of immutable data blocks. The rank owns its part: only it writes the directory and the heap; every rank
 * reads them, and writes only the last-use ticks.
 *
 * <pre>
 *  offset                       field                                          written by        read by
 *  0                            HEADER: magic (int), version (int), slots      owner, once       every rank, verify
 *                               (int), owner (int), heap bytes (long)
 *  128 + 128*i                  SLOT i (a seqlock):                            owner             every rank
 *                                 +0  word (long): even = stable, odd = being
 *                                     written; +2 per change
 *                                 +8  name hash (long); 0 = free slot
 *                                 +16 current block (long offset in the heap, -1 none)
 *                                 +24 current length (long bytes)
 *                                 +32 previous block (long, -1 none)
 *                                 +40 previous length (long)
 *                                 +48 entry version (long, 1 at the first put)
 *                                 +56 name length (int), +60 name (UTF-8, at most 68 bytes)
 *  128 + 128*slots + 8*i        LAST USE of slot i (long tick, opaque)         any reader        owner (LRU)
 *  heap = align64(that end)     BLOCKS, each 64-byte aligned:                  owner             every rank
 *                                 +0  generation (long): odd while the block holds a published version,
 *                                     +1 when it is freed (readers holding a view of it see it change);
 *                                     never reused within a part (a salted counter of the owner's)
 *                                 +64 data
 * </pre>
 *
 * The GPU form ({@code org.symmem4j.state.DeviceParameterCache}) splits a part in two: its <b>directory</b> (header,
 * slots, last-use ticks, at the offsets above, then a line of two GENERATIONS per slot) lives in host memory that the
 * ranks share ({@code Group.hostTransport()}: threads of one JVM, or {@code /dev/shm} mapped by processes), so a
 * lookup is host loads under the same seqlock; its <b>heap</b> lives in GPU memory at offset 0, blocks laid out as
 * above, but their header is not written there (readers never read it: a block's generation is in the directory).
 *
 * <pre>
 *  host, GPU form:
 *  0 .. heapOffset(slots)        header, slots, last-use ticks, as above       (as above)        (as above)
 *  heapOffset(slots) + 16*i      GENERATIONS of slot i: +0 the current         owner, inside     every rank: in the
 *                                block's generation, +8 the previous one's     the slot's        slot's window, and
 *                                (0 when none); odd while published            seqlock           a view's check
 *  GPU, GPU form:
 *  block (64-byte aligned)       64 bytes reserved (not written), data at +64  owner (copies)    every rank (kernels,
 *                                                                                                copies)
 * </pre>
 *
 * There a block's generation is published by the slot that lists it, and freed by the slot's change that drops it
 * (before the owner reuses its range): a view is valid while its generation is one of its slot's two
 * ({@link #generationsHold}); generations are never reused within a part, so a slot reused by another name never
 * answers for an old view.
 *
 * A put writes its data into a fresh block, then publishes it by the slot's seqlock (the old current becomes the
 * previous, the older previous is freed). So a reader's zero-copy view of a version stays valid across one
 * replacement, and a reader can always tell afterwards whether its view was freed while it read.
 */
public final class ParameterCacheLayout {

    /** Header magic, {@code "SYPC"}. */
    public static final int MAGIC = 0x53595043;
    /** Layout version. */
    public static final int VERSION = 1;
    /** Bytes of the header and of each slot. */
    public static final int LINE_BYTES = 128;
    /** Most UTF-8 bytes of a name. */
    public static final int MAX_NAME_BYTES = 68;
    /** Bytes of a block header; blocks and their data are 64-byte aligned. */
    public static final int BLOCK_HEADER_BYTES = 64;

    /** Slot field offsets. */
    public static final int SLOT_WORD = 0;
    /** Name hash. */
    public static final int SLOT_HASH = 8;
    /** Current block. */
    public static final int SLOT_CURRENT = 16;
    /** Current length. */
    public static final int SLOT_CURRENT_LENGTH = 24;
    /** Previous block. */
    public static final int SLOT_PREVIOUS = 32;
    /** Previous length. */
    public static final int SLOT_PREVIOUS_LENGTH = 40;
    /** Entry version. */
    public static final int SLOT_VERSION = 48;
    /** Name length. */
    public static final int SLOT_NAME_LENGTH = 56;
    /** Name bytes. */
    public static final int SLOT_NAME = 60;
    /** Block header field: the generation (long), odd while published. */
    public static final int BLOCK_GENERATION = 0;
    /** Block header field: the entry version it holds (long). */
    public static final int BLOCK_VERSION = 8;
    /** Block header field: its data bytes (long). */
    public static final int BLOCK_LENGTH = 16;

    private static final VarHandle LONG = ValueLayout.JAVA_LONG.varHandle();

    private ParameterCacheLayout() {
    }

    /**
     * Byte offset of the heap.
     *
     * @param slots directory slots
     * @return heap offset, 64-byte aligned
     */
    public static long heapOffset(int slots) {
        return align64(LINE_BYTES + (long) LINE_BYTES * slots + 8L * slots);
    }

    /**
     * Bytes of one rank's part.
     *
     * @param slots     directory slots
     * @param heapBytes heap bytes
     * @return total bytes
     */
    public static long totalBytes(int slots, long heapBytes) {
        return heapOffset(slots) + heapBytes;
    }

    /**
     * Byte offset of slot {@code i}.
     *
     * @param i the slot
     * @return its offset
     */
    public static long slotOffset(int i) {
        return LINE_BYTES + (long) LINE_BYTES * i;
    }

    /**
     * Byte offset of slot {@code i}'s last-use tick.
     *
     * @param slots directory slots
     * @param i     the slot
     * @return its offset
     */
    public static long lastUseOffset(int slots, int i) {
        return LINE_BYTES + (long) LINE_BYTES * slots + 8L * i;
    }

    /**
     * {@code n} rounded up to 64.
     *
     * @param n bytes
     * @return aligned bytes
     */
    public static long align64(long n) {
        return (n + 63) & -64L;
    }

    /**
     * Writes a fresh part's header and empties its directory (the owner, before the barrier that publishes it).
     *
     * @param part      the owner's buffer
     * @param slots     directory slots
     * @param heapBytes heap bytes
     * @param owner     the owner's rank
     */
    public static void format(MemorySegment part, int slots, long heapBytes, int owner) {
        part.asSlice(0, heapOffset(slots)).fill((byte) 0);
        part.set(ValueLayout.JAVA_INT, 0, MAGIC);
        part.set(ValueLayout.JAVA_INT, 4, VERSION);
        part.set(ValueLayout.JAVA_INT, 8, slots);
        part.set(ValueLayout.JAVA_INT, 12, owner);
        part.set(ValueLayout.JAVA_LONG, 16, heapBytes);
    }

    /**
     * Checks a part's header.
     *
     * @param part      a rank's buffer as mapped here
     * @param slots     expected slots
     * @param heapBytes expected heap bytes
     * @param owner     expected owner
     * @throws IllegalStateException naming the field that differs
     */
    public static void verify(MemorySegment part, int slots, long heapBytes, int owner) {
        check(part.get(ValueLayout.JAVA_INT, 0) == MAGIC, "magic", part.get(ValueLayout.JAVA_INT, 0), MAGIC, owner,
                " (not a parameter cache: memory of another structure)");
        check(part.get(ValueLayout.JAVA_INT, 4) == VERSION, "version", part.get(ValueLayout.JAVA_INT, 4), VERSION, owner,
                " (ranks run different symmem4j versions)");
        check(part.get(ValueLayout.JAVA_INT, 8) == slots, "slots", part.get(ValueLayout.JAVA_INT, 8), slots, owner,
                " (every rank must pass the same maxEntries)");
        check(part.get(ValueLayout.JAVA_INT, 12) == owner, "owner", part.get(ValueLayout.JAVA_INT, 12), owner, owner,
                " (the part belongs to another rank)");
        check(part.get(ValueLayout.JAVA_LONG, 16) == heapBytes, "heapBytes", part.get(ValueLayout.JAVA_LONG, 16),
                heapBytes, owner, " (every rank must pass the same byte budget)");
    }

    private static void check(boolean ok, String field, long found, long expected, int owner, String fix) {
        if (!ok) {
            throw new IllegalStateException("parameter cache header mismatch in rank " + owner + "'s part: field="
                    + field + " found=" + found + " expected=" + expected + fix + "; fix: create the cache on every"
                    + " rank with the same arguments, from the same symmem4j version");
        }
    }

    // ---- slot seqlock ----

    /**
     * A slot word with acquire: pairs with the owner's release in {@link #endWrite}; the fields are then seen.
     *
     * @param part the owner's buffer
     * @param slot the slot's offset
     * @return the word (odd while being written)
     */
    public static long wordAcquire(MemorySegment part, long slot) {
        return (long) LONG.getAcquire(part, slot + SLOT_WORD);
    }

    /**
     * A reader's second read of the word, after its field reads ({@link VarHandle#loadLoadFence} orders them).
     *
     * @param part the owner's buffer
     * @param slot the slot's offset
     * @return the word
     */
    public static long wordRecheck(MemorySegment part, long slot) {
        VarHandle.loadLoadFence(); // the field reads before complete before the word is read again
        return (long) LONG.getOpaque(part, slot + SLOT_WORD);
    }

    /**
     * The owner starts changing a slot: the word turns odd before any field changes.
     *
     * @param part the owner's buffer
     * @param slot the slot's offset
     * @return the odd word
     */
    public static long beginWrite(MemorySegment part, long slot) {
        long odd = (long) LONG.get(part, slot + SLOT_WORD) + 1;
        LONG.setOpaque(part, slot + SLOT_WORD, odd);
        VarHandle.storeStoreFence(); // the odd word is visible before any field store after it
        return odd;
    }

    /**
     * The owner ends a change: the word turns even.
     *
     * @param part the owner's buffer
     * @param slot the slot's offset
     * @param odd  what {@link #beginWrite} returned
     */
    public static void endWrite(MemorySegment part, long slot, long odd) {
        // release: publishes the slot's fields (and the block data written before) to readers' acquire of the word
        LONG.setRelease(part, slot + SLOT_WORD, odd + 1);
    }

    /**
     * A block's generation with acquire: pairs with {@link #setGeneration}.
     *
     * @param part  the owner's buffer
     * @param block the block's heap-relative offset
     * @param heap  the heap's offset
     * @return the generation
     */
    public static long generationAcquire(MemorySegment part, long heap, long block) {
        return (long) LONG.getAcquire(part, heap + block);
    }

    /**
     * Sets a block's generation (the owner: odd when it publishes data, even when it frees it).
     *
     * @param part       the owner's buffer
     * @param heap       the heap's offset
     * @param block      the block's heap-relative offset
     * @param generation the new generation
     */
    public static void setGeneration(MemorySegment part, long heap, long block, long generation) {
        // release: a freed block's readers see the change before the owner's later writes into it (a storeStore
        // fence follows in the caller before data is reused); a published block's data precedes it
        LONG.setRelease(part, heap + block, generation);
        VarHandle.storeStoreFence();
    }

    /**
     * A reader records that it used slot {@code i} now (for the owner's LRU); opaque: no data is published.
     *
     * @param part  the owner's buffer
     * @param slots directory slots
     * @param i     the slot
     * @param tick  the time
     */
    public static void touch(MemorySegment part, int slots, int i, long tick) {
        LONG.setOpaque(part, lastUseOffset(slots, i), tick);
    }

    /**
     * The last-use tick of slot {@code i} (opaque).
     *
     * @param part  the owner's buffer
     * @param slots directory slots
     * @param i     the slot
     * @return the tick
     */
    public static long lastUse(MemorySegment part, int slots, int i) {
        return (long) LONG.getOpaque(part, lastUseOffset(slots, i));
    }

    /**
     * Every slot's last-use tick, read now (opaque, as {@link #lastUse}): what the budget's LRU eviction ranks.
     *
     * @param part  the owner's buffer
     * @param slots directory slots
     * @return the ticks, slot by slot
     */
    public static long[] lastUses(MemorySegment part, int slots) {
        long[] t = new long[slots];
        for (int i = 0; i < slots; i++) {
            t[i] = lastUse(part, slots, i);
        }
        return t;
    }

    // ---- GPU form: the directory in shared host memory, with the blocks' generations per slot ----

    /**
     * Bytes of one rank's directory in the GPU form: the header, slots and last-use ticks, then two generations per
     * slot.
     *
     * @param slots directory slots
     * @return bytes, 64-byte aligned
     */
    public static long deviceDirectoryBytes(int slots) {
        return align64(generationsOffset(slots, slots));
    }

    /**
     * Byte offset of slot {@code i}'s generations in the GPU form's directory: the current block's at +0, the
     * previous block's at +8.
     *
     * @param slots directory slots
     * @param i     the slot
     * @return its offset
     */
    public static long generationsOffset(int slots, int i) {
        return heapOffset(slots) + 16L * i;
    }

    /**
     * The owner writes slot {@code i}'s generations (GPU form), inside the slot's seqlock (between {@link #beginWrite}
     * and {@link #endWrite}): the previous one first, then the current one with release, so a view's check
     * ({@link #generationsHold}) that reads the new current also reads the new previous (a block moving from current
     * to previous is never missed).
     *
     * @param dir      the owner's directory
     * @param slots    directory slots
     * @param i        the slot
     * @param current  the current block's generation, 0 for none
     * @param previous the previous block's generation, 0 for none
     */
    public static void setGenerations(MemorySegment dir, int slots, int i, long current, long previous) {
        long at = generationsOffset(slots, i);
        LONG.setOpaque(dir, at + 8, previous);
        // release: the previous generation above is seen by a reader whose acquire in generationsHold sees this one
        LONG.setRelease(dir, at, current);
    }

    /**
     * Slot {@code i}'s current generation (GPU form), read inside the slot's seqlock window (plain: the window's word
     * acquire and recheck order it).
     *
     * @param dir   the owner's directory, as mapped here
     * @param slots directory slots
     * @param i     the slot
     * @return the current block's generation, 0 for none
     */
    public static long currentGeneration(MemorySegment dir, int slots, int i) {
        return (long) LONG.getOpaque(dir, generationsOffset(slots, i));
    }

    /**
     * Whether slot {@code i} still lists {@code generation} as its current or previous block (GPU form): a view's
     * check after its reads. A generation the slot no longer lists was freed (or is about to be): its range may be
     * reused. Each load alone proves the block live when it answers the generation, so the check needs no seqlock.
     *
     * @param dir        the owner's directory, as mapped here
     * @param slots      directory slots
     * @param i          the slot
     * @param generation the view's generation
     * @return true while the slot lists it
     */
    public static boolean generationsHold(MemorySegment dir, int slots, int i, long generation) {
        VarHandle.loadLoadFence(); // the caller's reads of the data complete before the generations are read
        long at = generationsOffset(slots, i);
        // acquire: pairs with the release in setGenerations; the previous generation read next is at least as new
        return (long) LONG.getAcquire(dir, at) == generation || (long) LONG.getOpaque(dir, at + 8) == generation;
    }

    /**
     * A name's bytes, checked.
     *
     * @param name the name
     * @return its UTF-8 bytes
     * @throws IllegalArgumentException when empty or longer than {@link #MAX_NAME_BYTES}
     */
    public static byte[] nameBytes(String name) {
        byte[] b = name.getBytes(StandardCharsets.UTF_8);
        if (b.length == 0 || b.length > MAX_NAME_BYTES) {
            throw new IllegalArgumentException("parameter cache name '" + name + "' is " + b.length
                    + " UTF-8 bytes, expected 1.." + MAX_NAME_BYTES + " (fix: use a shorter name)");
        }
        return b;
    }
}
