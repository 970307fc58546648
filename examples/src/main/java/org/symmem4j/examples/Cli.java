package org.symmem4j.examples;

import java.io.PrintWriter;
import java.util.function.Function;
import picocli.CommandLine;
import picocli.CommandLine.IVersionProvider;
import picocli.CommandLine.ParameterException;

/**
 * Command-line parsing shared by the examples and benchmark CLIs: each program declares its options
 * as a picocli {@code @Command} class whose field initializers are the defaults; this turns the
 * arguments into that object. {@code --help} prints the usage and exits 0; an unknown option, a
 * missing or malformed value, or a value the program's own check rejects prints the reason and the
 * usage on stderr and exits 2 (the convention of picocli's {@code execute} and of most Unix tools).
 */
public final class Cli {

    /** Exit status for bad command-line input. */
    public static final int USAGE_ERROR = 2;

    private Cli() {
    }

    /** Parses {@code args} into {@code flags}; see {@link #parse(Object, String[], Function)}. */
    public static <T> T parse(T flags, String[] args) {
        return parse(flags, args, f -> f);
    }

    /**
     * Parses {@code args} into {@code flags}, then {@code build}s the program's settings from them.
     * An {@link IllegalArgumentException} from {@code build} is a rejected value: its message and the
     * usage go to stderr and the JVM exits with {@link #USAGE_ERROR}, as for a parse error.
     */
    public static <T, R> R parse(T flags, String[] args, Function<T, R> build) {
        CommandLine cl = new CommandLine(flags);
        try {
            CommandLine.ParseResult result = cl.parseArgs(args);
            if (CommandLine.printHelpIfRequested(result)) {
                System.exit(0);
            }
            return build.apply(flags);
        } catch (ParameterException e) {
            exitWithUsage(e.getCommandLine(), e.getMessage());
        } catch (IllegalArgumentException e) {
            exitWithUsage(cl, e.getMessage());
        }
        throw new AssertionError("unreachable: exitWithUsage exits");
    }

    /** {@code value} if it is at least 1; otherwise an error naming the flag, for {@link #parse}'s build step. */
    public static int positive(String flag, int value) {
        if (value < 1) {
            throw new IllegalArgumentException(flag + "=" + value + " expected >= 1");
        }
        return value;
    }

    /**
     * Checks that a run of {@code steps} steps keeps some after its {@code warmup} (flags {@code --steps} and
     * {@code --warmup}); otherwise an error with the fix, for {@link #parse}'s build step.
     */
    public static void stepsBeyondWarmup(int steps, int warmup) {
        if (steps <= warmup) {
            throw new IllegalArgumentException("--steps=" + steps + " must exceed --warmup=" + warmup
                    + " (fix: more steps, or a shorter warm-up)");
        }
    }

    private static void exitWithUsage(CommandLine cl, String message) {
        PrintWriter err = new PrintWriter(System.err, true);
        err.println(cl.getColorScheme().errorText("error: " + message));
        cl.usage(err);
        err.flush();
        System.exit(USAGE_ERROR);
    }

    /** {@code --version}: the jar's Implementation-Version when packaged with one, else the build's. */
    public static final class Version implements IVersionProvider {
        @Override
        public String[] getVersion() {
            String v = Cli.class.getPackage().getImplementationVersion();
            return new String[] {"symmem4j " + (v != null ? v : "0.1.0-SNAPSHOT (development build)")};
        }
    }
}
