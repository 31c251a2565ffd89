/*
 * gossip_sim_*: the simulator adapter (see gossip/sim.h).
 *
 * Why events and not threads: determinism.  Everything that happens is an
 * event in one binary heap, ordered by (time, insertion number); a node's
 * timer is one pending "tick" event at its next deadline (stale ones are
 * recognised by their time and skipped), a packet is one "deliver" event.
 * Cost is O(log E) per event, independent of the number of nodes.
 */
#include "gossip/sim.h"

#include <stdlib.h>
#include <string.h>

#include "io.h"

#define SIM_PORT 7946
#define NEVER    INT64_MAX

enum { EV_TICK, EV_DELIVER };

struct ev {
    int64_t t;
    uint64_t seq;
    int type;
    int to, from;
    uint32_t gen; /* the receiving node's life; stale events are skipped */
    uint8_t *pkt;
    size_t len;
};

struct override {
    int from, to;
    int blocked;
    int has_link;
    struct gossip_sim_link link;
};

struct simnode {
    struct gossip_sim *sim;
    int idx;
    uint32_t gen;
    struct gossip_node *node;
    struct gossip_config cfg;
    char name[GOSSIP_NAME_MAX + 1];
    struct gossip_addr addr;
    uint32_t last_incarnation;
    int group;
    int64_t lag;
    int64_t frozen_until; /* gossip_sim_freeze: nothing runs before then */
    int64_t tick_at;
    uint64_t rng;
    uint64_t sent, received;
};

struct gossip_sim {
    uint64_t seed, rng, evseq, events;
    int64_t now;
    struct gossip_sim_link link;
    struct simnode **nodes;
    size_t n, cap;
    struct ev *heap;
    size_t hn, hcap;
    struct override *ov;
    size_t nov;
    void (*tap)(void *ud, int from, int to, const uint8_t *pkt, size_t len);
    void *tap_ud;
};

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double unit(uint64_t *s)
{
    return (double)(splitmix(s) >> 11) / 9007199254740992.0;
}

/* ---- heap ----------------------------------------------------------------- */

static int ev_less(const struct ev *a, const struct ev *b)
{
    return a->t < b->t || (a->t == b->t && a->seq < b->seq);
}

static int heap_push(struct gossip_sim *s, struct ev e)
{
    if (s->hn == s->hcap) {
        size_t cap = s->hcap ? s->hcap * 2 : 1024;
        struct ev *h = realloc(s->heap, cap * sizeof(*h));
        if (h == NULL)
            return -GOSSIP_ENOMEM;
        s->heap = h;
        s->hcap = cap;
    }
    e.seq = s->evseq++;
    size_t i = s->hn++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!ev_less(&e, &s->heap[p]))
            break;
        s->heap[i] = s->heap[p];
        i = p;
    }
    s->heap[i] = e;
    return 0;
}

static struct ev heap_pop(struct gossip_sim *s)
{
    struct ev top = s->heap[0];
    struct ev last = s->heap[--s->hn];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= s->hn)
            break;
        if (c + 1 < s->hn && ev_less(&s->heap[c + 1], &s->heap[c]))
            c++;
        if (!ev_less(&s->heap[c], &last))
            break;
        s->heap[i] = s->heap[c];
        i = c;
    }
    if (s->hn > 0)
        s->heap[i] = last;
    return top;
}

/* ---- adapter callbacks ----------------------------------------------------- */

static void resched(struct simnode *sn)
{
    if (sn->node == NULL)
        return;
    int64_t d = gossip_node_next_deadline(sn->node);
    if (d < sn->sim->now)
        d = sn->sim->now;
    if (d >= sn->tick_at && sn->tick_at >= sn->sim->now)
        return; /* an earlier or equal tick is already pending */
    struct ev e = {.t = d, .type = EV_TICK, .to = sn->idx, .gen = sn->gen};
    if (heap_push(sn->sim, e) == 0)
        sn->tick_at = d;
}

static int addr_index(const struct gossip_sim *s, const struct gossip_addr *a)
{
    if (a->family != 4 || a->ip[0] != 10 || a->port != SIM_PORT)
        return -1;
    size_t i = ((size_t)a->ip[1] << 16) | ((size_t)a->ip[2] << 8) | a->ip[3];
    return i < s->n ? (int)i : -1;
}

