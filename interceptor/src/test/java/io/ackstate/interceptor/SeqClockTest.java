package io.ackstate.interceptor;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.Test;

class SeqClockTest {
    @Test
    void followsTheWallClockAndNeverRepeatsWhenItStandsStill() {
        SeqClock clock = new SeqClock();
        assertEquals(1_000, clock.next(1));
        assertEquals(1_001, clock.next(1)); // same millisecond: one above the last
        assertEquals(5_000, clock.next(5));
    }

    @Test
    void neverStepsBackWhenTheWallClockDoes() {
        SeqClock clock = new SeqClock();
        clock.next(9);
        assertEquals(9_001, clock.next(0)); // a clock set back, or a broker whose clock is behind
    }

    @Test
    void aNewBrokerRunContinuesAboveTheLastRunsSeq() throws InterruptedException {
        SeqClock first = new SeqClock();
        long last = 0;
        for (int i = 0; i < 999; i++) { // fewer than 1,000 events in a millisecond
            last = first.next(System.currentTimeMillis());
        }
        Thread.sleep(2);
        assertTrue(new SeqClock().next(System.currentTimeMillis()) > last);
    }
}
