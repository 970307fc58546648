package org.symmem4j.state;

import java.lang.foreign.MemorySegment;

import org.symmem4j.parallel.layout.ParameterCacheLayout;

/**
 * A reader's poll of the current version of a name in one rank's cache directory, for {@link ParameterCache#version}
 * and {@link DeviceParameterCache#version}: what a reader waiting for a hot swap calls in a loop. It allocates nothing
 * when polled with the same name as the previous call (the name's bytes and hash are kept), so a spinning reader makes
 * no garbage and no collection pauses it. One reader thread uses an instance.
 */
final class VersionPoll {

    private final DirectoryProbe.Snapshot snapshot = new DirectoryProbe.Snapshot();
    private String name;
    private byte[] nameBytes;
    private long hash;

    /**
     * @param dir   the owner's directory, host memory as mapped here
     * @param slots directory slots
     * @param name  the entry's name
     * @param wait  how to wait, bounded, for a slot its owner is writing
     * @return the version of the name's current block (the one a get returns now), or -1 when there is none
     * @throws IllegalArgumentException for a name that is empty or too long
     */
    long version(MemorySegment dir, int slots, String name, DirectoryProbe.StableWait wait) {
        if (!name.equals(this.name)) {
            nameBytes = ParameterCacheLayout.nameBytes(name);
            hash = ParameterCache.hash(nameBytes);
            this.name = name;
        }
        DirectoryProbe.Snapshot s = snapshot;
        // the slot is read under its seqlock: its version is the one its current block was published with
        if (!DirectoryProbe.find(dir, slots, nameBytes, hash, false, s, wait) || s.block < 0) {
            return -1;
        }
        return s.version;
    }
}