static const struct override *find_ov(const struct gossip_sim *s, int from, int to)
{
    for (size_t i = 0; i < s->nov; i++)
        if (s->ov[i].from == from && s->ov[i].to == to)
            return &s->ov[i];
    return NULL;
}

static void deliver_later(struct gossip_sim *s, int from, int to, const uint8_t *buf, size_t len,
                          int64_t at)
{
    struct simnode *dst = s->nodes[to];
    uint8_t *copy = malloc(len ? len : 1);
    if (copy == NULL)
        return;
    memcpy(copy, buf, len);
    struct ev e = {.t = at + dst->lag,
                   .type = EV_DELIVER,
                   .to = to,
                   .from = from,
                   .gen = dst->gen,
                   .pkt = copy,
                   .len = len};
    if (heap_push(s, e) != 0)
        free(copy);
}

static int sim_send(void *ctx, const struct gossip_addr *to, const uint8_t *buf, size_t len)
{
    struct simnode *src = ctx;
    struct gossip_sim *s = src->sim;
    int dst = addr_index(s, to);
    src->sent += len;
    if (dst < 0)
        return 0; /* nobody there: lost, like UDP */
    if (s->tap != NULL)
        s->tap(s->tap_ud, src->idx, dst, buf, len);
    if (s->nodes[dst]->group != src->group)
        return 0;
    const struct gossip_sim_link *l = &s->link;
    const struct override *o = s->nov ? find_ov(s, src->idx, dst) : NULL;
    if (o != NULL && o->blocked)
        return 0;
    if (o != NULL && o->has_link)
        l = &o->link;
    if (l->drop > 0 && unit(&s->rng) < l->drop)
        return 0;
    int copies = (l->duplicate > 0 && unit(&s->rng) < l->duplicate) ? 2 : 1;
    for (int c = 0; c < copies; c++) {
        int64_t d = l->delay_ns;
        if (l->jitter_ns > 0)
            d += (int64_t)(splitmix(&s->rng) % (uint64_t)(l->jitter_ns + 1));
        deliver_later(s, src->idx, dst, buf, len, s->now + d);
    }
    return 0;
}

static void sim_random(void *ctx, void *buf, size_t len)
{
    struct simnode *sn = ctx;
    uint8_t *p = buf;
    while (len > 0) {
        uint64_t v = splitmix(&sn->rng);
        size_t k = len < 8 ? len : 8;
        memcpy(p, &v, k);
        p += k;
        len -= k;
    }
}

static void sim_wakeup(void *ctx)
{
    resched(ctx);
}

/* ---- nodes ------------------------------------------------------------------ */

static int start_node(struct gossip_sim *s, struct simnode *sn, uint32_t incarnation)
{
    struct gossip_io io = {.ctx = sn, .send = sim_send, .random = sim_random, .wakeup = sim_wakeup};
    struct gossip_config cfg = sn->cfg;
    cfg.name = sn->name;
    cfg.advertise = sn->addr;
    cfg.incarnation = incarnation;
    sn->gen++;
    sn->rng = s->seed ^ ((uint64_t)sn->idx << 32) ^ ((uint64_t)sn->gen * 0x51ed27ull);
    sn->tick_at = NEVER;
    sn->frozen_until = 0;
    sn->last_incarnation = incarnation;
    int rc = gossip_node_create(&cfg, &io, s->now, &sn->node);
    if (rc != 0)
        return rc;
    resched(sn);
    return 0;
}

int gossip_sim_create(struct gossip_sim **out, uint64_t seed, const struct gossip_sim_link *link)
{
    struct gossip_sim *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return -GOSSIP_ENOMEM;
    s->seed = seed;
    s->rng = seed ^ 0x5eed5eedull;
    s->now = 1000000000LL; /* t = 1 s: keeps "0 = never" values apart */
    if (link != NULL)
        s->link = *link;
    else
        s->link = (struct gossip_sim_link){.delay_ns = 1000000, .jitter_ns = 500000};
    *out = s;
    return 0;
}

