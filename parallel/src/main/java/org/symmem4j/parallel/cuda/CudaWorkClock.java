package org.symmem4j.parallel.cuda;

import java.lang.foreign.MemorySegment;
import org.symmem4j.parallel.WorkClock;
import org.symmem4j.parallel.cuda.ffi.CudaDriver;

/**
 * {@link WorkClock} of a rank's CUDA stream: timing events, all created with the clock and recorded
 * again each round (a mark is an index into them), placed on the host clock from the round's first
 * event. Events are never created or destroyed during a round: creating one may grow the driver's
 * event pool, which can wait for the shared context, and on a GPU that ranks share a peer's kernel may
 * be spinning in a device-side wait that only this rank's next launch satisfies (an 8-rank hang on one
 * H100, bench/results/2026-11-23-gpu-shared-8ranks-hang.md).
 */
final class CudaWorkClock implements WorkClock {

    private final CudaDriver driver;
    private final MemorySegment context;
    private final MemorySegment stream;
    /** [0]: the round's start; [1..]: the marks. */
    private final MemorySegment[] events;
    /** Events recorded this round, the start included; 0 before the first {@link #restart()}. */
    private int recorded;
    /** Host time at which the round's start event was recorded, in System.nanoTime() nanoseconds. */
    private long originNanos;
    private boolean closed;

    CudaWorkClock(CudaDriver driver, MemorySegment context, MemorySegment stream, int marksPerRound) {
        if (marksPerRound < 0) {
            throw new IllegalArgumentException("marksPerRound=" + marksPerRound + " expected >= 0 (fix: ask"
                    + " SymmetricMemory.clock for 0 or more marks)");
        }
        this.driver = driver;
        this.context = context;
        this.stream = stream;
        this.events = new MemorySegment[marksPerRound + 1];
        driver.setCurrent(context);
        try {
            for (int i = 0; i < events.length; i++) {
                events[i] = driver.createEvent();
            }
        } catch (RuntimeException e) {
            destroyEvents();
            throw e;
        }
    }

    @Override
    public void restart() {
        checkOpen();
        driver.setCurrent(context);
        originNanos = System.nanoTime();
        driver.record(events[0], stream);
        recorded = 1;
    }

    @Override
    public long mark() {
        return mark(stream);
    }

    /** Records the next event on {@code on} (this clock's stream or another of its context: one time line). */
    @Override
    public long mark(MemorySegment on) {
        checkOpen();
        if (recorded == 0) {
            throw new IllegalStateException("mark() before restart(): a round starts with restart() (fix: call"
                    + " restart() at the start of each round)");
        }
        if (recorded == events.length) {
            throw new IllegalStateException("clock of " + (events.length - 1) + " marks per round: mark " + recorded
                    + " does not fit (fix: ask SymmetricMemory.clock for as many marks as a round takes)");
        }
        driver.setCurrent(context);
        driver.record(events[recorded], on);
        return recorded++;
    }

    /** The origin plus the event's time after the round's start event; the stream must have run past it. */
    @Override
    public long nanos(long mark) {
        checkOpen();
        if (mark < 1 || mark >= recorded) {
            throw new IllegalArgumentException("mark=" + mark + " expected a mark of this round, 1.." + (recorded - 1)
                    + " (fix: pass a value mark() returned since the last restart())");
        }
        driver.setCurrent(context);
        return originNanos + Math.round(driver.elapsedMillis(events[0], events[(int) mark]) * 1e6);
    }

    @Override
    public void close() {
        if (!closed) {
            closed = true;
            driver.setCurrent(context);
            destroyEvents();
        }
    }

    private void destroyEvents() {
        for (MemorySegment e : events) {
            if (e != null) {
                driver.destroyEvent(e);
            }
        }
    }

    private void checkOpen() {
        if (closed) {
            throw new IllegalStateException("the clock is closed (fix: use it before close(), or ask"
                    + " SymmetricMemory.clock for a new one)");
        }
    }
}
