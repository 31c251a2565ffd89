/*
 * Guava's answers to the scenarios of its own RateLimiterTest
 * (guava-tests/test/com/google/common/util/concurrent/RateLimiterTest.java),
 * computed by Guava itself (Debian's libguava-java) on a fake stopwatch, and
 * printed as a script that tests/tools/guava_replay.c replays against
 * sluice's limiter.  Written for sluice; the scenarios (rates, sleeps,
 * permits) are Guava's test cases, Copyright (C) 2012 The Guava Authors,
 * Apache License 2.0.
 *
 * It lives in Guava's package only to reach the package-private factories
 * that take a stopwatch, as Guava's own test does.
 *
 * Output, one line each:
 *   case NAME KIND RATE [WARMUP_MS COLD]   KIND: bursty (Guava's create(rate))
 *                                          or warmup
 *   acquire N R<us>                        acquire(N) and the wait it slept, in
 *                                          microseconds (Guava's test prints
 *                                          them as seconds, "R0.63")
 *   try N TIMEOUT_MS T|F [R<us>]           tryAcquire(N, TIMEOUT_MS ms)
 *   sleep MS                               the user sleeps
 *   rate R                                 setRate(R)
 *   end
 * Run: java -cp guava.jar:CLASSES com.google.common.util.concurrent.GuavaOracle
 */
package com.google.common.util.concurrent;

import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Random;
import java.util.concurrent.TimeUnit;

public final class GuavaOracle {
  /** RateLimiterTest's FakeStopwatch: time moves only when someone sleeps. */
  static final class FakeStopwatch extends RateLimiter.SleepingStopwatch {
    long instantNanos = 0;
    final List<String> events = new ArrayList<>();

    @Override
    protected long readMicros() {
      return TimeUnit.NANOSECONDS.toMicros(instantNanos);
    }

    @Override
    protected void sleepMicrosUninterruptibly(long micros) {
      instantNanos += TimeUnit.MICROSECONDS.toNanos(micros);
      events.add("R" + micros);
    }

    String take() {
      String s = String.join(" ", events);
      events.clear();
      return s;
    }
  }

  /** One scenario: a limiter on a fake stopwatch, every call printed. */
  static final class Case {
    final FakeStopwatch sw = new FakeStopwatch();
    final RateLimiter rl;

    Case(String name, double rate) {
      rl = RateLimiter.create(rate, sw);
      System.out.printf(Locale.ROOT, "case %s bursty %s%n", name, fmt(rate));
    }

    Case(String name, double rate, long warmupMs, double cold) {
      rl = RateLimiter.create(rate, warmupMs, TimeUnit.MILLISECONDS, cold, sw);
      System.out.printf(Locale.ROOT, "case %s warmup %s %d %s%n", name, fmt(rate), warmupMs,
          fmt(cold));
    }

    Case acquire(int n) {
      rl.acquire(n);
      System.out.printf("acquire %d %s%n", n, sw.take());
      return this;
    }

    Case acquire(int n, int times) {
      for (int i = 0; i < times; i++) acquire(n);
      return this;
    }

    Case tryAcquire(int n, long timeoutMs) {
      boolean ok = rl.tryAcquire(n, timeoutMs, TimeUnit.MILLISECONDS);
      String ev = sw.take();
      System.out.printf("try %d %d %s%s%n", n, timeoutMs, ok ? "T" : "F",
          ev.isEmpty() ? "" : " " + ev);
      return this;
    }

    Case sleep(long ms) {
      sw.instantNanos += TimeUnit.MILLISECONDS.toNanos(ms);
      System.out.printf("sleep %d%n", ms);
      return this;
    }

    Case rate(double r) {
      rl.setRate(r);
      System.out.printf("rate %s%n", fmt(r));
      return this;
    }

    void end() {
      System.out.println("end");
    }
  }

  static String fmt(double d) {
    return d == Math.rint(d) ? Long.toString((long) d) : Double.toString(d);
  }

  /** RateLimiterTest.measureTotalTimeMillis's calls: random weights, then 1. */
  static void weights(Case c, int permits, Random random) {
    while (permits > 0) {
      int next = Math.max(1, random.nextInt(permits));
      permits -= next;
      c.acquire(next);
    }
    c.acquire(1);
  }