void gossip_sim_destroy(struct gossip_sim *s)
{
    if (s == NULL)
        return;
    for (size_t i = 0; i < s->n; i++) {
        gossip_node_destroy(s->nodes[i]->node);
        free(s->nodes[i]);
    }
    for (size_t i = 0; i < s->hn; i++)
        free(s->heap[i].pkt);
    free(s->heap);
    free(s->nodes);
    free(s->ov);
    free(s);
}

int gossip_sim_add(struct gossip_sim *s, const struct gossip_config *cfg)
{
    if (cfg == NULL || cfg->name == NULL || strlen(cfg->name) > GOSSIP_NAME_MAX ||
        s->n >= (1u << 24))
        return -GOSSIP_EINVAL;
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 16;
        struct simnode **v = realloc(s->nodes, cap * sizeof(*v));
        if (v == NULL)
            return -GOSSIP_ENOMEM;
        s->nodes = v;
        s->cap = cap;
    }
    struct simnode *sn = calloc(1, sizeof(*sn));
    if (sn == NULL)
        return -GOSSIP_ENOMEM;
    sn->sim = s;
    sn->idx = (int)s->n;
    sn->cfg = *cfg;
    strcpy(sn->name, cfg->name);
    sn->addr.family = 4;
    sn->addr.port = SIM_PORT;
    sn->addr.ip[0] = 10;
    sn->addr.ip[1] = (uint8_t)(s->n >> 16);
    sn->addr.ip[2] = (uint8_t)(s->n >> 8);
    sn->addr.ip[3] = (uint8_t)s->n;
    s->nodes[s->n++] = sn;
    int rc = start_node(s, sn, cfg->incarnation);
    if (rc != 0) {
        s->n--;
        free(sn);
        return rc;
    }
    return sn->idx;
}

size_t gossip_sim_count(const struct gossip_sim *s)
{
    return s->n;
}

struct gossip_node *gossip_sim_node(struct gossip_sim *s, int i)
{
    return (i >= 0 && (size_t)i < s->n) ? s->nodes[i]->node : NULL;
}

const struct gossip_addr *gossip_sim_addr(const struct gossip_sim *s, int i)
{
    return (i >= 0 && (size_t)i < s->n) ? &s->nodes[i]->addr : NULL;
}

int gossip_sim_join(struct gossip_sim *s, int i, int seed)
{
    struct gossip_node *n = gossip_sim_node(s, i);
    const struct gossip_addr *a = gossip_sim_addr(s, seed);
    if (n == NULL || a == NULL)
        return -GOSSIP_EINVAL;
    return gossip_node_join(n, a, 1);
}

int64_t gossip_sim_now(const struct gossip_sim *s)
{
    return s->now;
}

void gossip_sim_run(struct gossip_sim *s, int64_t ns)
{
    int64_t until = s->now + ns;
    while (s->hn > 0 && s->heap[0].t <= until) {
        struct ev e = heap_pop(s);
        struct simnode *sn = s->nodes[e.to];
        s->now = e.t;
        s->events++;
        if (sn->node == NULL || e.gen != sn->gen) {
            /* Each queued packet is owned by exactly one heap slot; the
             * analyzer cannot see that heap_pop hands it out once. */
            free(e.pkt); // NOLINT(clang-analyzer-unix.Malloc)
            continue;
        }
        if (e.t < sn->frozen_until) {
            /* Frozen: its packets wait in the socket and its timer fires
             * at the thaw, late, in the order they came. */
            if (e.type == EV_TICK) {
                if (e.t != sn->tick_at)
                    continue;
                sn->tick_at = sn->frozen_until;
            }
            e.t = sn->frozen_until;
            if (heap_push(s, e) != 0)
                free(e.pkt); // NOLINT(clang-analyzer-unix.Malloc)
            continue;
        }
        if (e.type == EV_TICK) {
            if (e.t != sn->tick_at)
                continue; /* superseded by an earlier tick */
            sn->tick_at = NEVER;
            gossip_node_tick(sn->node, s->now);
        } else {
            sn->received += e.len;
            // NOLINTNEXTLINE(clang-analyzer-unix.Malloc): see above
            gossip_node_receive(sn->node, &s->nodes[e.from]->addr, e.pkt, e.len, s->now);
            free(e.pkt); // NOLINT(clang-analyzer-unix.Malloc)
        }
        resched(sn);
    }
    s->now = until;
}

