package org.symmem4j.pipeline.channel;

import org.symmem4j.parallel.SymmemException;

/**
 * Another rank of the pipeline failed and poisoned the links (see {@link StageLink#poisonAll}), so
 * this rank stopped instead of waiting for messages that will never come. The failing rank throws
 * the original error; this one only says where this rank was.
 */
public class PipelineAbortedException extends SymmemException {

    /**
     * An abort seen on this rank.
     *
     * @param message where this rank was when it saw the abort
     */
    public PipelineAbortedException(String message) {
        super(message);
    }
}
