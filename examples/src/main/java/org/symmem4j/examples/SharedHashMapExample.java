package org.symmem4j.examples;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.charset.StandardCharsets;
import java.util.Locale;
import java.util.SplittableRandom;

import org.symmem4j.parallel.Group;
import org.symmem4j.state.MapFullException;
import org.symmem4j.state.SymmetricHashMap;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/**
 * Exactly-once word counting on a {@link SymmetricHashMap}, no DL4J: documents are delivered at least once (every
 * rank gets its own deterministic stream of document ids, with repeats within it and across ranks), and each rank
 * counts the words of the documents it processes into one shared table whose keys are hashed to owner ranks. A
 * shared dedup index makes the counting exactly-once: a rank claims a document with
 * {@link SymmetricHashMap#putIfAbsent} and skips it when another delivery won; a word's count is incremented
 * atomically with {@link SymmetricHashMap#compute}, by whichever rank reads it, in the owner's memory. Rank 0 then
 * drops the stop words with {@link SymmetricHashMap#remove}, and after a barrier every rank reads every word and
 * every document id with {@link SymmetricHashMap#get} and checks them against the counts it computes itself from all
 * ranks' streams. Last, a map too small for its keys shows a full partition refusing a put before writing anything.
 *
 * <pre>
 *   java ... org.symmem4j.examples.SharedHashMapExample [--ranks N] [--documents D] [--deliveries K]
 *   bin/symmem4j-run -n 3 --java -cp CLASSPATH org.symmem4j.examples.SharedHashMapExample
 * </pre>
 */
public final class SharedHashMapExample {

    private SharedHashMapExample() {
    }

    @Command(name = "SharedHashMapExample", mixinStandardHelpOptions = true, versionProvider = Cli.Version.class,
            showDefaultValues = true, description = "Exactly-once word counting in a shared hash map: a dedup index"
            + " of documents (putIfAbsent), atomic counts (compute), checked on every rank against a local reference.")
    static final class Flags {
        @Option(names = "--ranks", paramLabel = "N", description = "ranks as threads; ignored when started by a"
                + " launcher")
        int ranks = 3;
        @Option(names = "--documents", paramLabel = "D", description = "distinct documents of the corpus")
        int documents = 2_000;
        @Option(names = "--deliveries", paramLabel = "K", description = "document deliveries per rank (ids drawn"
                + " from the corpus, so some repeat)")
        int deliveries = 1_000;
        @Option(names = "--vocabulary", paramLabel = "V", description = "distinct words documents draw from")
        int vocabulary = 3_000;
    }

    /** Bytes of a word key: the word's ASCII, zero-padded. */
    static final int WORD_KEY_BYTES = 16;
    /** The most frequent words, which rank 0 removes from the table after counting. */
    static final String[] STOP_WORDS = {"the", "of", "and", "to", "a", "in", "is", "it"};
    private static final String[] SYLLABLES = {"ka", "lo", "mi", "ne", "ru", "ta", "shi", "po", "ve", "zu", "an", "el",
        "or", "is", "ut", "ba"};
    private static final ValueLayout.OfLong LONG = ValueLayout.JAVA_LONG;
    /** Slots of the map that shows a full partition. */
    static final int TINY_SLOTS = 4;

    /**
     * The run's settings: the corpus and every rank's stream follow from them.
     *
     * @param documents  distinct documents
     * @param deliveries deliveries per rank
     * @param vocabulary distinct words
     */
    record Corpus(int documents, int deliveries, int vocabulary) {

        Corpus {
            if (documents < 1 || deliveries < 1 || vocabulary < STOP_WORDS.length + 1 || vocabulary > 65_536) {
                throw new IllegalArgumentException("word count corpus documents=" + documents + " deliveries="
                        + deliveries + " vocabulary=" + vocabulary + " expected documents >= 1, deliveries >= 1 and "
                        + (STOP_WORDS.length + 1) + " <= vocabulary <= 65536 (fix: e.g. --documents 2000"
                        + " --deliveries 1000 --vocabulary 3000)");
            }
        }

        /** {@return the document ids rank {@code rank} is delivered, in order (repeats included)} */
        int[] stream(int rank) {
            SplittableRandom rnd = new SplittableRandom(0xD0C5_0000L + 7919L * rank);
            int[] ids = new int[deliveries];
            for (int k = 0; k < deliveries; k++) {
                ids[k] = rnd.nextInt(documents);
            }
            return ids;
        }

        /** {@return document {@code id}'s words as vocabulary indices: 32..95 words, Zipf-distributed} */
        int[] words(int id, double[] cumulative) {
            SplittableRandom rnd = new SplittableRandom(0x3A11_0000_0000L + id);
            int[] words = new int[rnd.nextInt(32, 96)];
            for (int i = 0; i < words.length; i++) {
                double u = rnd.nextDouble() * cumulative[cumulative.length - 1];
                int w = java.util.Arrays.binarySearch(cumulative, u);
                words[i] = Math.min(w < 0 ? -w - 1 : w, vocabulary - 1);
            }
            return words;
        }

