package org.symmem4j.parallel;

import java.time.Duration;
import java.util.List;
import java.util.Optional;

/**
 * A small key-value store every rank of a group can reach: set/get/wait by key and an atomic
 * counter. Ranks use it once, at set-up, to exchange handles (shared-memory file names now,
 * NCCL and NVSHMEM unique ids later); collectives never touch it.
 *
 * <p>Two implementations: {@code rendezvous.InMemoryStore} for ranks that are threads of one JVM, and
 * {@code rendezvous.TcpStoreClient} for ranks that are processes, talking to a {@code rendezvous.TcpStoreServer} hosted by
 * rank 0 at {@code MASTER_ADDR:MASTER_PORT} (the torchrun convention).
 */
public interface RendezvousStore extends AutoCloseable {

    /**
     * Stores {@code value} under {@code key}, replacing any earlier value, and wakes waiters.
     *
     * @param key   the key, at most 512 bytes of UTF-8 on a TCP store
     * @param value the value, at most 4 MiB on a TCP store
     */
    void set(String key, byte[] value);

    /**
     * Returns the value of {@code key}, waiting until some rank sets it.
     *
     * @throws StoreTimeoutException if the key is still absent after {@code timeout}
     *
     * @param key     the key
     * @param timeout the longest wait
     * @return the value
     */
    byte[] get(String key, Duration timeout);

    /**
     * Returns the value of {@code key} if present now, without waiting.
     *
     * @param key the key
     * @return the value, or empty
     */
    Optional<byte[]> tryGet(String key);

    /**
     * Waits until every key is present and returns their values in order.
     *
     * @throws StoreTimeoutException naming every key still absent after {@code timeout}
     *
     * @param keys    the keys
     * @param timeout the longest wait for all of them
     * @return the values, in the keys' order
     */
    List<byte[]> getAll(List<String> keys, Duration timeout);

    /**
     * Atomically adds {@code delta} to the counter at {@code key} (absent = 0) and returns the new value.
     *
     * @param key   the counter's key
     * @param delta the amount to add; may be negative
     * @return the counter after the addition
     */
    long add(String key, long delta);

    /**
     * Removes {@code key}; returns whether it was present.
     *
     * @param key the key
     * @return true when the key was present
     */
    boolean delete(String key);

    @Override
    void close();
}
