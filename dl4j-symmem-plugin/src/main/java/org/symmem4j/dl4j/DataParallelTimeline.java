package org.symmem4j.dl4j;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.symmem4j.gradsync.GradientBuckets;
import org.symmem4j.parallel.trace.ChromeTraceWriter;

/**
 * The timeline of a data-parallel run ({@link SymmemParallelWrapper.Builder#recordTimeline}), step
 * after step, written as one Chrome trace for https://ui.perfetto.dev or chrome://tracing.
 *
 * <p>Tracks, top to bottom:
 * <ul>
 *   <li>{@code steps}: one slice per step, from the caller handing the batches to the workers to
 *       the caller holding every worker's result (args: step, examples, loss, skipped, exposed sync);</li>
 *   <li>{@code caller (fit thread)}: reading the next step's batches while the workers compute
 *       (with {@code prefetchBuffer}, taking them from the reader), waiting for the workers, and
 *       {@code between steps}: from the last worker's result to the next step's hand-off — the time
 *       the workers idle — with the user's listeners and step listeners nested in it;</li>
 *   <li>per worker {@code worker i}: a {@code step s} slice holding {@code compute} (forward and
 *       backward passes: every micro-batch with gradient accumulation), {@code sync} (the gradient
 *       hook: from this worker's arrival to the averaged gradient; with it {@code wait for peers},
 *       from this worker's arrival to the last worker's) and {@code update} (DL4J's updater and
 *       parameter step, after the hook);</li>
 *   <li>per worker {@code worker i all-reduce}: one slice per gradient bucket per step (its check,
 *       all-reduce and division), on the worker's thread or, with overlap, the communication
 *       thread, so they may run during {@code compute}. With sharding the buckets are not stamped
 *       (the sync slice holds the reduce-scatter, the update slice the all-gather) and this track
 *       stays empty.</li>
 * </ul>
 *
 * <p>Cost: while recording, per kept step one copy of each worker's four stamps and two per bucket
 * (the workers write them into arrays allocated once): 8 × workers × (4 + 2 × buckets) bytes plus
 * about 100; without {@code recordTimeline} nothing is stamped or allocated. Bounded: after {@code maxSteps} recorded steps later ones are counted, not kept,
 * and the trace's metadata says how many were left out.
 */
public final class DataParallelTimeline {

    /** Stamps of one worker's step: start, hook entry, hook exit, end (0 for the hook if it did not run). */
    private static final int WORKER_STAMPS = 4;

    /**
     * One recorded step. {@code workerStamps}: {@link #WORKER_STAMPS} per worker in worker order;
     * {@code bucketStamps}: per worker, start and end of each bucket (null without bucket stamps).
     */
    private record StepRecord(long step, long fit, long examples, double loss, boolean skipped, long exposedSyncNanos,
                              long handedOut, long batchesRead, long collected, long listenersStart, long listenersEnd,
                              long[] workerStamps, long[] bucketStamps) {
    }

    private final int maxSteps;
    private final int workers;
    private final boolean overlap;
    private final String sync;
    private final List<StepRecord> steps = new ArrayList<>();
    private List<GradientBuckets.Bucket> buckets;
    private long droppedSteps;

    DataParallelTimeline(int maxSteps, int workers, boolean overlap, String sync) {
        this.maxSteps = maxSteps;
        this.workers = workers;
        this.overlap = overlap;
        this.sync = sync;
    }

    /**
     * The most steps kept; later ones are counted in {@link #droppedSteps()}.
     *
     * @return the bound given to {@code recordTimeline}
     */
    public int maxSteps() {
        return maxSteps;
    }

    /**
     * Steps recorded.
     *
     * @return steps kept
     */
    public synchronized int recordedSteps() {
        return steps.size();
    }

    /**
     * Steps that finished after {@link #maxSteps()} were recorded, and were not kept.
     *
     * @return steps left out
     */
    public synchronized long droppedSteps() {
        return droppedSteps;
    }