        /** {@return the cumulative Zipf weights (1/(i+1)) of the vocabulary, for {@link #words}} */
        double[] zipf() {
            double[] cumulative = new double[vocabulary];
            double sum = 0;
            for (int i = 0; i < vocabulary; i++) {
                sum += 1.0 / (i + 1);
                cumulative[i] = sum;
            }
            return cumulative;
        }
    }

    /** {@return word {@code index} of the vocabulary: the stop words first, then made-up words of 2..4 syllables} */
    static String word(int index) {
        if (index < STOP_WORDS.length) {
            return STOP_WORDS[index];
        }
        int n = index - STOP_WORDS.length;
        StringBuilder w = new StringBuilder();
        do {
            w.append(SYLLABLES[n & 15]);
            n >>>= 4;
        } while (n > 0);
        return w.length() < 4 ? w.append("ra").toString() : w.toString(); // unique: "ra" is no syllable
    }

    /** {@return word {@code index} as a map key: its ASCII, zero-padded to {@link #WORD_KEY_BYTES}} */
    static MemorySegment wordKey(int index) {
        byte[] key = new byte[WORD_KEY_BYTES];
        byte[] ascii = word(index).getBytes(StandardCharsets.US_ASCII);
        System.arraycopy(ascii, 0, key, 0, ascii.length);
        return MemorySegment.ofArray(key);
    }

    /**
     * What the ranks did together (every rank returns the same numbers: they are gathered).
     *
     * @param ranks             ranks
     * @param deliveries        document deliveries, all ranks
     * @param documents         distinct documents delivered (keys of the dedup index)
     * @param duplicates        deliveries skipped because another delivery claimed the document first
     * @param tokens            words counted (one compute each), all ranks
     * @param words             keys left in the count table after the stop words were removed
     * @param stopWordsRemoved  stop words removed from it
     * @param lookups           gets of the final check, all ranks
     * @param countingNanos     the longest rank's counting phase
     * @param fullOwner         the owner rank the full partition named
     * @param keysBeforeFull    keys the small map took before it refused one
     */
    record Report(int ranks, long deliveries, long documents, long duplicates, long tokens, long words,
                  int stopWordsRemoved, long lookups, long countingNanos, int fullOwner, long keysBeforeFull) {

        /** {@return the one-line result} */
        String line() {
            double seconds = Math.max(1e-9, countingNanos / 1e9);
            return String.format(Locale.ROOT, "hash map: %d ranks counted %d words of %d documents exactly once"
                            + " (%d deliveries, %d duplicates skipped by putIfAbsent on the shared dedup index) into a"
                            + " shared table of %d words (%d stop words removed); every rank read every count and"
                            + " document (%d lookups) and they match the reference; %.0f computes/s over all ranks;"
                            + " a full partition (owner rank %d, %d slots, %d keys in the map) refused the next put"
                            + " with MapFullException before writing",
                    ranks, tokens, documents, deliveries, duplicates, words, stopWordsRemoved, lookups,
                    tokens / seconds, fullOwner, TINY_SLOTS, keysBeforeFull);
        }
    }

    public static void main(String[] args) {
        Flags f = Cli.parse(new Flags(), args, flags -> {
            Cli.positive("--ranks", flags.ranks);
            new Corpus(flags.documents, flags.deliveries, flags.vocabulary); // its checks, as a usage error
            return flags;
        });
        Corpus corpus = new Corpus(f.documents, f.deliveries, f.vocabulary);
        ExampleRanks.runAndPrintRankZero("SharedHashMapExample", f.ranks, group -> run(group, corpus), Report::line);
    }

    /** {@return a power of two of at least twice the keys one rank holds on average (the map stays <= ~50% full)} */
    static int slotsPerRank(int keys, int ranks) {
        return Math.max(64, Integer.highestOneBit(Math.max(1, 2 * keys / ranks - 1)) << 1);
    }

    /**
     * What every rank computes by itself, from every rank's stream, on one thread: the reference the shared table
     * is checked against.
     *
     * @param counts      occurrences of each word over the distinct documents delivered
     * @param deliveredBy for each document, a bit per rank whose stream has it (ranks above 63 share bit 63)
     * @param documents   distinct documents delivered
     * @param tokens      words of those documents
     */
    record Reference(long[] counts, long[] deliveredBy, long documents, long tokens) {

