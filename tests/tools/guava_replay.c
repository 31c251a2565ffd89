/*
 * guava_replay: replays the scenarios of Guava's RateLimiterTest, as
 * tests/anchors/guava/.../GuavaOracle.java prints them with Guava's own
 * answers, against sluice's limiter on a fake clock, through the two calls
 * SL.ACQUIRE makes (limiter_acquire_fit, then limiter_acquire_take when the
 * wait is over), and prints the same script with sluice's answers in place
 * of Guava's.  tests/integration/test_guava.py compares the two.
 *
 * The mapping (Guava -> sluice):
 *   create(rate)                 gcra BURST rate RATE rate 1000 (Guava's
 *                                SmoothBursty stores one second's permits and
 *                                pays forward: GCRA with that burst, served
 *                                when one unit fits), charged its burst at
 *                                creation (SL.CHARGE): Guava starts with no
 *                                stored permits, a sluice key starts full
 *   create(rate, warmup, cold)   warmup BURST 0 RATE rate 1000 WARMUP ms
 *                                COLD cold
 *   setRate(r)                   the same key asked with the new RATE (an
 *                                inline limit changed, or a policy reloaded)
 *   acquire(n)                   SL.ACQUIRE key QTY n with no deadline
 *   tryAcquire(n, t)             SL.ACQUIRE key QTY n TIMEOUT t
 * A rate below one per second is count 1 per 1000/rate ms.
 *
 * Input lines (stdin): "case NAME KIND RATE [WARMUP_MS COLD]", "acquire N
 * ...", "try N TIMEOUT_MS ...", "sleep MS", "rate R", "end"; the rest of an
 * acquire/try line (Guava's answer) is replaced by sluice's: "R<us>" the
 * wait in microseconds, "T"/"F" whether a try got its permits.  Exit 2 on
 * a line it cannot read or a limiter error.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algo.h"
#include "limiter.h"
#include "num.h"
#include "sluice/error.h"

#define KEY "g"

struct replay {
    struct limiter *lim;
    struct algo_params p;
    int bursty;
    int64_t warmup_ms, cold;
    int64_t now;
};

/* p for kind at rate permits per second. */
static int replay_params(struct replay *r, double rate)
{
    int64_t count, period_ns;
    if (!(rate > 0))
        return -SLUICE_EINVAL;
    if (rate >= 1 && rate == floor(rate)) {
        count = (int64_t)rate;
        period_ns = NUM_NS_PER_S;
    } else {
        count = 1;
        period_ns = (int64_t)llround(1e9 / rate);
    }
    if (r->bursty)
        return algo_params_init(&r->p, ALGO_GCRA, (int64_t)ceil(rate), count, period_ns, 0);
    int rc = algo_params_init(&r->p, ALGO_WARMUP, 0, count, period_ns, 0);
    if (rc == 0)
        rc = algo_params_set_warmup(&r->p, r->warmup_ms * NUM_NS_PER_MS, r->cold);
    return rc;
}

/* SL.ACQUIRE with a deadline timeout_ns from now (-1: none): the wait, or
 * -1 when refused. */
static int64_t replay_acquire(struct replay *r, int64_t qty, int64_t timeout_ns)
{
    int64_t delay;
    struct algo_result res;
    if (limiter_acquire_fit(r->lim, KEY, 1, &r->p, qty, r->now, r->now, &delay, NULL) < 0)
        return -2;
    if (delay == ALGO_NEVER || (timeout_ns >= 0 && delay > timeout_ns))
        return -1;
    r->now += delay;
    if (limiter_acquire_take(r->lim, KEY, 1, &r->p, qty, r->now, r->now, &res) < 0 || res.limited)
        return -2;
    return delay;
}

int main(void)
{
    char line[512];
    struct replay r;
    memset(&r, 0, sizeof(r));
    while (fgets(line, sizeof(line), stdin) != NULL) {
        char name[256], kind[32];
        double rate;
        long long a, b, c;
        line[strcspn(line, "\n")] = '\0';
        if (sscanf(line, "case %255s %31s %lf %lld %lld", name, kind, &rate, &a, &b) >= 3) {
            limiter_destroy(r.lim);
            memset(&r, 0, sizeof(r));
            if (limiter_create(&r.lim, NULL) < 0)
                return 2;
            r.bursty = strcmp(kind, "bursty") == 0;
            r.warmup_ms = a;
            r.cold = b;
            r.now = 1000 * NUM_NS_PER_S; /* any start; Guava's is 0 */
            if (replay_params(&r, rate) < 0)
                return 2;
            if (r.bursty) {
                /* Guava's SmoothBursty starts with nothing stored. */
                struct algo_result res;
                if (limiter_charge(r.lim, KEY, 1, &r.p, r.p.burst, r.now, &res) < 0)
                    return 2;
            }
            printf("%s\n", line);
        } else if (sscanf(line, "acquire %lld", &a) == 1) {
            int64_t w = replay_acquire(&r, a, -1);
            if (w < -1)
                return 2;
            if (w < 0)
                printf("acquire %lld NEVER\n", a);
            else
                printf("acquire %lld R%lld\n", a, (long long)((w + 500) / 1000));
        } else if (sscanf(line, "try %lld %lld", &a, &c) == 2) {
            int64_t w = replay_acquire(&r, a, c * NUM_NS_PER_MS);
            if (w < -1)
                return 2;
            if (w < 0)
                printf("try %lld %lld F\n", a, c);
            else
                printf("try %lld %lld T R%lld\n", a, c, (long long)((w + 500) / 1000));
        } else if (sscanf(line, "sleep %lld", &a) == 1) {
            r.now += a * NUM_NS_PER_MS;
            printf("%s\n", line);
        } else if (sscanf(line, "rate %lf", &rate) == 1) {
            if (replay_params(&r, rate) < 0)
                return 2;
            printf("%s\n", line);
        } else if (strcmp(line, "end") == 0) {
            printf("end\n");
        } else {
            fprintf(stderr, "guava_replay: cannot read '%s'\n", line);
            return 2;
        }
    }
    limiter_destroy(r.lim);
    return 0;
}
