package org.symmem4j.parallel.cuda;

import org.symmem4j.parallel.Algorithm;

/**
 * How an all-reduce kernel moves its bytes, the second axis of NCCL's algorithm x protocol table:
 * the algorithm (ONE_SHOT, TWO_SHOT) says who reduces what, the protocol how the data and the
 * synchronization cross NVLink. The choice is by message size, from the thresholds below (measured:
 * their javadoc names the results), never by the caller.
 *
 * <pre>
 *   algorithm   protocol   message size (bytes)                          kernel
 *   ONE_SHOT    LL         &lt;= {@link #LL_MAX_BYTES} (64 KiB)                symmem_one_shot_ll_*
 *   ONE_SHOT    SIMPLE     above, up to a landing slot (4 MiB)             symmem_one_shot_*
 *   TWO_SHOT    SIMPLE     &lt; {@link #pushMinBytes} (16 MiB; 64 MiB from 5 ranks) symmem_two_shot_*
 *   TWO_SHOT    PUSH       from there                                      symmem_two_shot_push_*
 * </pre>
 */
enum Protocol {
    /**
     * The data in the peers' buffers (TWO_SHOT pulls the peers' chunks with loads) or in landing
     * slots (ONE_SHOT pushes, then meets once), with barriers on the signal pads around it.
     */
    SIMPLE,
    /**
     * Low latency: 8-byte words that carry 4 bytes of payload and the call's epoch, so a reader waits
     * on the words themselves and no barrier is needed (ONE_SHOT only).
     */
    LL,
    /**
     * Write-only: every byte crosses NVLink as a store into the peers' scratch, in rounds of half the
     * scratch, one meeting of the ranks per round (TWO_SHOT only).
     */
    PUSH;

    /** ONE_SHOTs up to this size use the LL kernel (no barrier; payload words carry the epoch). */
    static final long LL_MAX_BYTES = 64L << 10;
    /**
     * TWO_SHOTs from this size (up to 4 ranks) move every byte over NVLink as a store
     * (symmem_two_shot_push_*), below it they pull the peers' chunks with loads (symmem_two_shot_*):
     * on 2 x H200 the write-only kernel was 8 % faster at 16 MiB and 7 % at 256 MiB, the pulling one
     * 3 % faster at 4 MiB (bench/results/2026-11-22-nvlink-patterns-2xh200.md); on 4 x H200 the
     * write-only kernel took 16 MiB from 99 to 87 us.
     */
    static final long TWO_SHOT_PUSH_MIN_BYTES = 16L << 20;
    /**
     * The same from 5 ranks: on 8 x H200 the write-only kernel was slower at 16 MiB (150 us against
     * 125 us) and faster at 64 MiB (426 against 493 us) and 256 MiB (1485 against 1658 us)
     * (bench/results/2026-11-22-gpu-allreduce-8xh200.md and its previous version).
     */
    static final long TWO_SHOT_PUSH_MIN_BYTES_MANY_RANKS = 64L << 20;

    /**
     * {@return the smallest message, in bytes, that TWO_SHOT sends with {@link #PUSH} among {@code worldSize} ranks}
     *
     * @param worldSize the ranks of the communicator
     */
    static long pushMinBytes(int worldSize) {
        return worldSize <= 4 ? TWO_SHOT_PUSH_MIN_BYTES : TWO_SHOT_PUSH_MIN_BYTES_MANY_RANKS;
    }

    /**
     * The protocol of a kernel all-reduce of {@code bytes}.
     *
     * @param algorithm    {@link Algorithm#ONE_SHOT} or {@link Algorithm#TWO_SHOT}
     * @param bytes        the message's size in bytes
     * @param pushMinBytes the communicator's {@link #pushMinBytes}
     * @return the protocol its kernel uses
     */
    static Protocol of(Algorithm algorithm, long bytes, long pushMinBytes) {
        if (algorithm == Algorithm.ONE_SHOT) {
            return bytes <= LL_MAX_BYTES ? LL : SIMPLE;
        }
        return bytes >= pushMinBytes ? PUSH : SIMPLE;
    }
}
