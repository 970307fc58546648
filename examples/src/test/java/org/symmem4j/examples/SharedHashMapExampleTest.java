package org.symmem4j.examples;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.TreeSet;
import org.junit.jupiter.api.Test;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.group.InJvmWorld;
import org.symmem4j.state.SymmetricHashMap;

/**
 * {@link SharedHashMapExample}: exactly-once word counting as rank threads and as launched processes, its totals
 * against counts this test takes from the corpus with a {@link HashSet} of its own; its check refusing a wrong count.
 */
class SharedHashMapExampleTest {

    private static final SharedHashMapExample.Corpus CORPUS = new SharedHashMapExample.Corpus(400, 200, 500);
    private static final int RANKS = 3;

    /** Distinct documents delivered, their words, and the distinct non-stop words among them. */
    private static long[] expected() {
        Set<Integer> delivered = new TreeSet<>();
        for (int r = 0; r < RANKS; r++) {
            for (int id : CORPUS.stream(r)) {
                delivered.add(id);
            }
        }
        double[] zipf = CORPUS.zipf();
        Set<String> words = new HashSet<>();
        long tokens = 0;
        for (int id : delivered) {
            for (int w : CORPUS.words(id, zipf)) {
                tokens++;
                words.add(SharedHashMapExample.word(w));
            }
        }
        words.removeAll(List.of(SharedHashMapExample.STOP_WORDS));
        return new long[] {delivered.size(), tokens, words.size()};
    }

    @Test
    void threeRankThreadsCountEveryDocumentOnce() {
        List<SharedHashMapExample.Report> reports = InJvmWorld.runOnEveryRank(RANKS, GroupOptions.defaults(),
                group -> SharedHashMapExample.run(group, CORPUS));
        long[] expected = expected();
        SharedHashMapExample.Report report = reports.getFirst();
        assertEquals(RANKS * 200L, report.deliveries());
        assertEquals(expected[0], report.documents(), "distinct documents");
        assertTrue(expected[0] < RANKS * 200L - 100, "many documents were delivered more than once: " + expected[0]);
        assertEquals(RANKS * 200L - expected[0], report.duplicates(), "each repeat skipped once");
        assertEquals(expected[1], report.tokens(), "words of the distinct documents, counted once");
        assertEquals(expected[2], report.words(), "distinct words but the stop words");
        assertEquals(SharedHashMapExample.STOP_WORDS.length, report.stopWordsRemoved(), "the commonest words occur");
        assertEquals(RANKS * (500L + 400L), report.lookups(), "every rank read every word and document");
        assertTrue(report.fullOwner() >= 0 && report.fullOwner() < RANKS, "owner " + report.fullOwner());
        assertTrue(report.keysBeforeFull() >= SharedHashMapExample.TINY_SLOTS
                        && report.keysBeforeFull() <= SharedHashMapExample.TINY_SLOTS * RANKS,
                "keys before a partition of 4 slots is full: " + report.keysBeforeFull());
        for (SharedHashMapExample.Report other : reports) {
            assertEquals(report.tokens(), other.tokens(), "every rank reports the gathered totals");
            assertEquals(report.duplicates(), other.duplicates());
        }
        assertTrue(report.line().startsWith("hash map: 3 ranks counted " + expected[1] + " words of " + expected[0]
                + " documents exactly once"), report.line());
    }

    @Test
    void theCheckRefusesACountThatDiffersFromTheReference() {
        SharedHashMapExample.Corpus corpus = new SharedHashMapExample.Corpus(20, 10, 50);
        SharedHashMapExample.Reference reference = SharedHashMapExample.Reference.of(corpus, 1);
        MemorySegment[] keys = new MemorySegment[50];
        for (int w = 0; w < keys.length; w++) {
            keys[w] = SharedHashMapExample.wordKey(w);
        }
        int counted = SharedHashMapExample.STOP_WORDS.length;
        while (reference.counts()[counted] == 0) {
            counted++;
        }
        int word = counted;
        List<String> failures = InJvmWorld.runOnEveryRank(1, GroupOptions.defaults(), group -> {
            try (SymmetricHashMap counts = SymmetricHashMap.create(group, SharedHashMapExample.WORD_KEY_BYTES, 8, 128);
                 SymmetricHashMap seen = SymmetricHashMap.create(group, 8, 8, 64)) {
                MemorySegment value = MemorySegment.ofArray(new long[1]);
                for (int w = SharedHashMapExample.STOP_WORDS.length; w < keys.length; w++) {
                    if (reference.counts()[w] > 0) {
                        value.set(ValueLayout.JAVA_LONG, 0, reference.counts()[w]);
                        counts.put(keys[w], value);
                    }
                }
                value.set(ValueLayout.JAVA_LONG, 0, 0);
                for (int id = 0; id < reference.deliveredBy().length; id++) {
                    if (reference.deliveredBy()[id] != 0) {
                        seen.put(id, value);
                    }
                }
                long lookups = SharedHashMapExample.check(counts, seen, keys, reference, 0);
                assertEquals(50 + 20, lookups, "the right counts pass");
                value.set(ValueLayout.JAVA_LONG, 0, reference.counts()[word] + 1);
                counts.put(keys[word], value);
                return assertThrows(IllegalStateException.class,
                        () -> SharedHashMapExample.check(counts, seen, keys, reference, 0)).getMessage();
            }
        });
        assertEquals("rank 0: word '" + SharedHashMapExample.word(word) + "' count=" + (reference.counts()[word] + 1)
                + " expected " + reference.counts()[word], failures.getFirst());
    }

    @Test
    void theVocabularyHasDistinctWordsThatFitAKey() {
        Set<String> words = new HashSet<>();
        for (int w = 0; w < 65_536; w++) {
            String word = SharedHashMapExample.word(w);
            assertTrue(word.length() <= SharedHashMapExample.WORD_KEY_BYTES, word);
            assertTrue(words.add(word), "word " + w + " repeats '" + word + "'");
        }
        assertFalse(words.contains(""));
    }

    @Test
    void threeLaunchedProcessesCountAsRankZeroReports() throws IOException {
        String out = LaunchedJvm.launchRanksReportingFromRankZero(3, "256m", SharedHashMapExample.class,
                List.of("--documents", "400", "--deliveries", "200", "--vocabulary", "500"), "hash map");
        long[] expected = expected();
        assertTrue(out.contains("[rank 0] hash map: 3 ranks counted " + expected[1] + " words of " + expected[0]
                + " documents exactly once (600 deliveries, " + (600 - expected[0]) + " duplicates skipped"), out);
        assertTrue(out.contains("into a shared table of " + expected[2] + " words (8 stop words removed)"), out);
        assertTrue(out.contains("(2700 lookups) and they match the reference"), out);
    }
}
