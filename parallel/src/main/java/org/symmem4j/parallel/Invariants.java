package org.symmem4j.parallel;

/**
 * Errors for broken internal invariants: states no caller can reach through the public API, so the fix is not
 * on the user's side. Every such error says so and how to report it, in one wording, so a user who meets one
 * knows at once that it is a symmem4j bug and what to send (errors a user can cause say instead what was
 * expected, what was found and the fix; {@code bench/check-errors.py} checks both kinds).
 */
public final class Invariants {

    /** The sentence every internal-invariant error ends with. */
    public static final String HOW_TO_REPORT = "this is a symmem4j bug, not a usage error: please report it with this"
            + " message, its stack trace and the output of bin/symmem4j-doctor (CONTRIBUTING.md, 'Reporting a bug')";

    private Invariants() {
    }

    /**
     * An exception for a broken internal invariant.
     *
     * @param what what was expected and what was found, e.g. {@code "slot 3 is free but its owner is rank 1"}
     * @return an {@link IllegalStateException} whose message is {@code what} followed by {@link #HOW_TO_REPORT}
     */
    public static IllegalStateException violated(String what) {
        // error-message: the invariant error itself; HOW_TO_REPORT says what to do in place of a fix
        return new IllegalStateException(what + " (" + HOW_TO_REPORT + ")");
    }

    /**
     * An exception for a broken internal invariant, with the failure that revealed it.
     *
     * @param what  what was expected and what was found
     * @param cause the failure that revealed it
     * @return an {@link IllegalStateException} whose message is {@code what} followed by {@link #HOW_TO_REPORT}
     */
    public static IllegalStateException violated(String what, Throwable cause) {
        // error-message: the invariant error itself; HOW_TO_REPORT says what to do in place of a fix
        return new IllegalStateException(what + " (" + HOW_TO_REPORT + ")", cause);
    }
}