int gossip_sim_kill(struct gossip_sim *s, int i)
{
    struct gossip_node *n = gossip_sim_node(s, i);
    if (n == NULL)
        return -GOSSIP_EINVAL;
    s->nodes[i]->last_incarnation = gossip_node_incarnation(n);
    gossip_node_destroy(n);
    s->nodes[i]->node = NULL;
    s->nodes[i]->gen++;
    return 0;
}

int gossip_sim_restart(struct gossip_sim *s, int i, int seed)
{
    if (i < 0 || (size_t)i >= s->n || s->nodes[i]->node != NULL)
        return -GOSSIP_EINVAL;
    int rc = start_node(s, s->nodes[i], s->nodes[i]->last_incarnation + 1);
    if (rc != 0)
        return rc;
    return seed >= 0 ? gossip_sim_join(s, i, seed) : 0;
}

int gossip_sim_restart_fresh(struct gossip_sim *s, int i, int seed)
{
    if (i < 0 || (size_t)i >= s->n || s->nodes[i]->node != NULL)
        return -GOSSIP_EINVAL;
    int rc = start_node(s, s->nodes[i], 0);
    if (rc != 0)
        return rc;
    return seed >= 0 ? gossip_sim_join(s, i, seed) : 0;
}

void gossip_sim_set_default_link(struct gossip_sim *s, const struct gossip_sim_link *link)
{
    s->link = *link;
}

static struct override *get_ov(struct gossip_sim *s, int from, int to)
{
    for (size_t i = 0; i < s->nov; i++)
        if (s->ov[i].from == from && s->ov[i].to == to)
            return &s->ov[i];
    struct override *v = realloc(s->ov, (s->nov + 1) * sizeof(*v));
    if (v == NULL)
        return NULL;
    s->ov = v;
    memset(&v[s->nov], 0, sizeof(v[s->nov]));
    v[s->nov].from = from;
    v[s->nov].to = to;
    return &v[s->nov++];
}

int gossip_sim_set_link(struct gossip_sim *s, int from, int to, const struct gossip_sim_link *link)
{
    struct override *o = get_ov(s, from, to);
    if (o == NULL)
        return -GOSSIP_ENOMEM;
    o->has_link = 1;
    o->link = *link;
    return 0;
}

void gossip_sim_set_group(struct gossip_sim *s, int i, int group)
{
    if (i >= 0 && (size_t)i < s->n)
        s->nodes[i]->group = group;
}

int gossip_sim_block(struct gossip_sim *s, int from, int to, int blocked)
{
    struct override *o = get_ov(s, from, to);
    if (o == NULL)
        return -GOSSIP_ENOMEM;
    o->blocked = blocked;
    return 0;
}

void gossip_sim_freeze(struct gossip_sim *s, int i, int64_t ns)
{
    if (i >= 0 && (size_t)i < s->n && ns > 0)
        s->nodes[i]->frozen_until = s->now + ns;
}

void gossip_sim_set_slow(struct gossip_sim *s, int i, int64_t lag_ns)
{
    if (i >= 0 && (size_t)i < s->n)
        s->nodes[i]->lag = lag_ns;
}

void gossip_sim_set_tap(struct gossip_sim *s,
                        void (*tap)(void *ud, int from, int to, const uint8_t *pkt, size_t len),
                        void *ud)
{
    s->tap = tap;
    s->tap_ud = ud;
}

int gossip_sim_inject(struct gossip_sim *s, int from, int to, const uint8_t *pkt, size_t len)
{
    if (from < 0 || to < 0 || (size_t)from >= s->n || (size_t)to >= s->n)
        return -GOSSIP_EINVAL;
    struct simnode *sn = s->nodes[to];
    if (sn->node == NULL)
        return -GOSSIP_ESTATE;
    sn->received += len;
    int rc = gossip_node_receive(sn->node, &s->nodes[from]->addr, pkt, len, s->now);
    resched(sn);
    return rc;
}

void gossip_sim_bytes(const struct gossip_sim *s, int i, uint64_t *sent, uint64_t *received)
{
    *sent = s->nodes[i]->sent;
    *received = s->nodes[i]->received;
}

uint64_t gossip_sim_events(const struct gossip_sim *s)
{
    return s->events;
}