    /** Whether the next finished step would be kept (the wrapper stamps nothing for one that would not). */
    synchronized boolean wantsStep() {
        return steps.size() < maxSteps;
    }

    /** Counts a finished step that was not kept. */
    synchronized void dropStep() {
        droppedSteps++;
    }

    /**
     * The wrapper's caller-side stamps of one step, taken only while recording; the listeners' are
     * 0 when no listener ran.
     */
    record CallerStamps(long handedOut, long batchesRead, long collected, long listenersStart, long listenersEnd) {
    }

    /**
     * Records a finished step, on the wrapper's thread, after every worker's result future
     * completed (which publishes the workers' stamps, see {@link GradientAveraging#bucketStartNanos()})
     * and before the next step is handed out (after which the workers overwrite them).
     */
    synchronized void record(long step, long fit, StepReport report, CallerStamps caller, List<DataParallelWorker.Result> results,
                             List<DataParallelWorker> workerList) {
        long[] stamps = new long[workers * WORKER_STAMPS];
        for (int w = 0; w < workers; w++) {
            DataParallelWorker.Result r = results.get(w);
            stamps[w * WORKER_STAMPS] = r.startNanos();
            stamps[w * WORKER_STAMPS + 1] = r.syncStart();
            stamps[w * WORKER_STAMPS + 2] = r.syncEnd();
            stamps[w * WORKER_STAMPS + 3] = r.endNanos();
        }
        long[] bucketStamps = null;
        GradientAveraging first = workerList.getFirst().averaging();
        if (first != null && first.bucketStartNanos() != null) {
            buckets = first.buckets();
            int n = buckets.size();
            bucketStamps = new long[workers * n * 2];
            for (int w = 0; w < workers; w++) {
                GradientAveraging a = workerList.get(w).averaging();
                System.arraycopy(a.bucketStartNanos(), 0, bucketStamps, w * n * 2, n);
                System.arraycopy(a.bucketEndNanos(), 0, bucketStamps, w * n * 2 + n, n);
            }
        }
        steps.add(new StepRecord(step, fit, report.examples(), report.loss(), report.skipped(), report.exposedSyncNanos(),
                caller.handedOut(), caller.batchesRead(), caller.collected(), caller.listenersStart(), caller.listenersEnd(),
                stamps, bucketStamps));
    }

    private static int stepsTrack() {
        return 0;
    }

    private static int callerTrack() {
        return 1;
    }

    private static int workerTrack(int w) {
        return 2 + 2 * w;
    }

    private static int allReduceTrack(int w) {
        return 3 + 2 * w;
    }

    /**
     * The recorded steps as Chrome trace JSON, times in microseconds from the first recorded
     * hand-off. Slices on each track nest; the metadata names the steps kept and left out.
     *
     * @return the trace, as JSON text
     */
    public synchronized String chromeTraceJson() {
        long origin = steps.isEmpty() ? 0 : steps.getFirst().handedOut();
        ChromeTraceWriter trace = new ChromeTraceWriter(origin, "symmem4j data parallel");
        trace.track(stepsTrack(), "steps", 0);
        trace.track(callerTrack(), "caller (fit thread)", 1);
        for (int w = 0; w < workers; w++) {
            trace.track(workerTrack(w), "worker " + w, workerTrack(w));
            trace.track(allReduceTrack(w), "worker " + w + " all-reduce", allReduceTrack(w));
        }
        for (int i = 0; i < steps.size(); i++) {
            StepRecord s = steps.get(i);
            StepRecord next = i + 1 < steps.size() ? steps.get(i + 1) : null;
            writeStep(trace, s, next != null && next.fit() == s.fit() && next.step() == s.step() + 1 ? next : null);
        }
        Map<String, String> metadata = new LinkedHashMap<>();
        metadata.put("workers", Integer.toString(workers));
        metadata.put("buckets", Integer.toString(buckets == null ? 0 : buckets.size()));
        metadata.put("sync", sync);
        metadata.put("overlap", Boolean.toString(overlap));
        metadata.put("steps", Integer.toString(steps.size()));
        metadata.put("maxSteps", Integer.toString(maxSteps));
        metadata.put("droppedSteps", Long.toString(droppedSteps));
        if (droppedSteps > 0) {
            metadata.put("note", "recording stopped after maxSteps=" + maxSteps + "; " + droppedSteps
                    + " later steps are not in this trace");
        }
        return trace.json(metadata);
    }

