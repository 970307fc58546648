package org.symmem4j.examples.bench.dl4j;

/** Command-line helpers of the DL4J benchmark CLIs, whose flags come as {@code --name value} pairs. */
final class BenchArgs {

    private BenchArgs() {
    }

    /** The value after the flag at {@code args[i]}; an error naming the flag when there is none. */
    static String valueAfter(String[] args, int i, String usage) {
        if (i + 1 >= args.length) {
            throw new IllegalArgumentException("missing value after " + args[i] + " (" + usage + ")");
        }
        return args[i + 1];
    }

    /** {@code value} as an int of at least 1; an error naming the flag otherwise. */
    static int positive(String flag, String value, String usage) {
        int v = Integer.parseInt(value);
        if (v < 1) {
            throw new IllegalArgumentException(flag + "=" + v + " must be >= 1 (" + usage + ")");
        }
        return v;
    }
}