        static Reference of(Corpus corpus, int ranks) {
            long[] deliveredBy = new long[corpus.documents()];
            for (int r = 0; r < ranks; r++) {
                for (int id : corpus.stream(r)) {
                    deliveredBy[id] |= 1L << Math.min(r, 63);
                }
            }
            double[] zipf = corpus.zipf();
            long[] counts = new long[corpus.vocabulary()];
            long documents = 0;
            long tokens = 0;
            for (int id = 0; id < corpus.documents(); id++) {
                if (deliveredBy[id] != 0) {
                    documents++;
                    for (int w : corpus.words(id, zipf)) {
                        counts[w]++;
                        tokens++;
                    }
                }
            }
            return new Reference(counts, deliveredBy, documents, tokens);
        }
    }

    /**
     * One rank's part (collective: every rank calls it with the same corpus).
     *
     * @param group  the group
     * @param corpus the documents and the streams
     * @return the gathered report (the same on every rank)
     * @throws IllegalStateException when a count, a document or the map's size differs from the reference
     */
    static Report run(Group group, Corpus corpus) {
        int ranks = group.worldSize();
        try (SymmetricHashMap seen = SymmetricHashMap.create(group, Long.BYTES, Long.BYTES,
                     slotsPerRank(corpus.documents(), ranks));
             SymmetricHashMap counts = SymmetricHashMap.create(group, WORD_KEY_BYTES, Long.BYTES,
                     slotsPerRank(corpus.vocabulary(), ranks))) {
            return ExampleRanks.abortingOnFailure(group, () -> countAndCheck(group, corpus, seen, counts));
        }
    }


    /** Counts this rank's deliveries, removes the stop words (rank 0), checks everything, shows a full partition. */
    private static Report countAndCheck(Group group, Corpus corpus, SymmetricHashMap seen, SymmetricHashMap counts) {
        int ranks = group.worldSize();
        int rank = group.rank();
        Reference reference = Reference.of(corpus, ranks);
        MemorySegment[] keys = new MemorySegment[corpus.vocabulary()];
        for (int w = 0; w < keys.length; w++) {
            keys[w] = wordKey(w);
        }
        double[] zipf = corpus.zipf();
        long[] mine = new long[4]; // tokens counted, duplicates skipped, counting nanos, lookups
        MemorySegment documentKey = MemorySegment.ofArray(new long[1]);
        MemorySegment claimedBy = MemorySegment.ofArray(new long[] {rank});
        long start = System.nanoTime();
        for (int id : corpus.stream(rank)) {
            documentKey.set(LONG, 0, id);
            if (!seen.putIfAbsent(documentKey, claimedBy)) {
                mine[1]++;        // delivered before, to this rank or another: counted once already
                continue;
            }
            for (int w : corpus.words(id, zipf)) {
                counts.compute(keys[w], (current, next) -> {   // atomic in the owner's memory
                    next.set(LONG, 0, current == null ? 1 : current.get(LONG, 0) + 1);
                    return true;
                });
                mine[0]++;
            }
        }
        mine[2] = System.nanoTime() - start;
        barrier(group, "counted");

        int removed = 0;
        if (rank == 0) {
            for (int w = 0; w < STOP_WORDS.length; w++) {
                boolean present = counts.remove(keys[w]);
                if (present != (reference.counts()[w] > 0)) {
                    throw new IllegalStateException("stop word '" + word(w) + "' was present=" + present
                            + " expected present=" + (reference.counts()[w] > 0));
                }
                removed += present ? 1 : 0;
            }
        }
        barrier(group, "stop words removed");

        mine[3] = check(counts, seen, keys, reference, rank);
        long[] total = gatherSums(group, "checked", mine);
        long countingNanos = gatherMax(group, "counting time", mine[2]);
        int removedEverywhere = (int) gatherSums(group, "removed", new long[] {removed})[0];
        checkTotals(reference, ranks, corpus, total, counts.size(), removedEverywhere);

        long[] full = showFullPartition(group);
        return new Report(ranks, (long) ranks * corpus.deliveries(), reference.documents(), total[1], total[0],
                counts.size(), removedEverywhere, total[3], countingNanos, (int) full[0], full[1]);
    }

