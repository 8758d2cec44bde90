package io.ackstate.interceptor;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.Test;

class SeqClockTest {
    @Test
    void followsTheWallClockAndNeverRepeatsWhenItStandsStill() {
        AtomicLong now = new AtomicLong(1_000);
        SeqClock clock = new SeqClock(now::get);
        assertEquals(1_000, clock.next());
        assertEquals(1_001, clock.next()); // same microsecond: one above the last
        now.set(5_000);
        assertEquals(5_000, clock.next());
    }

    @Test
    void neverStepsBackWhenTheWallClockDoes() {
        AtomicLong now = new AtomicLong(9_000);
        SeqClock clock = new SeqClock(now::get);
        clock.next();
        now.set(100); // a clock set back, or a broker whose clock is behind
        assertEquals(9_001, clock.next());
    }

    @Test
    void aNewBrokerRunContinuesAboveTheLastRunsSeq() {
        long first = new SeqClock().next();
        long restarted = new SeqClock().next();
        assertEquals(true, restarted > first);
    }
}
