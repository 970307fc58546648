/**
 * Traces for the tools engineers already use. Chrome trace JSON (what https://ui.perfetto.dev and
 * chrome://tracing open) for the timelines the trainers above record:
 * {@link org.symmem4j.parallel.trace.ChromeTraceWriter}, plain text; it lives here so that the pipeline and the
 * data-parallel wrapper, which sit on this module side by side, write traces the same way. NVTX ranges for Nsight
 * Systems: {@link org.symmem4j.parallel.trace.Nvtx}, bound through FFM when an NVTX library is present and a folded
 * no-op when it is not (so the pipeline module marks its actions without binding anything itself).
 */
package org.symmem4j.parallel.trace;
