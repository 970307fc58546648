package org.symmem4j.serving.weights;

import java.lang.foreign.MemorySegment;
import java.nio.charset.StandardCharsets;
import java.util.Objects;

import org.nd4j.linalg.api.ndarray.INDArray;
import org.symmem4j.parallel.Group;
import org.symmem4j.state.ParameterCache;

/**
 * The flat parameters of served model versions, once per host, in a {@link ParameterCache}: the owner rank
 * {@link #publish}es a version (one copy into its part of the cache), and any thread of any rank on the host
 * {@link #open}s it as a zero-copy view of the owner's memory, over which {@link SharedNetworks} puts DL4J networks.
 *
 * <p>Each version is an entry of its own ({@code name@version}), so publishing version v+1 never frees version v:
 * the caller {@link #retire}s a version once its last reader has left (the router counts readers). The cache's
 * own LRU eviction must not take a version that is still served: size the budget for every version kept (the
 * current one, the one kept for rollback, and those still being read), or publishing fails with the cache's
 * message.
 *
 * <p>The cache allows one thread per rank: this class serializes its calls, so worker threads may open versions
 * concurrently. Publishing and retiring are the owner rank's.
 */
public final class SharedWeights implements AutoCloseable {

    /** The longest {@code name@version} a cache entry takes, in UTF-8 bytes. */
    public static final int MAX_KEY_BYTES = 68;

    private final ParameterCache cache;
    private final int owner;
    private final int rank;
    private final boolean closeCache;

    private SharedWeights(ParameterCache cache, int owner, int rank, boolean closeCache) {
        this.cache = cache;
        this.owner = owner;
        this.rank = rank;
        this.closeCache = closeCache;
    }

    /**
     * Collective: shared weights in a new cache of {@code budgetBytes} per rank, owned by rank {@code owner}.
     *
     * @param group       this rank's group (threads of one JVM, or processes of one machine)
     * @param owner       the rank that publishes
     * @param budgetBytes bytes of parameters each rank's part holds (the owner's part holds them all)
     * @param maxVersions versions each rank's part holds at once
     * @return this rank's view; close it collectively
     */
    public static SharedWeights create(Group group, int owner, long budgetBytes, int maxVersions) {
        Objects.requireNonNull(group, "group");
        if (owner < 0 || owner >= group.worldSize()) {
            throw new IllegalArgumentException("shared weights owner=" + owner + " is not a rank of the group"
                    + " (expected 0.." + (group.worldSize() - 1) + "; fix: pass the rank that publishes)");
        }
        return new SharedWeights(ParameterCache.create(group, budgetBytes, maxVersions), owner, group.rank(), true);
    }

    /**
     * Shared weights in a cache the caller made and closes.
     *
     * @param cache the cache
     * @param owner the rank that publishes
     * @param rank  this rank
     * @return the view
     */
    public static SharedWeights over(ParameterCache cache, int owner, int rank) {
        return new SharedWeights(Objects.requireNonNull(cache, "cache"), owner, rank, false);
    }

    /**
     * The cache entry's name of a version.
     *
     * @param model   the model's name
     * @param version its version, at least 1
     * @return {@code model@version}
     * @throws IllegalArgumentException for an empty name, one with '@' or '/', or a key over {@value #MAX_KEY_BYTES} bytes
     */
    public static String key(String model, long version) {
        checkName(model);
        if (version < 1) {
            throw new IllegalArgumentException("model '" + model + "' version=" + version + " expected >= 1"
                    + " (fix: number versions from 1)");
        }
        String key = model + "@" + version;
        if (key.getBytes(StandardCharsets.UTF_8).length > MAX_KEY_BYTES) {
            throw new IllegalArgumentException("model name '" + model + "' is too long: name@version takes "
                    + key.getBytes(StandardCharsets.UTF_8).length + " bytes, at most " + MAX_KEY_BYTES
                    + " (fix: use a shorter model name)");
        }
        return key;
    }

    /**
     * Checks a model's name.
     *
     * @param model the name
     * @return the name
     * @throws IllegalArgumentException for an empty name, or one with a character outside {@code [A-Za-z0-9._-]}
     */
    public static String checkName(String model) {
        Objects.requireNonNull(model, "model");
        if (model.isEmpty() || !model.matches("[A-Za-z0-9._-]+")) {
            throw new IllegalArgumentException("model name '" + model + "' expected 1 or more of [A-Za-z0-9._-]"
                    + " (fix: use e.g. \"mnist-mlp\")");
        }
        return model;
    }

    /**
     * Owner: copies a version's flat parameters into the cache, once.
     *
     * @param model   the model's name
     * @param version its version
     * @param params  the flat parameters (any shape; its elements in C order), not a view with gaps
     * @throws IllegalStateException on a rank other than the owner, or when the version is there already
     */
    public synchronized void publish(String model, long version, INDArray params) {
        String key = key(model, version);
        checkOwner("publish " + key);
        Objects.requireNonNull(params, "params");
        if (cache.get(owner, key) != null) {
            throw new IllegalStateException("shared weights " + key + " are published already (versions are"
                    + " immutable; fix: publish a new version)");
        }
        INDArray flat = params.isView() || params.ordering() != 'c' ? params.dup('c') : params;
        long bytes = flat.length() * flat.dataType().width();
        MemorySegment source = MemorySegment.ofAddress(flat.data().address()).reinterpret(bytes);
        cache.put(key, source);
    }

    /**
     * Any rank, any thread: the version's parameters as a zero-copy, read-only view of the owner's memory.
     *
     * @param model   the model's name
     * @param version its version
     * @return the view, or null when the version is not published (or was retired)
     */
    public synchronized MemorySegment open(String model, long version) {
        ParameterCache.Entry e = cache.get(owner, key(model, version));
        return e == null ? null : e.data();
    }

    /**
     * Owner: frees a version's memory. Call it only once no reader uses a view of it.
     *
     * @param model   the model's name
     * @param version its version
     * @return true when the version was there
     */
    public synchronized boolean retire(String model, long version) {
        String key = key(model, version);
        checkOwner("retire " + key);
        return cache.remove(key);
    }

    /** {@return versions the owner's part holds now} */
    public synchronized int publishedVersions() {
        return cache.ownEntries();
    }

    /** {@return the owner rank} */
    public int owner() {
        return owner;
    }

    private void checkOwner(String what) {
        if (rank != owner) {
            throw new IllegalStateException("shared weights: " + what + " on rank=" + rank + ", but rank=" + owner
                    + " owns them (fix: publish and retire on the owner; other ranks open)");
        }
    }

    /** Closes the cache when this instance made it (collective then). */
    @Override
    public void close() {
        if (closeCache) {
            cache.close();
        }
    }
}
