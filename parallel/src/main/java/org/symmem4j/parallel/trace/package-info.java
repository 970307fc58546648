/**
 * Chrome trace JSON (what https://ui.perfetto.dev and chrome://tracing open) for the timelines the
 * trainers above record: {@link org.symmem4j.parallel.trace.ChromeTraceWriter}. Plain text, no native
 * code; it lives here so that the pipeline and the data-parallel wrapper, which sit on this module
 * side by side, write traces the same way.
 */
package org.symmem4j.parallel.trace;
