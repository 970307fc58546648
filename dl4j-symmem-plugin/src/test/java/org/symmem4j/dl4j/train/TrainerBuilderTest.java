package org.symmem4j.dl4j.train;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.micrometer.core.instrument.Tags;
import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
import java.time.Duration;
import java.util.List;
import java.util.function.Supplier;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.junit.jupiter.api.Test;
import org.nd4j.linalg.api.buffer.DataType;
import org.symmem4j.dl4j.Nets;
import org.symmem4j.dl4j.SymmemGradientsAccumulator;
import org.symmem4j.dl4j.SymmemParallelWrapper;
import org.symmem4j.dl4j.pipeline.PipelineParallelTrainer;
import org.symmem4j.gradsync.SyncMetrics;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.group.InJvmWorld;

class TrainerBuilderTest {

    private static final String TIMEOUT_PROPERTY = "symmem4j.timeout.ms";

    /** The smallest trainer builder: the shared options, and a look at what they set. */
    private static final class Probe extends TrainerBuilder<Probe, StepListener<TrainingStep>> {
        TrainerOptions<StepListener<TrainingStep>> seen() {
            return options();
        }

        Probe threads(int n) {
            return ndThreadsPerRank("threads", n);
        }
    }

    @Test
    void theSharedOptionsReachTheOptionsTheTrainerReads() {
        Probe probe = new Probe();
        StepListener<TrainingStep> listener = report -> { };
        SimpleMeterRegistry registry = new SimpleMeterRegistry();
        assertSame(probe, probe.timeout(Duration.ofMillis(1500)).meterRegistry(registry, Tags.of("application", "t"))
                .stepListener(listener).recordTimeline(7).threads(3));
        TrainerOptions<StepListener<TrainingStep>> o = probe.seen();
        assertEquals(Duration.ofMillis(1500), o.timeout());
        assertEquals(List.of(listener), o.stepListeners());
        assertEquals(7, o.timelineSteps());
        assertEquals(3, o.ndThreadsPerRank(16));
        assertEquals(Tags.of("application", "t"), o.metricTags());
        o.bind(new SyncMetrics(o.transportName(), o.metricTags()));
        // every meter of the trainer carries the tags; the process's build-info gauge (version, commit, java) is
        // not the trainer's and carries no others, by design (SyncMetrics.registerBuildInfo)
        var trainers = registry.getMeters().stream().filter(m -> !m.getId().getName().equals(SyncMetrics.BUILD_INFO)).toList();
        assertTrue(trainers.stream().allMatch(m -> "t".equals(m.getId().getTag("application"))) && !trainers.isEmpty(),
                "the trainer's meters went into the registry with the tags");
        assertEquals(0, new Probe().seen().timelineSteps(), "no timeline unless asked for");
    }

    @Test
    void everyTrainerRefusesTheSharedOptionsInTheSameWords() {
        MultiLayerNetwork net = Nets.mlp(Nets.updater("sgd"), DataType.FLOAT);
        List<TrainerBuilder<?, ?>> builders = List.of(SymmemParallelWrapper.builder(net),
                PipelineParallelTrainer.builder(net), new Probe());
        for (TrainerBuilder<?, ?> b : builders) {
            String timeout = assertThrows(IllegalArgumentException.class, () -> b.timeout(Duration.ZERO)).getMessage();
            assertTrue(timeout.contains("timeout=PT0S must be positive"), timeout);
            assertThrows(IllegalArgumentException.class, () -> b.timeout(Duration.ofSeconds(-1)));
            assertThrows(IllegalArgumentException.class, () -> b.timeout(null));
            String timeline = assertThrows(IllegalArgumentException.class, () -> b.recordTimeline(0)).getMessage();
            assertTrue(timeline.contains("recordTimeline maxSteps=0: expected >= 1"), timeline);
            assertThrows(NullPointerException.class, () -> b.group(null));
            assertThrows(NullPointerException.class, () -> b.meterRegistry(null));
        }
        String threads = assertThrows(IllegalArgumentException.class,
                () -> PipelineParallelTrainer.builder(net).ompThreadsPerRank(0)).getMessage();
        assertTrue(threads.contains("ompThreadsPerRank=0 must be >= 1"), threads);
    }

    @Test
    void theDefaultTimeoutIsTheGroupsWhichTheSystemPropertySets() {
        String before = System.getProperty(TIMEOUT_PROPERTY);
        try {
            System.clearProperty(TIMEOUT_PROPERTY);
            assertEquals(GroupOptions.DEFAULT_TIMEOUT, new Probe().seen().timeout());
            System.setProperty(TIMEOUT_PROPERTY, "1234");
            assertEquals(Duration.ofMillis(1234), new Probe().seen().timeout());
            assertEquals(GroupOptions.defaults().timeout(), new Probe().seen().timeout());
            // every trainer's builder (and the ParallelWrapper accumulator's) reads it as it starts: a bad value fails
            // there, naming the property
            MultiLayerNetwork net = Nets.mlp(Nets.updater("sgd"), DataType.FLOAT);
            System.setProperty(TIMEOUT_PROPERTY, "soon");
            List<Supplier<?>> starts = List.of(() -> SymmemParallelWrapper.builder(net),
                    () -> PipelineParallelTrainer.builder(net), () -> SymmemGradientsAccumulator.builder(net), Probe::new);
            for (Supplier<?> start : starts) {
                String message = assertThrows(IllegalArgumentException.class, start::get).getMessage();
                assertTrue(message.contains("symmem4j.timeout.ms=soon"), message);
            }
        } finally {
            if (before == null) {
                System.clearProperty(TIMEOUT_PROPERTY);
            } else {
                System.setProperty(TIMEOUT_PROPERTY, before);
            }
        }
    }
    /**
     * In group mode a rank waits for its peers inside the group's collectives, which the group's timeout bounds: the
     * trainer takes that timeout, and refuses one of its own that differs (which those waits would not honour: a
     * stopped peer was caught only by the trainer's backstop, three timeouts and 30 s later, not at the timeout set).
     */
    @Test
    void inGroupModeTheTimeoutIsTheGroupsAndADifferentOneIsRefusedAtBuild() {
        MultiLayerNetwork net = Nets.mlp(Nets.updater("sgd"), DataType.FLOAT);
        try (InJvmWorld world = InJvmWorld.create(1, GroupOptions.defaults().withTimeout(Duration.ofSeconds(7)))) {
            Group group = world.join(0);
            assertEquals(Duration.ofSeconds(7), new Probe().group(group).seen().timeout(), "unset: the group's");
            assertEquals(Duration.ofSeconds(7), new Probe().group(group).timeout(Duration.ofSeconds(7)).seen().timeout());
            List<Supplier<AutoCloseable>> builds = List.of(
                    () -> SymmemParallelWrapper.builder(net).group(group).timeout(Duration.ofSeconds(1)).build(),
                    () -> PipelineParallelTrainer.builder(net).group(group).timeout(Duration.ofSeconds(1)).build());
            for (Supplier<AutoCloseable> build : builds) {
                String message = assertThrows(IllegalArgumentException.class, build::get).getMessage();
                assertTrue(message.contains("timeout=PT1S differs from the group's timeout=PT7S")
                        && message.contains("GroupOptions.defaults().withTimeout(Duration.ofMillis(1000))")
                        && message.contains("-Dsymmem4j.timeout.ms=1000"), message);
            }
        }
    }
}
