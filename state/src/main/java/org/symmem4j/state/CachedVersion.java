package org.symmem4j.state;

import java.lang.foreign.MemorySegment;

/**
 * One version of a parameter cache entry as a zero-copy view of its owner's memory, and the check that it still
 * holds that version: what {@link ParameterCache.Entry} (host memory) and {@link DeviceParameterCache.View} (GPU
 * memory) share. A view pins nothing: the owner may free its block (two newer puts of the name, an eviction or a
 * remove), after which the block's generation has changed and {@link #isValid()} says false. The block's memory stays
 * mapped until the cache is closed, so reading a freed view never faults; its bytes may belong to a newer entry.
 */
abstract sealed class CachedVersion permits ParameterCache.Entry, DeviceParameterCache.View {

    /** What a view re-reads to tell whether its block still holds its version. */
    interface Generations {
        /**
         * @param owner      the owner rank
         * @param where      where the view's generation is kept: the block's heap offset (host form), or its slot
         *                   (GPU form, whose slots list their blocks' generations)
         * @param generation the view's generation
         * @return whether the block still holds it now (read after the caller's earlier reads)
         */
        boolean holds(int owner, long where, long generation);
    }

    private final String label;
    private final String name;
    private final int owner;
    private final long version;
    private final MemorySegment data;
    private final Generations generations;
    private final long block;
    private final long generation;

    CachedVersion(String label, String name, int owner, long version, MemorySegment data, Generations generations,
                  long block, long generation) {
        this.label = label;
        this.name = name;
        this.owner = owner;
        this.version = version;
        this.data = data;
        this.generations = generations;
        this.block = block;
        this.generation = generation;
    }

    /** {@return the entry's name} */
    public String name() {
        return name;
    }

    /** {@return the rank that put it} */
    public int owner() {
        return owner;
    }

    /** {@return this version (unique per owner, increasing with every put)} */
    public long version() {
        return version;
    }

    /**
     * The bytes, in the owner's memory, no copy: host memory read-only ({@link ParameterCache}), or the owner's GPU
     * memory as mapped on this rank's GPU, its address and length ({@link DeviceParameterCache}).
     *
     * @return the bytes
     */
    public MemorySegment data() {
        return data;
    }

    /**
     * Whether the view still holds this version: false once its block was freed (two newer puts of the name, an
     * eviction or a remove since). Check it after reading (on a GPU after the reading kernels completed: after your
     * stream's synchronize): what was read before a true answer is this version, whole. On a GPU too it is host loads
     * (the GPU form keeps its directory, generations included, in host memory the ranks share): no device copy.
     *
     * @return true while the data is this version's
     */
    public boolean isValid() {
        return generations.holds(owner, block, generation);
    }

    @Override
    public String toString() {
        return label + "[" + name + ", owner=" + owner + ", version=" + version + ", bytes=" + data.byteSize() + "]";
    }
}
