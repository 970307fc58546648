package org.symmem4j.parallel.cuda;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.SymmemException;
import org.symmem4j.parallel.cuda.ffi.CudaDriver;
import org.symmem4j.parallel.cuda.ffi.CudaVirtualMemory;
import org.symmem4j.parallel.ipc.FdChannel;
import org.symmem4j.parallel.rendezvous.StoreSecret;

/**
 * CUDA symmetric memory whose ranks are processes, one rank per process, as with one JVM per GPU
 * under the launcher or {@code mpirun}: each rank creates its buffer and signal pad as one exportable
 * allocation on its GPU, exports it as a file descriptor, and passes the descriptor to every peer
 * over its {@link FdChannel}; each peer imports it and maps it into its own address space, so a
 * kernel reaches every rank's memory at addresses of its own process (see {@link CudaVirtualMemory}).
 *
 * <p>One allocation per rank:
 * <pre>
 *   0                    padOffset              padOffset + PAD_BYTES      size
 *   | data (bytes)  ...  | signal pad           | unused up to the granularity |
 *   padOffset = bytes rounded up to 256 (16 at least); size = a multiple of the allocation granularity
 * </pre>
 *
 * <p>Three exchanges, so that every rank fails alike and nothing is left mapped when one cannot go on:
 * <ol>
 *   <li>(the transport's header: sizes, processes) — before anything is allocated;</li>
 *   <li>{@code cuda-export}: each rank's channel path, size and pad offset, or why it could not create
 *       and export its allocation;</li>
 *   <li>{@code cuda-import}: after the descriptors went round (bounded by the group's timeout, naming
 *       ranks not heard from), whether each rank mapped every peer.</li>
 * </ol>
 * The channel of a transport is bound at its first cross-process allocation, in the directory of
 * host secrets ({@link StoreSecret#hostDirectory()}), which only this user may enter; it accepts
 * descriptors only from the processes the group's ranks run in (the kernel's credentials checked).
 */
final class CrossProcessMemory implements AutoCloseable {

    private static final Logger LOG = LoggerFactory.getLogger(CrossProcessMemory.class);
    private static final long PAD_ALIGNMENT = 256;

    /** What this process's descriptor sockets are called ({@link FdChannel#pathOf}), and what a sweep removes. */
    static final String SOCKET_PREFIX = "cuda";

    private final CudaDriver driver;
    private final long transportInstance;
    /** Where the channel is bound; null: the host secrets' directory, looked up at the first bind. */
    private final Path directory;
    private FdChannel channel;

    CrossProcessMemory(CudaDriver driver, long transportInstance) {
        this(driver, transportInstance, null);
    }

    /** With the sockets' directory given (tests: a directory of their own). */
    CrossProcessMemory(CudaDriver driver, long transportInstance, Path directory) {
        this.driver = driver;
        this.transportInstance = transportInstance;
        this.directory = directory;
    }

    /** Every rank's buffer and pad as this process sees them, and the mappings that make them (own first at its rank). */
    record Shared(long[] data, long[] pads, List<CudaVirtualMemory.Mapping> mappings) {
    }

    /**
     * This process's channel, bound at the first call; the sockets that processes gone before left in the directory (a
     * rank killed by SIGKILL cannot remove its own) are removed first.
     */
    synchronized FdChannel channel() {
        if (channel == null) {
            Path dir = directory();
            FdChannel.sweepStale(dir, SOCKET_PREFIX);
            channel = FdChannel.bind(FdChannel.pathOf(dir, SOCKET_PREFIX, transportInstance));
        }
        return channel;
    }

    private Path directory() {
        return directory != null ? directory : StoreSecret.hostDirectory();
    }

    /**
     * Removes the descriptor sockets of processes that are gone from the directory (a survivor of an in-place shrink:
     * the dead ranks' sockets). Bounded: one listing, no waiting; nothing when no channel was bound (no directory
     * looked up).
     *
     * @return how many were removed
     */
    synchronized int sweepStale() {
        return channel == null ? 0 : FdChannel.sweepStale(channel.path().getParent(), SOCKET_PREFIX);
    }