    /**
     * Reads every word and every document id from the shared maps and compares them with the reference.
     *
     * @return lookups made
     * @throws IllegalStateException at the first difference, naming the key, what was read and what was expected
     */
    static long check(SymmetricHashMap counts, SymmetricHashMap seen, MemorySegment[] keys, Reference reference,
                      int rank) {
        MemorySegment value = MemorySegment.ofArray(new long[1]);
        long lookups = 0;
        for (int w = 0; w < keys.length; w++) {
            boolean found = counts.get(keys[w], value);
            lookups++;
            long expected = w < STOP_WORDS.length ? 0 : reference.counts()[w];
            long got = found ? value.get(LONG, 0) : 0;
            if (found != (expected > 0) || got != expected) {
                throw new IllegalStateException("rank " + rank + ": word '" + word(w) + "' count=" + (found ? got
                        : "absent") + " expected " + (expected > 0 ? expected : "absent" + (w < STOP_WORDS.length
                        ? " (a stop word, removed)" : " (in no document delivered)")));
            }
        }
        MemorySegment documentKey = MemorySegment.ofArray(new long[1]);
        long[] deliveredBy = reference.deliveredBy();
        for (int id = 0; id < deliveredBy.length; id++) {
            documentKey.set(LONG, 0, id);
            boolean found = seen.get(documentKey, value);
            lookups++;
            long claimedBy = value.get(LONG, 0);
            if (found != (deliveredBy[id] != 0)
                    || found && (claimedBy < 0 || (deliveredBy[id] & 1L << Math.min(claimedBy, 63)) == 0)) {
                throw new IllegalStateException("rank " + rank + ": document " + id + " in the dedup index="
                        + (found ? "claimed by rank " + claimedBy : "absent") + " expected " + (deliveredBy[id] == 0
                        ? "absent (never delivered)" : "claimed by a rank it was delivered to (rank mask 0x"
                        + Long.toHexString(deliveredBy[id]) + ")"));
            }
        }
        return lookups;
    }

    private static void checkTotals(Reference reference, int ranks, Corpus corpus, long[] total, long words,
                                    int removed) {
        long distinctWords = 0;
        for (int w = STOP_WORDS.length; w < reference.counts().length; w++) {
            distinctWords += reference.counts()[w] > 0 ? 1 : 0;
        }
        long deliveries = (long) ranks * corpus.deliveries();
        if (total[0] != reference.tokens() || total[1] != deliveries - reference.documents() || words != distinctWords
                || removed > STOP_WORDS.length) {
            throw new IllegalStateException("word count totals: words counted=" + total[0] + " duplicates skipped="
                    + total[1] + " keys=" + words + " expected words counted=" + reference.tokens()
                    + " duplicates skipped=" + (deliveries - reference.documents()) + " (deliveries=" + deliveries
                    + " less distinct documents=" + reference.documents() + ") keys=" + distinctWords);
        }
    }

    /**
     * A map of {@value #TINY_SLOTS} slots per rank: rank 0 puts keys until one's owner partition is full; the put is
     * refused with {@link MapFullException} before anything is written, so the map holds exactly the keys before it.
     *
     * @return the owner rank the refusal named, and the keys the map took before it
     */
    private static long[] showFullPartition(Group group) {
        long[] result = new long[2];
        try (SymmetricHashMap tiny = SymmetricHashMap.create(group, Long.BYTES, Long.BYTES, TINY_SLOTS)) {
            ExampleRanks.abortingOnFailure(group, () -> {
                if (group.rank() == 0) {
                    MemorySegment value = MemorySegment.ofArray(new long[1]);
                    long key = 0;
                    try {
                        for (; key <= (long) TINY_SLOTS * group.worldSize(); key++) {
                            value.set(LONG, 0, key * 10);
                            tiny.put(key, value);
                        }
                        throw new IllegalStateException("a map of " + TINY_SLOTS + " slots per rank took " + key
                                + " keys without MapFullException, expected at most " + TINY_SLOTS * group.worldSize());
                    } catch (MapFullException refused) {
                        result[0] = refused.owner();
                        result[1] = key;
                    }
                    if (tiny.get(key, value) || tiny.size() != key) {
                        throw new IllegalStateException("the refused key " + key + " present=" + tiny.get(key, value)
                                + ", keys in the map=" + tiny.size() + " expected absent and " + key + " keys");
                    }
                    for (long k = 0; k < key; k++) {
                        if (!tiny.get(k, value) || value.get(LONG, 0) != k * 10) {
                            throw new IllegalStateException("key " + k + " after the refused put: " + value.get(LONG, 0)
                                    + " expected " + k * 10);
                        }
                    }
                }
            }); // before the collective close of the small map
            barrier(group, "full partition shown");
        }
        return result;
    }

    private static void barrier(Group group, String tag) {
        group.allGatherBytes("hash map example: " + tag, new byte[0]);
    }

    /** Collective: every rank's {@code values}, summed element by element. */
    private static long[] gatherSums(Group group, String tag, long[] values) {
        long[] sums = new long[values.length];
        for (long[] theirs : ExampleRanks.allGatherLongs(group, "hash map example: " + tag, values)) {
            for (int i = 0; i < sums.length; i++) {
                sums[i] += theirs[i];
            }
        }
        return sums;
    }

    /** Collective: the largest of every rank's {@code value}. */
    private static long gatherMax(Group group, String tag, long value) {
        long max = Long.MIN_VALUE;
        for (long[] theirs : ExampleRanks.allGatherLongs(group, "hash map example: " + tag, new long[] {value})) {
            max = Math.max(max, theirs[0]);
        }
        return max;
    }
}
