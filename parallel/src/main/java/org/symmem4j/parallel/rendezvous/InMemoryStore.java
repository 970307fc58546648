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

/**
 * The store for ranks that are threads of one JVM, and the backing map of {@link TcpStoreServer}.
 * A lock and one condition: set-up traffic is a few keys per rank, so simplicity wins.
 */
public final class InMemoryStore implements RendezvousStore {

    private final ReentrantLock lock = new ReentrantLock();
    private final Condition changed = lock.newCondition();
    private final Map<String, byte[]> values = new HashMap<>();

    @Override
    public void set(String key, byte[] value) {
        lock.lock();
        try {
            values.put(key, value.clone());
            changed.signalAll();
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
                long left = deadline - System.nanoTime();
                if (left <= 0) {
                    throw new StoreTimeoutException(missing, timeout);
                }
                changed.await(left, TimeUnit.NANOSECONDS);
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException("interrupted while waiting for rendezvous keys " + keys, e);
        } finally {
            lock.unlock();
        }
    }

    @Override
    public long add(String key, long delta) {
        lock.lock();
        try {
            byte[] old = values.get(key);
            long v = (old == null ? 0 : ByteBuffer.wrap(old).getLong()) + delta;
            values.put(key, ByteBuffer.allocate(Long.BYTES).putLong(v).array());
            changed.signalAll();
            return v;
        } finally {
            lock.unlock();
        }
    }

    @Override
    public boolean delete(String key) {
        lock.lock();
        try {
            boolean had = values.remove(key) != null;
            changed.signalAll();
            return had;
        } finally {
            lock.unlock();
        }
    }

    /** Number of keys held (for tests and diagnostics). */
    public int size() {
        lock.lock();
        try {
            return values.size();
        } finally {
            lock.unlock();
        }
    }

    @Override
    public void close() {
        // nothing to release
    }
}