    private void writeStep(ChromeTraceWriter trace, StepRecord s, StepRecord next) {
        Map<String, Object> stepArgs = new LinkedHashMap<>();
        stepArgs.put("step", s.step());
        stepArgs.put("examples", s.examples());
        stepArgs.put("loss", s.loss());
        stepArgs.put("skipped", s.skipped() ? 1 : 0);
        stepArgs.put("exposed_sync_ms", s.exposedSyncNanos() / 1e6);
        trace.slice(stepsTrack(), "step " + s.step(), "step", s.handedOut(), s.collected(), stepArgs);

        Map<String, Object> stepOnly = Map.of("step", s.step());
        trace.slice(callerTrack(), "read batches", "caller", s.handedOut(), s.batchesRead(), stepOnly);
        trace.slice(callerTrack(), "wait for workers", "caller", s.batchesRead(), s.collected(), stepOnly);
        if (next != null) {
            // the parent first: with equal start times, the viewer nests the later-listed slice
            trace.slice(callerTrack(), "between steps", "caller", s.collected(), next.handedOut(), stepOnly);
        }
        if (s.listenersStart() != 0) { // 0: no listener ran
            trace.slice(callerTrack(), "listeners", "caller", s.listenersStart(), s.listenersEnd(), stepOnly);
        }

        long lastArrival = 0;
        for (int w = 0; w < workers; w++) {
            lastArrival = Math.max(lastArrival, s.workerStamps()[w * WORKER_STAMPS + 1]);
        }
        int n = buckets == null || s.bucketStamps() == null ? 0 : buckets.size();
        for (int w = 0; w < workers; w++) {
            long start = s.workerStamps()[w * WORKER_STAMPS];
            long syncStart = s.workerStamps()[w * WORKER_STAMPS + 1];
            long syncEnd = s.workerStamps()[w * WORKER_STAMPS + 2];
            long end = s.workerStamps()[w * WORKER_STAMPS + 3];
            int track = workerTrack(w);
            trace.slice(track, "step " + s.step(), "step", start, end, stepOnly);
            if (syncStart != 0) {
                trace.slice(track, "compute", "compute", start, syncStart, stepOnly);
                trace.slice(track, "sync", "sync", syncStart, syncEnd, stepOnly);
                long waitEnd = Math.min(lastArrival, syncEnd);
                if (waitEnd > syncStart) {
                    trace.slice(track, "wait for peers", "wait", syncStart, waitEnd, stepOnly);
                }
                trace.slice(track, "update", "update", syncEnd, end, stepOnly);
            }
            for (int b = n - 1; b >= 0; b--) { // the order they run in
                long bStart = s.bucketStamps()[w * n * 2 + b];
                long bEnd = s.bucketStamps()[w * n * 2 + n + b];
                GradientBuckets.Bucket bucket = buckets.get(b);
                Map<String, Object> args = new LinkedHashMap<>();
                args.put("step", s.step());
                args.put("bucket", b);
                args.put("first_element", bucket.firstElement());
                args.put("elements", bucket.count());
                args.put("bytes", bucket.bytes());
                trace.slice(allReduceTrack(w), "all-reduce b" + b, "allreduce", bStart, bEnd, args);
            }
        }
    }

    /**
     * Writes {@link #chromeTraceJson()} to {@code file}.
     *
     * @param file where to write; replaced if it exists
     * @throws IOException when the file cannot be written
     */
    public void writeChromeTrace(Path file) throws IOException {
        Files.writeString(file, chromeTraceJson());
    }
}
