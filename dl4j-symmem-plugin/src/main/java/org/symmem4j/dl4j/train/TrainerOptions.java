package org.symmem4j.dl4j.train;

import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.Tag;
import io.micrometer.core.instrument.Tags;
import io.micrometer.core.instrument.binder.MeterBinder;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Objects;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.Transport;

/**
 * The options every trainer's builder takes, kept and checked in one place: group mode's group, the bound of every
 * wait, the meter registry and its tags, the step listeners, the run's timeline, ND4J's threads per rank. Every
 * trainer's builder extends {@link TrainerBuilder}, which holds one and sets it; the trainer reads it.
 *
 * @param <L> the trainer's step listener
 */
public final class TrainerOptions<L> {

    private Group group;
    private Duration timeout = defaultTimeout();
    /** Whether {@link #timeout(Duration)} was called: in group mode an unset timeout is the group's. */
    private boolean timeoutSet;
    private MeterRegistry registry;
    private Iterable<Tag> metricTags = Tags.empty();
    private final List<L> stepListeners = new ArrayList<>();
    private int ndThreadsPerRank;
    private int timelineSteps;
    private int checkpointSteps;
    private Duration checkpointInterval;
    private Path checkpointRoot;
    private int keepCheckpoints = 2;
    private Path resumeRoot;

    /**
     * Thread mode, the default timeout ({@link #defaultTimeout()}: 60 s, or {@code -Dsymmem4j.timeout.ms}), no
     * meters, no listeners, no timeline, ND4J's threads shared among the ranks.
     *
     * @throws IllegalArgumentException when {@code -Dsymmem4j.timeout.ms} is not a whole number of milliseconds
     */
    public TrainerOptions() {
    }

    /**
     * Group mode: this process (or thread) is one rank of {@code group}.
     *
     * @param group the group, this rank's view of it
     * @throws NullPointerException when {@code group} is null
     */
    public void group(Group group) {
        this.group = Objects.requireNonNull(group, "group");
    }

    /**
     * The bound of every wait for another rank.
     *
     * @param timeout positive
     * @throws IllegalArgumentException when {@code timeout} is null, zero or negative
     */
    public void timeout(Duration timeout) {
        this.timeout = requirePositive(timeout);
        this.timeoutSet = true;
    }

    /**
     * The default bound of every wait of every trainer: {@link GroupOptions#defaults()}'s, 60 s unless
     * {@code -Dsymmem4j.timeout.ms} says otherwise.
     *
     * @return the default timeout, read now
     * @throws IllegalArgumentException when {@code -Dsymmem4j.timeout.ms} is not a whole number of milliseconds
     */
    public static Duration defaultTimeout() {
        return GroupOptions.defaults().timeout();
    }

    /**
     * Checks a trainer's timeout, the bound of every wait for another rank.
     *
     * @param timeout positive
     * @return {@code timeout}
     * @throws IllegalArgumentException when {@code timeout} is null, zero or negative, saying so and the default
     */
    public static Duration requirePositive(Duration timeout) {
        if (timeout == null || timeout.isNegative() || timeout.isZero()) {
            throw new IllegalArgumentException("timeout=" + timeout + " must be positive (default "
                    + GroupOptions.DEFAULT_TIMEOUT.toSeconds() + " s, or -Dsymmem4j.timeout.ms; fix: pass e.g."
                    + " Duration.ofMinutes(2), or leave it unset)");
        }
        return timeout;
    }

    /**
     * ND4J (OpenMP and BLAS) threads per rank; unset, {@link #ndThreadsPerRank(int)} shares the cores.
     *
     * @param setting     the builder method's name, as the refusal names it
     * @param threads     at least 1
     * @param expectation the trainer's words for the rule, after {@code setting=<value>} in the refusal
     * @throws IllegalArgumentException when {@code threads} is below 1
     */
    public void ndThreadsPerRank(String setting, int threads, String expectation) {
        if (threads < 1) {
            // error-message: the caller's expectation carries the rule and the fix (TrainerBuilder.ndThreadsPerRank)
            throw new IllegalArgumentException(setting + "=" + threads + " " + expectation);
        }
        this.ndThreadsPerRank = threads;
    }

