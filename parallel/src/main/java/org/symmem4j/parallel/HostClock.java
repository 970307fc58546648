package org.symmem4j.parallel;

/** {@link WorkClock#host()}: the host clock, stateless. */
enum HostClock implements WorkClock {
    INSTANCE;

    @Override
    public void restart() {
    }

    @Override
    public long mark() {
        return System.nanoTime();
    }

    @Override
    public long nanos(long mark) {
        return mark;
    }

    @Override
    public void close() {
    }
}
