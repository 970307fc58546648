package org.symmem4j.state;

import static org.symmem4j.parallel.layout.ParameterCacheLayout.SLOT_CURRENT;
import static org.symmem4j.parallel.layout.ParameterCacheLayout.SLOT_CURRENT_LENGTH;
import static org.symmem4j.parallel.layout.ParameterCacheLayout.SLOT_HASH;
import static org.symmem4j.parallel.layout.ParameterCacheLayout.SLOT_NAME;
import static org.symmem4j.parallel.layout.ParameterCacheLayout.SLOT_NAME_LENGTH;
import static org.symmem4j.parallel.layout.ParameterCacheLayout.SLOT_VERSION;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;

import org.symmem4j.parallel.layout.ParameterCacheLayout;

/**
 * A reader's lookup of a name in one rank's directory of a parameter cache, in host memory, written once for
 * {@link ParameterCache} (the directory beside its blocks) and {@link SharedDirectory} (the GPU form's directory, its
 * blocks in GPU memory): the hash probe, each slot read under its seqlock (word even and unchanged around the reads),
 * a slot being written waited for (bounded, by the caller), a never-used slot ending the probe.
 */
final class DirectoryProbe {

    /** Consecutive failed checks of an unchanged slot after which its entry is reported broken, not read again. */
    static final int STUCK_READS = 3;

    /** Waits, bounded, while a slot's word stays odd (its owner is writing it). */
    interface StableWait {
        /**
         * @param slot the slot's offset
         * @param odd  the odd word seen
         */
        void await(long slot, long odd);
    }

    /** One stable read of a name's slot; reused by one reader thread. */
    static final class Snapshot {
        int slot;
        /** The slot's even word when it was read: unchanged words mean an unchanged slot. */
        long word;
        long block;
        long length;
        long version;
        /** GPU form: the current block's generation, read in the same window; 0 otherwise. */
        long generation;
    }

    private DirectoryProbe() {
    }

    /**
     * Finds {@code nameBytes}' slot in {@code dir} and reads it whole into {@code out}.
     *
     * @param dir            a rank's directory, host memory as mapped here
     * @param slots          directory slots
     * @param nameBytes      the name's bytes
     * @param h              their hash ({@link ParameterCache#hash})
     * @param withGeneration whether to read the slot's current generation in the window (the GPU form's directory)
     * @param out            the slot's fields when found
     * @param wait           how to wait for a slot being written
     * @return true when the name has a slot (its current block may be -1: no version), false when absent
     */
    static boolean find(MemorySegment dir, int slots, byte[] nameBytes, long h, boolean withGeneration, Snapshot out,
                        StableWait wait) {
        for (int i = 0; i < slots; i++) {
            int slot = (int) Long.remainderUnsigned(h + i, slots);
            long s = ParameterCacheLayout.slotOffset(slot);
            while (true) {
                // acquire: pairs with the owner's release in endWrite; the slot's fields (and, GPU form, its
                // generations, written between beginWrite and endWrite) are seen after it
                long w = ParameterCacheLayout.wordAcquire(dir, s);
                if ((w & 1) != 0) {
                    wait.await(s, w);
                    continue;
                }
                long hs = dir.get(ValueLayout.JAVA_LONG, s + SLOT_HASH);
                boolean match = hs == h && nameMatches(dir, s, nameBytes);
                long block = dir.get(ValueLayout.JAVA_LONG, s + SLOT_CURRENT);
                long length = dir.get(ValueLayout.JAVA_LONG, s + SLOT_CURRENT_LENGTH);
                long version = dir.get(ValueLayout.JAVA_LONG, s + SLOT_VERSION);
                long generation = withGeneration ? ParameterCacheLayout.currentGeneration(dir, slots, slot) : 0;
                if (ParameterCacheLayout.wordRecheck(dir, s) != w) {
                    continue; // the owner changed the slot while it was read
                }
                if (hs == 0) {
                    return false; // a never-used slot ends the probe
                }
                if (!match) {
                    break;
                }
                out.slot = slot;
                out.word = w;
                out.block = block;
                out.length = length;
                out.version = version;
                out.generation = generation;
                return true;
            }
        }
        return false;
    }

    /**
     * The error for an entry whose stable slot lists a block that is not published (freed, or holding another
     * version): the owner's directory broke its rule (a block leaves its slot before it is freed), so reading the slot
     * again cannot help.
     *
     * @param structure the cache, for the message
     * @param name      the entry's name
     * @param owner     its owner rank
     * @param s         the slot as read
     * @param found     what the block's check found instead, e.g. {@code "generation=42 (even: freed)"}
     * @return the exception to throw
     */
    static IllegalStateException broken(String structure, String name, int owner, Snapshot s, String found) {
        return new IllegalStateException(structure + " get of entry '" + name + "' in rank " + owner + "'s part: its"
                + " slot=" + s.slot + " (word=" + s.word + ", unchanged over " + STUCK_READS + " reads) lists block="
                + s.block + " of version=" + s.version + ", expected a published block of that version, found " + found
                + " (the owner's directory is inconsistent: a freed block is still listed; fix: remove the entry on"
                + " rank " + owner + " and put it again, and report this as a bug with the owner's log)");
    }

    /** Byte by byte, so that a lookup allocates nothing (no segment over the name's array; names are short). */
    private static boolean nameMatches(MemorySegment dir, long s, byte[] nameBytes) {
        if (dir.get(ValueLayout.JAVA_INT, s + SLOT_NAME_LENGTH) != nameBytes.length) {
            return false;
        }
        for (int i = 0; i < nameBytes.length; i++) {
            if (dir.get(ValueLayout.JAVA_BYTE, s + SLOT_NAME + i) != nameBytes[i]) {
                return false;
            }
        }
        return true;
    }
}