    /**
     * Records the run's timeline, up to {@code maxSteps} steps.
     *
     * @param maxSteps at least 1
     * @throws IllegalArgumentException when {@code maxSteps} is below 1
     */
    public void recordTimeline(int maxSteps) {
        if (maxSteps < 1) {
            throw new IllegalArgumentException("recordTimeline maxSteps=" + maxSteps + ": expected >= 1 (the most steps"
                    + " the trace keeps; fix: recordTimeline(10_000), or leave it out for no timeline)");
        }
        this.timelineSteps = maxSteps;
    }

    /**
     * Records the trainer's metrics into {@code registry}, {@code tags} on every meter.
     *
     * @param registry any Micrometer registry
     * @param tags     added to every meter
     * @throws NullPointerException when either is null
     */
    public void meterRegistry(MeterRegistry registry, Iterable<Tag> tags) {
        this.registry = Objects.requireNonNull(registry, "registry");
        this.metricTags = Objects.requireNonNull(tags, "tags");
    }

    /**
     * Adds a step listener, called in the order added.
     *
     * @param listener the listener
     * @throws NullPointerException when {@code listener} is null
     */
    public void stepListener(L listener) {
        stepListeners.add(Objects.requireNonNull(listener, "listener"));
    }

    /**
     * Periodic checkpoints every {@code steps} steps under {@code root}.
     *
     * @param steps at least 1
     * @param root  a writable directory, or one that can be created
     * @throws IllegalArgumentException when {@code steps} is below 1 or {@code root} cannot hold checkpoints
     */
    public void checkpointEvery(int steps, Path root) {
        if (steps < 1) {
            throw new IllegalArgumentException("checkpointEvery steps=" + steps + ": expected >= 1 (a checkpoint every"
                    + " that many steps; fix: checkpointEvery(100, root))");
        }
        this.checkpointRoot = requireWritableRoot("checkpointEvery", root);
        this.checkpointSteps = steps;
    }

    /**
     * Periodic checkpoints at the first step boundary {@code interval} after the last one, under {@code root}.
     *
     * @param interval positive
     * @param root     a writable directory, or one that can be created
     * @throws IllegalArgumentException when {@code interval} is not positive or {@code root} cannot hold checkpoints
     */
    public void checkpointEvery(Duration interval, Path root) {
        if (interval == null || interval.isNegative() || interval.isZero()) {
            throw new IllegalArgumentException("checkpointEvery interval=" + interval + ": expected a positive duration"
                    + " (fix: checkpointEvery(Duration.ofMinutes(10), root))");
        }
        this.checkpointRoot = requireWritableRoot("checkpointEvery", root);
        this.checkpointInterval = interval;
    }

    /**
     * How many complete periodic checkpoints are kept (default 2).
     *
     * @param keep at least 1
     * @throws IllegalArgumentException when {@code keep} is below 1
     */
    public void keepCheckpoints(int keep) {
        if (keep < 1) {
            throw new IllegalArgumentException("keepCheckpoints keep=" + keep + ": expected >= 1 (the newest complete"
                    + " checkpoint is what a restart resumes from; fix: keepCheckpoints(2))");
        }
        this.keepCheckpoints = keep;
    }

    /**
     * Resume from the newest complete checkpoint under {@code root} at {@code build()}, when there is one.
     *
     * @param root a directory, or a path that does not exist yet (then the run starts fresh)
     * @throws IllegalArgumentException when {@code root} exists and is not a readable directory
     */
    public void resumeFrom(Path root) {
        Objects.requireNonNull(root, "root");
        if (Files.exists(root) && !(Files.isDirectory(root) && Files.isReadable(root))) {
            throw new IllegalArgumentException("resumeFrom root=" + root + ": expected a readable directory (or none"
                    + " yet, to start fresh), found " + (Files.isDirectory(root) ? "an unreadable directory" : "a file")
                    + " (fix: pass the checkpointEvery directory of the run, readable by this process, or a path that"
                    + " does not exist yet)");
        }
        this.resumeRoot = root;
    }

