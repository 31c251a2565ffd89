"""Guava's own RateLimiterTest, with Guava itself as the oracle: the
scenarios of that test (rates, sleeps, permits, setRate) are run by Guava
(Debian's libguava-java, tests/anchors/guava/.../GuavaOracle.java, compiled
here with javac) on a fake stopwatch, and replayed by tests/tools/guava_replay
against sluice's limiter through the calls SL.ACQUIRE makes, on a fake clock
(the mapping is in guava_replay.c: Guava's create(rate) is gcra with one
second's burst, its warm-up create(...) is warmup BURST 0).  Every wait must
match Guava's to within 5 microseconds (Guava counts in microseconds, sluice
in nanoseconds, rounded up), every tryAcquire must get Guava's answer.

Two scenarios of sluice's own run the same way, Guava still the oracle: a
warm key's rate lowered (4/s to 2/s) stays warm, a half-cold key's rate
raised stays half cold (setRate rescales the stored permits; an absolute
count clamped to the new maximum paid cold costs, or none).

Not replayed, and why (the rest of RateLimiterTest):
  - testDoubleMinValueCanAcquireExactlyOnce, testInfinity_Bursty,
    testInfinity_BustyTimeElapsed, testInfinity_WarmUp,
    testInfinity_WarmUpTimeElapsed: rates of Double.MIN_VALUE and +infinity
    have no RATE count period_ms (whole units per whole milliseconds).
  - testSimpleRateUpdate, testAcquireParameterValidation,
    testCreateWarmupParameterValidation: Java argument checks; sluice's own
    (RATE 0, QTY < 0, COLD 0 answer ERR) are tested in test_commands_sl.c.
  - testNulls, testMockingMockito, testMockingEasyMock: Java API mechanics.
  - testSimpleAcquireReturnValues is testSimpleWithWait's scenario, and
    testTryAcquire_overflow's (a Long.MAX_VALUE timeout) has no SL.ACQUIRE
    TIMEOUT beyond its own bound: both covered by the cases run.
  - testWeNeverGetABurstMoreThanOneSec and
    testTimeToWarmUpIsHonouredEvenWithWeights draw random weights: run with
    a seeded Random, 3 of the 100 trials of the latter.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sluicetest import ROOT  # noqa: E402

GUAVA_JAR = "/usr/share/java/guava.jar"
JAVAC = shutil.which("javac")
ORACLE = os.path.join(ROOT, "tests", "anchors", "guava", "com", "google", "common", "util",
                      "concurrent", "GuavaOracle.java")
TOOLS = os.environ.get("SLUICE_TESTS_BIN", os.path.join(ROOT, "build", "tests"))
REPLAY = os.path.join(TOOLS, "guava_replay")
TOLERANCE_US = 5


def cases(text):
    """{name: [lines]} of a script."""
    out, name = {}, None
    for line in text.splitlines():
        if line.startswith("case "):
            name = line.split()[1]
            out[name] = [line]
        elif name is not None:
            out[name].append(line)
    return out


def same(guava, sluice):
    """One line: the same words, waits within TOLERANCE_US."""
    g, s = guava.split(), sluice.split()
    if len(g) != len(s):
        return False
    for a, b in zip(g, s):
        ma, mb = re.fullmatch(r"R(\d+)", a), re.fullmatch(r"R(\d+)", b)
        if ma and mb:
            if abs(int(ma.group(1)) - int(mb.group(1))) > TOLERANCE_US:
                return False
        elif a != b:
            return False
    return True


@unittest.skipUnless(JAVAC and os.path.exists(GUAVA_JAR),
                     "javac (default-jdk-headless) or libguava-java is not installed")
class GuavaTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        tmp = tempfile.mkdtemp(prefix="sluice-guava-")
        try:
            subprocess.run([JAVAC, "-d", tmp, "-cp", GUAVA_JAR, ORACLE], check=True, timeout=300)
            cls.guava = subprocess.run(
                ["java", "-cp", GUAVA_JAR + ":" + tmp,
                 "com.google.common.util.concurrent.GuavaOracle"],
                check=True, capture_output=True, text=True, timeout=300).stdout
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        cls.sluice = subprocess.run([REPLAY], input=cls.guava, check=True, capture_output=True,
                                    text=True, timeout=300).stdout

    def test_guava_answers_are_the_ones_its_test_expects(self):
        # a few of RateLimiterTest's own expected strings, as a check of the oracle
        g = cases(self.guava)
        waits = [int(x[1:]) for line in g["testWarmUp"] for x in line.split()
                 if re.fullmatch(r"R\d+", x)]
        # "R0.00, R1.38, R1.13, R0.88, R0.63, R0.50, R0.50, R0.50" in Guava's test
        self.assertEqual(waits[:8], [0, 1375000, 1125000, 875000, 625000, 500000, 500000,
                                     500000])
        upd = [line for line in g["testWarmUpAndUpdate"] if line.startswith("acquire")]
        self.assertEqual(upd[11], "acquire 1 R875000")    # #4, R0.88 in Guava's test
        self.assertEqual(upd[12], "acquire 1 R343750")    # #5, R0.34

    def test_every_case_matches_guava(self):
        g, s = cases(self.guava), cases(self.sluice)
        self.assertEqual(list(g), list(s))
        self.assertGreaterEqual(len(g), 63)
        differ = []
        for name in g:
            for n, (a, b) in enumerate(zip(g[name], s[name])):
                if not same(a, b):
                    differ.append("%s line %d: Guava %r, sluice %r" % (name, n, a, b))
                    break
            else:
                if len(g[name]) != len(s[name]):
                    differ.append("%s: %d lines, sluice %d" % (name, len(g[name]),
                                                              len(s[name])))
        self.assertEqual(differ, [])


if __name__ == "__main__":
    unittest.main()
