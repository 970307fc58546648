package org.symmem4j.serving;

import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * The network configurations a worker process holds, by version ({@link
 * org.symmem4j.serving.weights.SharedWeights#key}), least recently used dropped beyond {@value #CAPACITY}: a batch
 * carries its version's configuration only when the worker does not hold it (the first batch of a version to that
 * worker, or the first after the worker dropped it), and otherwise refers to it by the version alone.
 *
 * <p>The worker keeps one of these; the router keeps a mirror of it per worker. Both apply the same operations in
 * the same order, the order of the BATCH messages on that worker's request ring: the router {@link #sent} each batch
 * after its ring took it (a batch the ring refused changes nothing), the worker {@link #received} each one as it
 * reads it. So both drop the same version at the same message, and a batch without a configuration always finds
 * its version in the worker's cache. A configuration that differs from the one held under the same version (a new
 * router over the same workers, counting versions from 1 again) is carried again and replaces it.
 */
final class WireConfigs {

    /** Configurations held per worker. */
    static final int CAPACITY = 64;

    /** A version's network kind and configuration JSON. */
    record Config(String kind, String json) {
    }

    private final int capacity;
    /** The recency order (access order); every read that counts as a use goes through it. */
    private final LinkedHashMap<String, Config> lru;
    /** The same entries, for {@link #mustCarry}, which looks without counting as a use. */
    private final Map<String, Config> peek = new HashMap<>();

    WireConfigs() {
        this(CAPACITY);
    }

    WireConfigs(int capacity) {
        if (capacity < 1) {
            throw new IllegalArgumentException("WireConfigs capacity=" + capacity + ", expected >= 1 (fix: pass a"
                    + " positive capacity)");
        }
        this.capacity = capacity;
        this.lru = new LinkedHashMap<>(16, 0.75f, true) {
            @Override
            protected boolean removeEldestEntry(Map.Entry<String, Config> eldest) {
                if (size() > WireConfigs.this.capacity) {
                    peek.remove(eldest.getKey());
                    return true;
                }
                return false;
            }
        };
    }

    /**
     * The router's question before it sends a batch; changes nothing.
     *
     * @return true when the worker does not hold {@code config} under {@code key}, so the batch must carry it
     */
    boolean mustCarry(String key, Config config) {
        Config held = peek.get(key);
        return held == null || !(held == config || held.equals(config));
    }

    /**
     * The router's record of a batch its worker's ring took.
     *
     * @param carried whether the batch carried {@code config}
     */
    void sent(String key, Config config, boolean carried) {
        if (carried) {
            put(key, config);
        } else if (lru.get(key) == null) {
            throw org.symmem4j.parallel.Invariants.violated("a batch sent without configuration for version " + key
                    + ", which the worker's cache mirror does not hold");
        }
    }

    /**
     * The worker's side of a batch.
     *
     * @param carried the configuration the batch carried, or null when it referred to the cached one
     * @return the configuration of version {@code key}
     */
    Config received(String key, Config carried) {
        if (carried != null) {
            put(key, carried);
            return carried;
        }
        Config held = lru.get(key);
        if (held == null) {
            throw org.symmem4j.parallel.Invariants.violated("a batch of version " + key + " came without its"
                    + " configuration, and this worker does not hold it (the router's mirror of the worker's"
                    + " configuration cache went out of step)");
        }
        return held;
    }

    /** Forgets everything (the worker is gone; a worker started anew starts empty). */
    void clear() {
        lru.clear();
        peek.clear();
    }

    /** {@return the versions held now} */
    int size() {
        return lru.size();
    }

    private void put(String key, Config config) {
        peek.put(key, config);
        lru.put(key, config); // may drop the eldest, from both maps
    }
}