    private static Path requireWritableRoot(String setting, Path root) {
        Objects.requireNonNull(root, "root");
        Path abs = root.toAbsolutePath();
        if (Files.exists(abs)) {
            if (!Files.isDirectory(abs) || !Files.isWritable(abs)) {
                throw new IllegalArgumentException(setting + " root=" + root + ": expected a writable directory, found "
                        + (Files.isDirectory(abs) ? "a directory this process cannot write" : "a file")
                        + " (fix: pass a directory this process can write, or a path that does not exist yet)");
            }
            return root;
        }
        Path parent = abs.getParent();
        while (parent != null && !Files.exists(parent)) {
            parent = parent.getParent();
        }
        if (parent == null || !Files.isDirectory(parent) || !Files.isWritable(parent)) {
            throw new IllegalArgumentException(setting + " root=" + root + ": does not exist and cannot be created"
                    + " (nearest existing ancestor=" + parent + " is not a writable directory); expected a directory this"
                    + " process can create (fix: create it, or choose a path under a writable directory)");
        }
        return root;
    }

    /** {@return when the trainer takes its own checkpoints, or null when it takes none} */
    public CheckpointSchedule checkpointSchedule() {
        return checkpointRoot == null ? null
                : new CheckpointSchedule(checkpointSteps, checkpointInterval, checkpointRoot, keepCheckpoints);
    }

    /** {@return the root a {@code build()} resumes from, or null} */
    public Path resumeRoot() {
        return resumeRoot;
    }

    /** {@return group mode's group; null in thread mode} */
    public Group group() {
        return group;
    }

    /**
     * The bound of every wait for another rank. In thread mode the one set, else {@link #defaultTimeout()}. In group
     * mode the group's ({@code group.options().timeout()}): the group's collectives and signal waits, where a rank
     * waits for a stopped or dead peer, are bounded by the timeout the group was created with, so a trainer's own
     * timeout that differs from it would not be honoured there (the peer would only be caught by the trainer's
     * backstop, {@link RankFailures#stepResultBound}); such a setting is refused.
     *
     * @return the bound of every wait for another rank
     * @throws IllegalArgumentException in group mode, when the timeout set differs from the group's, naming both and
     *                                  how to give the group the timeout wanted
     */
    public Duration timeout() {
        if (group == null) {
            return timeout;
        }
        Duration groups = group.options().timeout();
        if (timeoutSet && !timeout.equals(groups)) {
            throw new IllegalArgumentException("timeout=" + timeout + " differs from the group's timeout=" + groups
                    + ": in group mode every wait for another rank is one of the group's collectives, bounded by the"
                    + " group's timeout (fix: create the group with that timeout, e.g. ProcessGroup.fromEnvironment("
                    + "GroupOptions.defaults().withTimeout(Duration.ofMillis(" + timeout.toMillis() + "))) or"
                    + " -Dsymmem4j.timeout.ms=" + timeout.toMillis() + ", and leave timeout(...) out or pass the same)");
        }
        return groups;
    }

    /** {@return the most steps the run's timeline keeps; 0 for no timeline} */
    public int timelineSteps() {
        return timelineSteps;
    }

    /** {@return the tags on every meter} */
    public Iterable<Tag> metricTags() {
        return metricTags;
    }

    /** {@return the step listeners, in the order added; an unmodifiable copy} */
    public List<L> stepListeners() {
        return List.copyOf(stepListeners);
    }

    /**
     * ND4J's threads for each of the ranks this process runs at once.
     *
     * @param localRanks the ranks of this process that compute at the same time
     * @return the threads set, or the cores divided by {@code localRanks}, at least 1
     */
    public int ndThreadsPerRank(int localRanks) {
        return ndThreadsPerRank > 0 ? ndThreadsPerRank : Math.max(1, Runtime.getRuntime().availableProcessors() / localRanks);
    }

    /** {@return the transport the metrics name: the group's, or the in-JVM host transport of thread mode} */
    public String transportName() {
        return group == null ? Transport.HOST_IN_JVM : group.transport().name();
    }

    /**
     * Binds the trainer's meters to the registry, when one was given.
     *
     * @param meters the trainer's meter binder
     * @param <M>    its type
     * @return {@code meters}
     */
    public <M extends MeterBinder> M bind(M meters) {
        if (registry != null) {
            meters.bindTo(registry);
        }
        return meters;
    }
}
