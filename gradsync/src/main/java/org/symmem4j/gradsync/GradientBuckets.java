package org.symmem4j.gradsync;

import java.util.ArrayList;
import java.util.List;
import org.symmem4j.parallel.DType;

/**
 * Cuts a flat gradient of {@code count} elements into buckets of at most {@code bucketBytes}, each
 * starting on a 64-byte boundary of the buffer, so every bucket's all-reduce gets aligned vectors
 * and the policy can pick an algorithm per bucket size.
 */
public final class GradientBuckets {

    /** One bucket: elements [firstElement, firstElement + count). */
    public record Bucket(long firstElement, long count, DType dtype) {
        public long offsetBytes() {
            return firstElement * dtype.byteSize();
        }

        public long bytes() {
            return count * dtype.byteSize();
        }
    }

    private GradientBuckets() {
    }

    public static List<Bucket> split(long count, DType dtype, long bucketBytes) {
        if (count < 0) {
            throw new IllegalArgumentException("count=" + count + " must be >= 0");
        }
        if (bucketBytes < 64) {
            throw new IllegalArgumentException("bucketBytes=" + bucketBytes + " must be >= 64");
        }
        long perBucket = Math.max(1, (bucketBytes / 64) * 64 / dtype.byteSize());
        List<Bucket> buckets = new ArrayList<>();
        for (long first = 0; first < count; first += perBucket) {
            buckets.add(new Bucket(first, Math.min(perBucket, count - first), dtype));
        }
        return List.copyOf(buckets);
    }
}
