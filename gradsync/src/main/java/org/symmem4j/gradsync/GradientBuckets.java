package org.symmem4j.gradsync;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.List;
import org.symmem4j.parallel.DType;

/**
 * Cuts a flat gradient of {@code count} elements into buckets of at most {@code bucketBytes}, each
 * starting on a 64-byte boundary of the buffer, so every bucket's all-reduce gets aligned vectors
 * and the policy can pick an algorithm per bucket size. {@link #splitAtBoundaries} also keeps
 * buckets within layers, so a bucket can be reduced as soon as backprop has written its layers.
 */
public final class GradientBuckets {

    /**
     * One bucket: elements [firstElement, firstElement + count).
     *
     * @param firstElement the bucket's first element index in the gradient
     * @param count        elements in the bucket
     * @param dtype        the element type
     */
    public record Bucket(long firstElement, long count, DType dtype) {
        /**
         * Where the bucket starts.
         *
         * @return bytes from the gradient's element 0
         */
        public long offsetBytes() {
            return firstElement * dtype.byteSize();
        }

        /**
         * The bucket's size.
         *
         * @return {@code count} elements in bytes
         */
        public long bytes() {
            return count * dtype.byteSize();
        }
    }

    private GradientBuckets() {
    }

    /**
     * Cuts {@code count} elements into buckets of at most {@code bucketBytes} each (rounded down to
     * a multiple of 64 bytes, at least one element), in element order.
     *
     * @param count       elements in the gradient, at least 0
     * @param dtype       element type
     * @param bucketBytes the largest bucket in bytes, at least 64
     * @return buckets covering {@code [0, count)} exactly; empty when {@code count} is 0
     * @throws IllegalArgumentException when {@code count} is negative or {@code bucketBytes} below 64
     */
    public static List<Bucket> split(long count, DType dtype, long bucketBytes) {
        if (count < 0) {
            throw new IllegalArgumentException("count=" + count + " expected count >= 0 (fix: pass the gradient's"
                    + " element count, 0 for an empty gradient)");
        }
        if (bucketBytes < 64) {
            throw new IllegalArgumentException("bucketBytes=" + bucketBytes + " expected bucketBytes >= 64 (one cache"
                    + " line; fix: pass a bucket size of at least 64 bytes, e.g. 4 << 20 for 4 MiB buckets, the"
                    + " wrapper's default)");
        }
        long perBucket = Math.max(1, (bucketBytes / 64) * 64 / dtype.byteSize());
        List<Bucket> buckets = new ArrayList<>();
        for (long first = 0; first < count; first += perBucket) {
            buckets.add(new Bucket(first, Math.min(perBucket, count - first), dtype));
        }
        return List.copyOf(buckets);
    }

    /**
     * Buckets that start only at layer boundaries (or inside a layer larger than
     * {@code bucketBytes}), so each bucket waits for as few layers as possible: backprop writes a
     * network's gradient layer by layer from the last, and a bucket can be all-reduced once every
     * layer it covers is written. Each boundary is moved up to the next multiple of 64 bytes (the
     * few elements between a layer's start and that line go to the bucket below, which waits for
     * the layer below anyway). Going from the end of the gradient down, consecutive pieces are
     * merged while a bucket is smaller than {@code minBucketBytes} (each all-reduce has a fixed
     * cost: tiny layers such as an output layer's ride along with the next); a bucket larger than
     * {@code bucketBytes} is cut into pieces of at most that. Returned in element order, covering
     * {@code [0, count)} exactly.
     *
     * @param layerStarts the first element of each layer's gradient, any order; values outside
     *                    {@code (0, count)} are ignored
     *
     * @param count          elements in the gradient, at least 0
     * @param dtype          element type
     * @param bucketBytes    the largest bucket in bytes
     * @param minBucketBytes buckets below this many bytes merge with the next
     * @return buckets covering {@code [0, count)} exactly, in element order
     * @throws IllegalArgumentException when {@code count} is negative or a size is out of range
     */
    public static List<Bucket> splitAtBoundaries(long count, DType dtype, long bucketBytes, long minBucketBytes,
                                                 long[] layerStarts) {
        if (count < 0) {
            throw new IllegalArgumentException("count=" + count + " expected count >= 0 (fix: pass the gradient's"
                    + " element count, 0 for an empty gradient)");
        }
        if (bucketBytes < 64 || minBucketBytes < 0 || minBucketBytes > bucketBytes) {
            throw new IllegalArgumentException("bucketBytes=" + bucketBytes + " minBucketBytes=" + minBucketBytes
                    + " expected bucketBytes >= 64 and 0 <= minBucketBytes <= bucketBytes (fix: pass a bucket size of at"
                    + " least 64 bytes and a minimum between 0 and it, e.g. 4 << 20 and 256 << 10, the wrapper's"
                    + " defaults)");
        }
        long align = Math.max(1, 64 / dtype.byteSize());
        long perBucket = Math.max(1, (bucketBytes / 64) * 64 / dtype.byteSize());
        long[] cuts = Arrays.stream(layerStarts)
                .map(s -> (s + align - 1) / align * align)
                .filter(s -> s > 0 && s < count)
                .distinct().sorted().toArray();
        // pieces between cuts, from the top of the gradient down (the order backprop finishes them)
        List<long[]> merged = new ArrayList<>();
        long hi = count;
        long lo;
        long[] current = null;
        for (int k = cuts.length; k >= 0; k--) {
            lo = k == 0 ? 0 : cuts[k - 1];
            if (lo >= hi) {
                continue;
            }
            if (current != null && (current[1] - current[0]) * dtype.byteSize() < minBucketBytes) {
                current[0] = lo; // too small alone: extend down over the next piece
            } else {
                if (current != null) {
                    merged.add(current);
                }
                current = new long[] {lo, hi};
            }
            hi = lo;
        }
        if (current != null) {
            merged.add(current);
        }
        List<Bucket> buckets = new ArrayList<>();
        for (long[] range : merged) {
            // equal aligned pieces, so no sliver is left to pay an all-reduce's fixed cost alone
            long len = range[1] - range[0];
            long pieces = (len + perBucket - 1) / perBucket;
            long size = Math.min(perBucket, ((len + pieces - 1) / pieces + align - 1) / align * align);
            for (long first = range[0]; first < range[1]; first += size) {
                buckets.add(new Bucket(first, Math.min(size, range[1] - first), dtype));
            }
        }
        buckets.sort(Comparator.comparingLong(Bucket::firstElement));
        return List.copyOf(buckets);
    }
}