    /**
     * Collective: creates this rank's share, exchanges it with every peer and maps theirs.
     *
     * @param g     the group (one rank per process)
     * @param r     this rank's GPU state, current on this thread
     * @param bytes the data bytes, equal on every rank (checked by the caller)
     * @param pids  every rank's process id
     * @param ordinals every rank's device ordinal (each process must see the machine's GPUs alike)
     * @param tag   the allocation's tag on the channels, equal on every rank and unique among this
     *              transport's allocations in every process of the group
     * @return the pointers and mappings; unmap them with {@link CudaVirtualMemory#unmap} when done
     */
    Shared share(Group g, CudaRank r, long bytes, long[] pids, int[] ordinals, long tag) {
        CudaVirtualMemory vm = driver.virtualMemory();
        int n = g.worldSize();
        int me = g.rank();
        long padOffset = roundUp(Math.max(bytes, 16), PAD_ALIGNMENT);
        CudaVirtualMemory.Mapping own = null;
        int fd = -1;
        String failure = null;
        String path = "";
        long size = 0;
        try {
            String unsupported = vm.unsupportedReason(r.ordinal);
            if (unsupported != null) {
                throw new SymmemException(unsupported);
            }
            path = channel().path().toString();
            size = roundUp(padOffset + CudaKernels.PAD_BYTES, vm.granularity(r.ordinal));
            own = vm.map(vm.create(r.ordinal, size), size, r.ordinal);
            driver.memset(own.address(), (byte) 0, size);
            driver.synchronizeContext(); // zeroed before any peer can map it (the descriptor leaves after this)
            fd = vm.exportFd(own.handle());
        } catch (RuntimeException e) {
            failure = e.toString();
            LOG.debug("cuda cross-process share rank={}: export failed", me, e);
        }
        Export[] exports = new Export[n];
        List<byte[]> raw = g.allGatherBytes("cuda-export", new Export(failure, path, size, padOffset).toBytes());
        for (int p = 0; p < n; p++) {
            exports[p] = Export.of(raw.get(p));
        }
        String failed = failures(exports);
        if (failed != null) {
            closeQuietly(fd);
            unmapQuietly(vm, own);
            throw new SymmemException("cuda symmetric memory across processes: " + failed + " (seen by rank=" + me
                    + "; nothing is left allocated on any rank; fix: act on the failing rank's reason above, e.g. run"
                    + " every rank as the same user with peer access between their GPUs)");
        }
        CudaVirtualMemory.Mapping[] mappings = new CudaVirtualMemory.Mapping[n];
        mappings[me] = own;
        failure = null;
        try {
            FdChannel ch = channel();
            for (int p = 0; p < n; p++) {
                if (p != me) {
                    ch.send(Path.of(exports[p].path()), tag, me, fd);
                }
            }
            Map<Integer, Long> expected = new TreeMap<>();
            for (int p = 0; p < n; p++) {
                if (p != me) {
                    expected.put(p, pids[p]);
                }
            }
            Map<Integer, Integer> fds = ch.receiveFromEach(tag, expected, g.options().timeout());
            try {
                for (Map.Entry<Integer, Integer> e : fds.entrySet()) {
                    int p = e.getKey();
                    r.checkCanAccess(ordinals[p], p);
                    mappings[p] = vm.map(vm.importFd(e.getValue()), exports[p].size(), r.ordinal);
                }
            } finally {
                fds.values().forEach(FdChannel::closeDescriptor);
            }
        } catch (RuntimeException e) {
            failure = e.toString();
            LOG.debug("cuda cross-process share rank={}: import failed", me, e);
        } finally {
            closeQuietly(fd);
        }
        raw = g.allGatherBytes("cuda-import", (failure == null ? "" : failure).getBytes(StandardCharsets.UTF_8));
        StringBuilder importFailures = new StringBuilder();
        for (int p = 0; p < n; p++) {
            if (raw.get(p).length > 0) {
                importFailures.append(importFailures.isEmpty() ? "" : "; ").append("rank=").append(p).append(" could not map"
                        + " its peers' memory: ").append(new String(raw.get(p), StandardCharsets.UTF_8));
            }
        }
        if (!importFailures.isEmpty()) {
            for (CudaVirtualMemory.Mapping m : mappings) {
                unmapQuietly(vm, m);
            }
            throw new SymmemException("cuda symmetric memory across processes: " + importFailures + " (seen by rank=" + me
                    + "; nothing is left mapped on any rank; fix: act on the failing rank's reason above, e.g. run"
                    + " every rank as the same user with peer access between their GPUs)");
        }
        long[] data = new long[n];
        long[] pads = new long[n];
        for (int p = 0; p < n; p++) {
            data[p] = mappings[p].address();
            pads[p] = mappings[p].address() + exports[p].padOffset();
        }
        LOG.debug("cuda cross-process share rank={} tag={}: {} bytes per rank mapped from {} processes", me, tag, size, n);
        return new Shared(data, pads, List.of(mappings));
    }

    private static String failures(Export[] exports) {
        StringBuilder s = new StringBuilder();
        for (int p = 0; p < exports.length; p++) {
            if (exports[p].failure() != null) {
                s.append(s.isEmpty() ? "" : "; ").append("rank=").append(p).append(" could not export its memory: ")
                        .append(exports[p].failure());
            }
        }
        return s.isEmpty() ? null : s.toString();
    }

    private static void closeQuietly(int fd) {
        if (fd >= 0) {
            FdChannel.closeDescriptor(fd);
        }
    }

    private static void unmapQuietly(CudaVirtualMemory vm, CudaVirtualMemory.Mapping m) {
        if (m == null) {
            return;
        }
        try {
            vm.unmap(m);
        } catch (RuntimeException e) {
            LOG.warn("cuda cross-process share: cannot unmap 0x{} after a failure: {}", Long.toHexString(m.address()),
                    e.toString());
        }
    }

    private static long roundUp(long v, long to) {
        return (v + to - 1) / to * to;
    }

    /** Closes the channel (its socket file removed). */
    @Override
    public synchronized void close() {
        if (channel != null) {
            channel.close();
            channel = null;
        }
    }

    /** What a rank tells its peers in the {@code cuda-export} exchange. */
    private record Export(String failure, String path, long size, long padOffset) {

        byte[] toBytes() {
            byte[] f = failure == null ? new byte[0] : failure.getBytes(StandardCharsets.UTF_8);
            byte[] p = path.getBytes(StandardCharsets.UTF_8);
            return ByteBuffer.allocate(1 + 4 + f.length + 4 + p.length + 16).put((byte) (failure == null ? 0 : 1))
                    .putInt(f.length).put(f).putInt(p.length).put(p).putLong(size).putLong(padOffset).array();
        }

        static Export of(byte[] b) {
            ByteBuffer in = ByteBuffer.wrap(b);
            boolean failed = in.get() != 0;
            byte[] f = new byte[in.getInt()];
            in.get(f);
            byte[] p = new byte[in.getInt()];
            in.get(p);
            return new Export(failed ? new String(f, StandardCharsets.UTF_8) : null, new String(p, StandardCharsets.UTF_8),
                    in.getLong(), in.getLong());
        }
    }
}
