package org.symmem4j.parallel.rendezvous;

import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.ReentrantLock;
import org.symmem4j.parallel.RendezvousStore;
import org.symmem4j.parallel.StoreTimeoutException;

/**
 * The store for ranks that are threads of one JVM, and the backing map of {@link TcpStoreServer}.
 * A lock and one condition: set-up traffic is a few keys per rank, so simplicity wins.
 *
 * <p>Bytes held (keys as UTF-16 characters ×2 plus values) are counted; a store made with a capacity
 * refuses a {@code set} or {@code add} that would exceed it, leaving its contents as they were.
 */
public final class InMemoryStore implements RendezvousStore {

    private final ReentrantLock lock = new ReentrantLock();
    private final Condition changed = lock.newCondition();
    private final Map<String, byte[]> values = new HashMap<>();
    private final long capacityBytes;
    private long heldBytes;
    private boolean closed;

    /** A store without a capacity limit (threads of one JVM: the ranks are the program itself). */
    public InMemoryStore() {
        this(Long.MAX_VALUE);
    }

    /**
     * A store that holds at most {@code capacityBytes} of keys and values.
     *
     * @param capacityBytes most bytes of keys and values held at once
     * @throws IllegalArgumentException if {@code capacityBytes} is not positive
     */
    public InMemoryStore(long capacityBytes) {
        if (capacityBytes <= 0) {
            throw new IllegalArgumentException("capacityBytes=" + capacityBytes + " must be positive (fix: pass"
                    + " a capacity in bytes, e.g. 1 << 20)");
        }
        this.capacityBytes = capacityBytes;
    }

    private static long sizeOf(String key, byte[] value) {
        return 2L * key.length() + (value == null ? 0 : value.length);
    }

    /** Replaces {@code key}'s value, within capacity; the caller holds the lock. */
    private void putLocked(String key, byte[] value) {
        byte[] old = values.get(key);
        long next = heldBytes - (old == null ? 0 : sizeOf(key, old)) + sizeOf(key, value);
        if (next > capacityBytes) {
            throw new StoreCapacityException("rendezvous store full: set(" + key + ") of " + value.length
                    + " bytes would hold " + next + " bytes; capacity=" + capacityBytes
                    + " (set-up values are small: a client storing this much is misbehaving; fix: store set-up values"
                    + " only, or raise StoreLimits.maxTotalBytes)");
        }
        values.put(key, value);
        heldBytes = next;
        changed.signalAll();
    }

    @Override
    public void set(String key, byte[] value) {
        byte[] copy = value.clone();
        lock.lock();
        try {
            putLocked(key, copy);
        } finally {
            lock.unlock();
        }
    }

    @Override
    public byte[] get(String key, Duration timeout) {
        return getAll(List.of(key), timeout).getFirst();
    }

    @Override
    public Optional<byte[]> tryGet(String key) {
        lock.lock();
        try {
            byte[] v = values.get(key);
            return v == null ? Optional.empty() : Optional.of(v.clone());
        } finally {
            lock.unlock();
        }
    }

    @Override
    public List<byte[]> getAll(List<String> keys, Duration timeout) {
        long deadline = System.nanoTime() + timeout.toNanos();
        lock.lock();
        try {
            while (true) {
                List<String> missing = new ArrayList<>();
                for (String k : keys) {
                    if (!values.containsKey(k)) {
                        missing.add(k);
                    }
                }
                if (missing.isEmpty()) {
                    List<byte[]> out = new ArrayList<>(keys.size());
                    for (String k : keys) {
                        out.add(values.get(k).clone());
                    }
                    return out;
                }
                if (closed) {
                    throw new StoreTimeoutException(missing, timeout);
                }
                long left = deadline - System.nanoTime();
                if (left <= 0) {
                    throw new StoreTimeoutException(missing, timeout);
                }
                changed.await(left, TimeUnit.NANOSECONDS);
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException("interrupted while waiting for rendezvous keys " + keys + " (fix: do not"
                    + " interrupt a rank's thread during group set-up)", e);
        } finally {
            lock.unlock();
        }
    }

    @Override
    public long add(String key, long delta) {
        lock.lock();
        try {
            byte[] old = values.get(key);
            if (old != null && old.length != Long.BYTES) {
                throw new StoreCapacityException("rendezvous store: add(" + key + ") on a value of " + old.length
                        + " bytes; a counter is 8 bytes (the key holds something else; fix: use add() only on keys"
                        + " that hold counters, and set() on others)");
            }
            long v = (old == null ? 0 : ByteBuffer.wrap(old).getLong()) + delta;
            putLocked(key, ByteBuffer.allocate(Long.BYTES).putLong(v).array());
            return v;
        } finally {
            lock.unlock();
        }
    }

    @Override
    public boolean delete(String key) {
        lock.lock();
        try {
            byte[] old = values.remove(key);
            if (old != null) {
                heldBytes -= sizeOf(key, old);
            }
            changed.signalAll();
            return old != null;
        } finally {
            lock.unlock();
        }
    }

    /**
     * Number of keys held (for tests and diagnostics).
     *
     * @return the number of keys
     */
    public int size() {
        lock.lock();
        try {
            return values.size();
        } finally {
            lock.unlock();
        }
    }

    /**
     * Bytes of keys and values held now.
     *
     * @return bytes of keys and values
     */
    public long heldBytes() {
        lock.lock();
        try {
            return heldBytes;
        } finally {
            lock.unlock();
        }
    }

    /** Wakes every waiter: their waits end as timeouts naming the keys still absent. */
    @Override
    public void close() {
        lock.lock();
        try {
            closed = true;
            changed.signalAll();
        } finally {
            lock.unlock();
        }
    }
}