  public static void main(String[] args) {
    new Case("testSimple", 5.0).acquire(1, 3).end();
    new Case("testSimpleWithWait", 5.0).acquire(1).sleep(200).acquire(1, 2).end();
    new Case("testSimpleAcquireEarliestAvailableIsInPast", 5.0)
        .acquire(1).sleep(400).acquire(1, 3).end();
    new Case("testOneSecondBurst", 5.0)
        .sleep(1000).sleep(1000).acquire(1).acquire(1).acquire(3).acquire(1).acquire(1).end();
    new Case("testImmediateTryAcquire", 1.0).tryAcquire(1, 0).tryAcquire(1, 0).end();
    new Case("testWarmUp", 2.0, 4000, 3.0)
        .acquire(1, 8).sleep(500).sleep(4000).acquire(1, 8).sleep(500).sleep(2000)
        .acquire(1, 8).end();
    new Case("testWarmUpWithColdFactor", 5.0, 4000, 10.0)
        .acquire(1, 8).sleep(200).sleep(4000).acquire(1, 8).sleep(200).sleep(1000)
        .acquire(1, 8).end();
    new Case("testWarmUpWithColdFactor1", 5.0, 4000, 1.0)
        .acquire(1, 8).sleep(340).acquire(1, 8).end();
    new Case("testWarmUpAndUpdate", 2.0, 4000, 3.0)
        .acquire(1, 8).sleep(4500).acquire(1, 3).rate(4.0).acquire(1).acquire(1, 4)
        .sleep(4250).acquire(1, 11).end();
    new Case("testWarmUpAndUpdateWithColdFactor", 5.0, 4000, 10.0)
        .acquire(1, 8).sleep(4200).acquire(1, 3).rate(10.0).acquire(1).acquire(1, 4)
        .sleep(4100).acquire(1, 11).end();
    // Not in RateLimiterTest (sluice's own scenarios, Guava still the
    // oracle): a warm key's rate lowered, 4/s to 2/s, keeps it warm (its
    // stored permits rescale by new max / old max), and a half-cold key's
    // rate raised keeps it half cold.
    new Case("warmKeyRateLowered", 4.0, 2000, 3.0)
        .acquire(1, 12).rate(2.0).acquire(1, 4).end();
    new Case("halfColdKeyRateRaised", 2.0, 4000, 3.0)
        .acquire(1, 8).sleep(3500).rate(4.0).acquire(1, 6).end();
    new Case("testBurstyAndUpdate", 1.0)
        .acquire(1).acquire(1).rate(2.0).acquire(1).acquire(2).acquire(4).acquire(1).end();
    new Case("testTryAcquire_noWaitAllowed", 5.0)
        .tryAcquire(1, 0).tryAcquire(1, 0).tryAcquire(1, 0).sleep(100).tryAcquire(1, 0).end();
    new Case("testTryAcquire_someWaitAllowed", 5.0)
        .tryAcquire(1, 0).tryAcquire(1, 200).tryAcquire(1, 100).sleep(100).tryAcquire(1, 100)
        .end();
    new Case("testTryAcquire_negative", 5.0)
        .tryAcquire(5, 0).sleep(900).tryAcquire(1, 0).sleep(100).tryAcquire(1, 0).end();
    new Case("testSimpleWeights", 1.0)
        .acquire(1).acquire(1).acquire(2).acquire(4).acquire(8).acquire(1).end();
    // testWeNeverGetABurstMoreThanOneSec: a second's worth in a burst, then
    // another second's worth, after each rate change (seeded weights)
    Random random = new Random(18);
    Case c = new Case("testWeNeverGetABurstMoreThanOneSec", 1.0);
    for (int rate : new int[] {1000, 1, 10, 1000000, 10, 1}) {
      c.sleep(rate * 1000L).rate(rate);
      weights(c, rate, random);
      weights(c, rate, random);
    }
    c.end();
    // testTimeToWarmUpIsHonouredEvenWithWeights, with seeded weights (a few
    // trials of Guava's 100)
    int warmupPermits = 10;
    for (int trial = 0; trial < 3; trial++) {
      for (double coldFactor : new double[] {2.0, 3.0, 10.0}) {
        for (double qps : new double[] {4.0, 2.0, 1.0, 0.5, 0.1}) {
          long warmupMillis = (long) ((1 + coldFactor) * warmupPermits / (2.0 * qps) * 1000.0);
          Case w = new Case(String.format(Locale.ROOT,
              "testTimeToWarmUpIsHonouredEvenWithWeights/%d/%s/%s", trial, fmt(coldFactor),
              fmt(qps)), qps, warmupMillis, coldFactor);
          weights(w, warmupPermits, random);
          w.end();
        }
      }
    }
  }
}
