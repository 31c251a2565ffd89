/*
 * replica: global limits by demand-weighted leases (see replica.h).  This
 * file holds the API and what both sides share: the member table, views,
 * the key tables and their queues, outgoing batches and the passes of
 * replica_tick.  The node side (keys this node serves) is replica_node.c,
 * the owner side (keys this node owns) replica_owner.c; their shared
 * structs are in replica_int.h.
 */
#include "replica.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "hrw.h"
#include "replica_int.h"
#include "sluice/error.h"

static int replica__params_of(struct algo_params *p, const struct rlimit *l)
{
    return algo_params_init(p, (enum algo_kind)l->kind, l->burst, l->count, l->period_ns,
                            l->precision);
}

/* ---- member table ---------------------------------------------------------- */

static int replica__intern(struct replica *r, const char *name, size_t len, uint32_t *id)
{
    if (len == 0 || len > REPLICA_NAME_MAX)
        return -SLUICE_EINVAL;
    uint64_t h = hrw_hash(name, len);
    for (size_t i = 0; i < r->nmem; i++)
        if (r->mem[i].hash == h && strlen(r->mem[i].name) == len &&
            memcmp(r->mem[i].name, name, len) == 0) {
            *id = (uint32_t)i;
            return 0;
        }
    if (r->nmem >= REPLICA_MEMBERS_MAX)
        return -SLUICE_EFULL; /* member ids are 16 bits, like libgossip's limit */
    if (r->nmem == r->capmem) {
        size_t nc = r->capmem ? r->capmem * 2 : 16;
        struct member *m = realloc(r->mem, nc * sizeof(*m));
        if (m == NULL)
            return -SLUICE_ENOMEM;
        r->mem = m;
        r->capmem = nc;
    }
    struct member *m = &r->mem[r->nmem];
    memset(m, 0, sizeof(*m));
    memcpy(m->name, name, len);
    m->name[len] = '\0';
    m->hash = h;
    *id = (uint32_t)r->nmem++;
    return 0;
}

/* ---- outgoing batches ------------------------------------------------------ */

static void replica__flush_one(struct replica *r, uint32_t id, int t)
{
    struct member *m = &r->mem[id];
    if (m->outbuf[t] == NULL)
        return;
    if (m->out[t].n > 0) {
        size_t len = wire_writer_finish(&m->out[t]);
        int rc = r->send(r->send_ud, m->name, m->outbuf[t], len);
        if (rc < 0)
            r->st.send_errors++;
        if (t == 0) {
            r->st.reports_sent++;
            r->st.report_bytes_sent += len;
        } else {
            r->st.leases_sent++;
            r->st.lease_bytes_sent += len;
        }
    }
    free(m->outbuf[t]);
    m->outbuf[t] = NULL;
}

/* Sends the pending batches that are due.  An entry waits for its batch to
 * fill only where that costs no answer its time:
 *  - a pass's walk (r->walking) runs over several loop turns; its reports
 *    wait for the end of the pass, and batches sent at the end of every
 *    turn carried two or three entries, so each 26-byte batch header
 *    weighed as much as its entries (100 nodes x 10,000 keys, 10% loss).
 *    Its leases go at the end of the turn: a lease held over turns reaches
 *    its node after its owner has counted reports that spent its level
 *    (the likely cause of one failure of integration_test_cluster_sl, a
 *    node that admitted a spent unit of a key of one an hour);
 *  - the leases a receive sends to members other than the asker it
 *    answers (shares that shrank, notices) wait for replica_flush, which
 *    the caller runs after the messages of one loop turn, so answers to
 *    many reports share a batch;
 *  - everything else (an answer to an ask, a prompt report) goes at the
 *    end of the call that made it (out_now).
 * No entry waits longer than BATCH_HOLD_NS.  mode: FLUSH_CALL at the end
 * of a receive, FLUSH_TURN at the end of a turn (rx-held entries go too),
 * FLUSH_ALL at the end of a pass. */
enum { FLUSH_CALL, FLUSH_TURN, FLUSH_ALL };

static void replica__flush(struct replica *r, int mode)
{
    for (uint32_t i = 0; i < r->nmem; i++) {
        struct member *m = &r->mem[i];
        for (int t = 0; t < 2; t++)
            if (m->outbuf[t] != NULL &&
                (mode == FLUSH_ALL || m->out_now[t] || (mode == FLUSH_TURN && m->out_rx[t]) ||
                 r->now - m->out_at[t] >= BATCH_HOLD_NS))
                replica__flush_one(r, i, t);
    }
}

/* The pending batch of type t (0 report, 1 lease) to member id for life;
 * NULL when out of memory.  A lease batch for another life of the same
 * member is flushed first. */
static struct wire_writer *replica__writer(struct replica *r, uint32_t id, int t, uint64_t life)
{
    struct member *m = &r->mem[id];
    if (m->outbuf[t] != NULL && m->out[t].life != life)
        replica__flush_one(r, id, t);
    if (m->outbuf[t] == NULL) {
        m->outbuf[t] = malloc(r->max_msg);
        if (m->outbuf[t] == NULL)
            return NULL;
        wire_writer_init(&m->out[t], m->outbuf[t], r->max_msg, t == 0 ? WIRE_REPORT : WIRE_LEASE,
                         life, r->life);
        m->out_at[t] = r->now;
        m->out_now[t] = m->out_rx[t] = 0;
    }
    return &m->out[t];
}

/* Appends an entry, starting a new batch when the current one is full. */
int replica_append(struct replica *r, uint32_t id, int t, uint64_t life,
                   const struct wire_report *rep, const struct wire_lease *lease)
{
    for (int attempt = 0; attempt < 2; attempt++) {
        struct wire_writer *w = replica__writer(r, id, t, life);
        if (w == NULL)
            return -SLUICE_ENOMEM;
        int rc = t == 0 ? wire_add_report(w, rep) : wire_add_lease(w, lease);
        if (rc != -SLUICE_ETOOBIG) {
            if (rc == 0 && !(t == 0 && r->walking)) {
                if (r->in_rx && t == 1 && id != r->answering)
                    r->mem[id].out_rx[t] = 1;
                else
                    r->mem[id].out_now[t] = 1;
            }
            return rc;
        }
        if (w->n == 0)
            return rc; /* an entry larger than a message */
        replica__flush_one(r, id, t);
    }
    return -SLUICE_ETOOBIG;
}

/* ---- views ---------------------------------------------------------------------- */

int replica_set_view(struct replica *r, const struct replica_member *m, size_t n, int complete,
                     int64_t now_ns)
{
    uint32_t *ids = malloc((n + 1) * sizeof(*ids));
    uint64_t *hs = malloc((n + 1) * sizeof(*hs));
    if (ids == NULL || hs == NULL) {
        free(ids);
        free(hs);
        return -SLUICE_ENOMEM;
    }
    for (size_t i = 0; i < r->nmem; i++)
        r->mem[i].in_view = r->mem[i].live = r->mem[i].suspect = r->mem[i].quiet = 0;
    size_t nl = 0;
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        uint32_t id;
        rc = replica__intern(r, m[i].name, strlen(m[i].name), &id);
        if (rc != 0)
            break;
        if (r->mem[id].in_view)
            continue; /* listed twice */
        r->mem[id].in_view = 1;
        r->mem[id].was_viewed = 1;
        r->mem[id].live = m[i].live ? 1 : 0;
        r->mem[id].suspect = m[i].live && m[i].suspect ? 1 : 0;
        r->mem[id].quiet = m[i].live && m[i].quiet ? 1 : 0;
    }
    if (rc != 0) {
        free(ids);
        free(hs);
        return rc;
    }
    r->mem[r->self].in_view = r->mem[r->self].live = 1;
    r->mem[r->self].suspect = r->mem[r->self].quiet = 0;
    r->outvoted = (uint8_t)replica_owner_outvoted(r);
    r->side_n = 0;
    for (uint32_t i = 0; i < r->nmem; i++)
        r->side_n += r->mem[i].in_view && r->mem[i].live && !r->mem[i].quiet;
    int changed = 0;
    for (uint32_t i = 0; i < r->nmem; i++)
        if (r->mem[i].live) {
            ids[nl] = i;
            hs[nl] = r->mem[i].hash;
            nl++;
        }
    if (nl != r->nlive)
        changed = 1;
    for (size_t i = 0; i < nl && !changed; i++)
        changed = ids[i] != r->live[i];
    if (changed || (complete != 0) != r->complete) {
        r->view_gen = (uint16_t)(r->view_gen + 1u);
        r->view_changed_at = now_ns;
        r->st.view_changes++;
    }
    free(r->live);
    free(r->live_hash);
    r->live = ids;
    r->live_hash = hs;
    r->nlive = nl;
    r->complete = complete != 0;
    /* Every key finds its owner anew at its next visit (replica_node_owner);
     * the next passes visit them all, a slice per call. */
    if (changed)
        r->sweep_all = 1;
    return 0;
}

/* ---- key tables ---------------------------------------------------------------- */

/* Appends i to v.  On allocation failure the index is lost: the key is
 * then visited by the sweep instead (its flag is cleared by the caller's
 * return value). */
int replica_idx_push(struct replica__idxv *v, uint32_t i)
{
    if (v->n == v->cap) {
        size_t nc = v->cap ? v->cap * 2 : 256;
        uint32_t *a = realloc(v->v, nc * sizeof(*a));
        if (a == NULL)
            return -SLUICE_ENOMEM;
        v->v = a;
        v->cap = nc;
    }
    v->v[v->n++] = i;
    return 0;
}

int replica_push(struct table_entry ***arr, size_t *n, size_t *cap, struct table_entry *e)
{
    if (*n == *cap) {
        size_t nc = *cap ? *cap * 2 : 64;
        struct table_entry **a = realloc(*arr, nc * sizeof(*a));
        if (a == NULL)
            return -SLUICE_ENOMEM;
        *arr = a;
        *cap = nc;
    }
    (*arr)[(*n)++] = e;
    return 0;
}

/* ---- create / destroy -------------------------------------------------------- */

int replica_create(struct replica **out, const struct replica_config *cfg, int64_t now_ns)
{
    size_t nl = cfg && cfg->node_name ? strlen(cfg->node_name) : 0;
    if (cfg == NULL || nl == 0 || nl > REPLICA_NAME_MAX || cfg->send == NULL)
        return -SLUICE_EINVAL;
    struct replica *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return -SLUICE_ENOMEM;
    memcpy(r->name, cfg->node_name, nl);
    r->life = cfg->life_id;
    r->interval = cfg->interval_ns > 0 ? cfg->interval_ns : 100 * 1000000LL;
    r->young = cfg->young_ns < 0 ? 2 * NUM_NS_PER_S : cfg->young_ns;
    r->grace = cfg->gc_grace_ns > 0 ? cfg->gc_grace_ns : 5 * NUM_NS_PER_S;
    r->silence = cfg->silence_ns > 0 ? cfg->silence_ns : 5 * r->interval;
    r->phantom_max = cfg->phantom_max_ns > 0 ? cfg->phantom_max_ns : 60 * NUM_NS_PER_S;
    r->max_msg = cfg->max_msg >= 256 ? cfg->max_msg : 1200;
    r->default_policy = cfg->default_policy;
    r->send = cfg->send;
    r->send_ud = cfg->send_ud;
    r->carry = cfg->carry;
    r->carry_ud = cfg->carry_ud;
    r->clock = cfg->clock;
    r->clock_ud = cfg->clock_ud;
    r->now = r->born = now_ns;
    r->next_tick = now_ns;
    r->every = r->every_keen = r->oevery = ACTIVE_EVERY * r->interval;
    r->synced = r->young == 0;
    r->ft_tokens = FIRST_TOUCH_BURST;
    r->ft_last = now_ns;
    r->answering = UINT32_MAX;
    r->nt_tokens = NOTICE_RATE;
    r->nt_last = now_ns;
    r->pr_tokens = PROMPT_RATE;
    r->pr_last = now_ns;
    r->pn_tokens = FIRST_TOUCH_BURST;
    r->pn_last = now_ns;
    r->rng = (cfg->life_id ^ 0x9e3779b97f4a7c15ULL) | 1u; /* never 0 */
    /* Reports may use about 400 KB/s: enough for every key every interval
     * up to ~1,300 contested keys, and a fair rotation beyond. */
    r->tick_budget = (size_t)(300000.0 * (double)r->interval / (double)NUM_NS_PER_S);
    if (r->tick_budget < r->max_msg)
        r->tick_budget = r->max_msg;

    size_t maxk = cfg->max_keys ? cfg->max_keys : 1000000;
    struct table_config tc = {.max_keys = maxk,
                              .evict = cfg->evict,
                              .drain = replica_node_drain,
                              .free_value = replica_node_free,
                              .ud = r};
    struct table_config to = {.max_keys = cfg->max_owned ? cfg->max_owned : 4 * maxk,
                              .evict = 0,
                              .drain = replica_owner_drain,
                              .free_value = replica_owner_free,
                              .ud = r};
    struct table_config tn = {.max_keys = NOTICE_MAX,
                              .evict = 1,
                              .drain = replica_node_note_drain,
                              .free_value = NULL,
                              .ud = r};
    uint32_t id;
    /* One seed for the node and owner tables: an entry's hash field then
     * serves a lookup of its key in the other (a key this node both serves
     * and owns crosses between them on every report and lease). */
    int rc = table_create(&r->nodes, &tc);
    if (rc == 0)
        table_get_seed(r->nodes, to.seed);
    if (rc != 0 || table_create(&r->owned, &to) != 0 || table_create(&r->notes, &tn) != 0 ||
        replica__intern(r, r->name, nl, &id) != 0) {
        replica_destroy(r);
        return -SLUICE_ENOMEM;
    }
    r->self = id;
    if (replica_set_view(r, NULL, 0, 1, now_ns) != 0) {
        replica_destroy(r);
        return -SLUICE_ENOMEM;
    }
    *out = r;
    return 0;
}

void replica_destroy(struct replica *r)
{
    if (r == NULL)
        return;
    table_destroy(r->nodes);
    table_destroy(r->owned);
    table_destroy(r->notes);
    for (size_t i = 0; i < r->nmem; i++) {
        free(r->mem[i].outbuf[0]);
        free(r->mem[i].outbuf[1]);
    }
    free(r->mem);
    free(r->live);
    free(r->live_hash);
    free(r->nk);
    free(r->ok);
    free(r->hot.v);
    free(r->urgent.v);
    free(r->uwork.v);
    free(r->curgent.v);
    free(r->cwork.v);
    free(r->work.v);
    free(r->ohot.v);
    free(r->owork.v);
    free(r->prompt.v);
    free(r);
}

/* ---- deciding (the node side: replica_node.c) ---------------------------------- */

int replica_throttle(struct replica *r, const char *key, size_t klen, const struct algo_params *p,
                     enum policy_partition pol, int64_t qty, int64_t now_ns,
                     struct algo_result *out)
{
    if (r == NULL || key == NULL || klen == 0 || klen > WIRE_KEY_MAX || p == NULL || out == NULL ||
        qty < 0 || !algo_can_be_global(p->kind) || algo_state_size(p) == 0)
        return -SLUICE_EINVAL;
    if (now_ns > r->now)
        r->now = now_ns;
    return replica_node_decide(r, key, klen, p, pol, qty, now_ns, out);
}

void replica_prefetch(const struct replica *r, const char *key, size_t klen, int stage, uint32_t *h)
{
    table_prefetch_stage(r->nodes, key, klen, stage, h);
}

void replica_note_demand(struct replica *r, const char *key, size_t klen, int64_t qty,
                         int64_t now_ns)
{
    replica_node_note_demand(r, key, klen, qty, now_ns);
}

/* ---- receiving ---------------------------------------------------------------- */

/* A received batch's keys are cold at a million keys: each lookup is a
 * bucket then an entry missed in the cache, one behind the other.  While
 * the batch is checked (peek), the first RX_PREFETCH keys' buckets are
 * asked for, and each key's chain RX_LAG keys later; the chains of the last
 * RX_LAG ones at the first entry handed over.  Batches are about a packet
 * (max_msg bytes, a few dozen entries), so what is fetched is still in the
 * cache when its entry comes. */
#define RX_PREFETCH 128
#define RX_LAG      8

struct replica__rx {
    struct replica *r;
    uint32_t from;
    unsigned npf, chained, ndone; /* ndone: entries handed over so far */
    uint32_t pf[RX_PREFETCH];     /* hashes of the keys peeked at */
    uint8_t pft[RX_PREFETCH];     /* ... and their batch's type */
};

static const struct table *replica__rx_table(const struct replica__rx *x, uint8_t type)
{
    return type == WIRE_REPORT ? x->r->owned : x->r->nodes;
}

static void replica__rx_chain(struct replica__rx *x, unsigned upto)
{
    for (; x->chained < upto; x->chained++)
        table_prefetch_chain(replica__rx_table(x, x->pft[x->chained]), x->pf[x->chained]);
}

static void replica__rx_peek(void *ud, uint8_t type, const char *key, size_t klen)
{
    struct replica__rx *x = ud;
    if (x->npf >= RX_PREFETCH)
        return;
    x->pft[x->npf] = type;
    x->pf[x->npf] = table_prefetch(replica__rx_table(x, type), key, klen);
    x->npf++;
    if (x->npf > RX_LAG)
        replica__rx_chain(x, x->npf - RX_LAG);
}

/* The hash of the entry handed over now, in its table: peeked at first
 * (the same order), or computed beyond RX_PREFETCH entries. */
static uint32_t replica__rx_hash(struct replica__rx *x, uint8_t type, const char *key, size_t klen)
{
    unsigned i = x->ndone++;
    return i < x->npf ? x->pf[i] : table_hash(replica__rx_table(x, type), key, klen);
}

static void replica__rx_report(void *ud, uint64_t life, const struct wire_report *e)
{
    struct replica__rx *x = ud;
    replica__rx_chain(x, x->npf);
    x->r->mem[x->from].life = life; /* where its notices go */
    replica_owner_on_report_hashed(x->r, x->from, life, e,
                                   replica__rx_hash(x, WIRE_REPORT, e->key, e->klen));
}

static void replica__rx_lease(void *ud, uint64_t life, const struct wire_lease *l)
{
    struct replica__rx *x = ud;
    replica__rx_chain(x, x->npf);
    x->r->mem[x->from].life = l->owner_life;
    replica_node_on_lease(x->r, x->from, life, l, replica__rx_hash(x, WIRE_LEASE, l->key, l->klen));
}

int replica_receive(struct replica *r, const char *from, const uint8_t *buf, size_t len,
                    int64_t now_ns)
{
    if (now_ns > r->now)
        r->now = now_ns;
    r->st.bytes_received += len;
    struct replica__rx x = {.r = r};
    if (from == NULL || replica__intern(r, from, strlen(from), &x.from) != 0 || x.from == r->self) {
        r->st.bad_packets++;
        return -SLUICE_EINVAL;
    }
    /* Checked whole before any entry is applied (wire_decode). */
    struct wire_handler h = {&x, replica__rx_report, replica__rx_lease, replica__rx_peek};
    r->in_rx = 1;
    int rc = wire_decode(buf, len, &h);
    r->in_rx = 0;
    if (rc < 0) {
        r->st.bad_packets++;
        return rc;
    }
    if (buf[2] == WIRE_REPORT)
        r->st.reports_received++;
    else
        r->st.leases_received++;
    replica__flush(r, FLUSH_CALL);
    return 0;
}

/* ---- passes ------------------------------------------------------------------- */

/* The visits a node visit's outcome costs. */
static size_t replica__cost(int v, size_t left)
{
    size_t c = v == VISIT_REPORTED ? 1 + REPORT_COST : 1;
    return left > c ? left - c : 0;
}

/* left, or 0 once this turn's time is spent: the clock is read every
 * TURN_CHECK visits (a visit costs about a microsecond, several when its
 * key is cold in the cache, tens when it sends a full batch: TURN_VISITS
 * alone let a turn run 10 ms over 100,000 keys on a loaded host, where
 * Redis's active expire cycle stops at its time limit, and a reading every
 * 32 visits let a slice run 0.4 ms past TURN_NS at a million keys). */
static size_t replica__timed(struct replica *r, size_t left, unsigned *n, int64_t until)
{
    if (left == 0 || r->clock == NULL || (++*n % TURN_CHECK) != 0)
        return left;
    return r->clock(r->clock_ud) >= until ? 0 : left;
}

/* Prefetching in the pass's loops.  At a million keys each visit's key is
 * cold: its slot in nk or ok and then its entry are two cache misses in a
 * row, most of a visit's cost (a pass of first-touched keys spent a third of
 * its time on the flag test before the visit).  The slot of the key
 * PF_FAR ahead and the entry of the key PF_NEAR ahead are asked for early,
 * so the misses overlap instead of queueing one behind the other.  (Asking
 * too for the other table's bucket and chain of a key this node both serves
 * and owns, which its visit looks up there, moved the stall into the
 * prefetching and gained nothing measurable.  Nor did asking for that
 * bucket eight keys ahead and its chain four ahead: the stall stayed in
 * the chain's prefetch, the bucket not there yet.  Holding a walk's
 * reports to this node's own owner side in batches of 64, each bucket asked
 * for as its report was made and the chains before the batch went in, as a
 * received batch's are, made it worse: node 1's CPU per request at -P 16
 * over a million new keys went from 1.20-1.24 us to 1.30-1.40 us, four
 * rounds alternated.  Those two lookups, the owned table's for the report
 * and the node table's for the lease back, were a tenth of node 1's CPU
 * there while it owns a third of the keys.  The two entries now point at
 * each other (nkey.own, okey.mine) and the other entry is asked for
 * through that link PF_LINK keys ahead: the lookups fell to half, most of
 * what is left a key's first report, and node 1's CPU per request from
 * 1.17 to 1.07 us, six rounds alternated.)  The helpers are forced
 * inline: GCC 12 finds a call whose only effect is a prefetch free of side
 * effects and drops it whole. */
#define PF_NEAR   4
#define PF_FAR    12
#define PF_LINK   2
#define PF_INLINE static inline __attribute__((always_inline))

PF_INLINE void replica__prefetch_entry(const struct table_entry *e)
{
    __builtin_prefetch(e);
    __builtin_prefetch((const void *)((uintptr_t)e + 64u)); /* the value may start there */
}

/* Prefetches for the visit of q->v[pos]: entries of keys (an index of nkeys
 * entries) named further on in q.  Stale indexes (keys gone) are skipped. */
PF_INLINE void replica__prefetch_q(struct table_entry *const *keys, size_t nkeys,
                                   const struct replica__idxv *q, size_t pos)
{
    if (pos + PF_FAR < q->n && q->v[pos + PF_FAR] < nkeys)
        __builtin_prefetch(&keys[q->v[pos + PF_FAR]]);
    if (pos + PF_NEAR < q->n && q->v[pos + PF_NEAR] < nkeys)
        replica__prefetch_entry(keys[q->v[pos + PF_NEAR]]);
}

/* The same for a sweep at cursor pos over all nkeys keys (the index is read
 * in order: only the entries are fetched early). */
PF_INLINE void replica__prefetch_sweep(struct table_entry *const *keys, size_t nkeys, size_t pos)
{
    if (pos + PF_NEAR < nkeys)
        replica__prefetch_entry(keys[pos + PF_NEAR]);
}

/* The other side's entry of the key PF_LINK visits ahead, linked from its
 * own entry (nkey.own, okey.mine; asked for PF_NEAR - PF_LINK visits
 * before): a key this node both serves and owns crosses to it in its
 * visit.  i: its index, or nkeys and more when none or gone. */
PF_INLINE void replica__prefetch_link(struct table_entry *const *keys, size_t nkeys, size_t i,
                                      int node)
{
    if (i >= nkeys)
        return;
    const struct table_entry *o = node ? nkey_of(keys[i])->own : okey_of(keys[i])->mine;
    if (o != NULL)
        replica__prefetch_entry(o);
}

PF_INLINE void replica__prefetch_qlink(struct table_entry *const *keys, size_t nkeys,
                                       const struct replica__idxv *q, size_t pos, int node)
{
    if (pos + PF_LINK < q->n)
        replica__prefetch_link(keys, nkeys, q->v[pos + PF_LINK], node);
}

/* The visits an owner visit's outcome costs. */
static size_t replica__ocost(int ov, size_t left)
{
    size_t c = ov ? COMPUTE_COST : 1;
    return left > c ? left - c : 0;
}

/* A pass's sweep slice of n keys: all of them up to SWEEP_MAX (every key
 * is then visited every pass), SWEEP_MAX beyond; *every is the period at
 * which a quiet key is reported (or an owner key refreshed): ACTIVE_EVERY
 * intervals, or the sweep's period if longer. */
static size_t replica__slice(size_t n, int64_t *every, int64_t interval)
{
    size_t per = n < SWEEP_MAX ? n : SWEEP_MAX;
    size_t passes = per > 0 ? (n + per - 1) / per : 1;
    if (passes < ACTIVE_EVERY)
        passes = ACTIVE_EVERY;
    *every = (int64_t)passes * interval;
    return per;
}

/* The report period of a quiet key: every (replica__slice's), or longer,
 * so that reports of all the keys this node serves fit in QUIET_SHARE of
 * a pass's byte budget (a report's bytes as this node's have measured), up
 * to QUIET_EVERY_MAX_NS.  A quiet key's report only refreshes its owner's
 * picture of it, and a key is quiet until its bucket is full again: a node
 * of 100,000 keys of a unit an hour wanted ten times its budget for
 * reports due every half second, kept 90,000 of them waiting, and its
 * owners dropped reporters they no longer heard from.  A report carries
 * its period, and its owner waits three of them before it calls the
 * reporter silent. */
static int64_t replica__quiet_every(const struct replica *r, int64_t every)
{
    double per = r->st.report_entries_sent > 0
                     ? (double)r->st.report_bytes_sent / (double)r->st.report_entries_sent
                     : REPORT_BYTES_GUESS;
    double passes = ceil((double)r->nnk * per / ((double)r->tick_budget * QUIET_SHARE));
    double ns = passes * (double)r->interval;
    if (ns > (double)QUIET_EVERY_MAX_NS)
        ns = (double)QUIET_EVERY_MAX_NS;
    return (int64_t)ns > every ? (int64_t)ns : every;
}

int replica_take(double *tokens, int64_t *last, double rate, double burst, int64_t now)
{
    if (now > *last) {
        *tokens += (double)(now - *last) * rate / (double)NUM_NS_PER_S;
        if (*tokens > burst)
            *tokens = burst;
        *last = now;
    }
    if (*tokens < 1.0)
        return 0;
    *tokens -= 1.0;
    return 1;
}

/* The prompt reports asked for since the last call (replica_node_ask), at
 * most TURN_VISITS of them and PROMPT_RATE a second; those beyond the
 * budget wait for the next pass, as any report.  Keys this node owns are
 * answered within (r->prompting, replica_owner_on_report). */
static void replica__prompt(struct replica *r, int64_t now)
{
    size_t j = 0;
    r->prompting = 1;
    for (; j < r->prompt.n && j < TURN_VISITS; j++)
        (void)replica_node_prompt(r, r->prompt.v[j], now);
    r->prompting = 0;
    size_t rest = r->prompt.n - j;
    if (rest > 0)
        memmove(r->prompt.v, r->prompt.v + j, rest * sizeof(*r->prompt.v));
    r->prompt.n = rest;
}

/* Starts a pass: the keys queued so far become its work. */
static void replica__pass_start(struct replica *r, int64_t now)
{
    /* The keys starved of budget so far, oldest first: those the passes
     * before did not reach (not visited again: a queue, not a walk), then
     * the ones they left out, which wait in urgent until uwork is drained.
     * Swapped, not copied: at a million keys hundreds of thousands wait,
     * and moving them took a third of a millisecond at every pass. */
    if (r->uwpos >= r->uwork.n) {
        struct replica__idxv drained = r->uwork;
        r->uwork = r->urgent;
        r->urgent = drained;
        r->urgent.n = 0;
        r->uwpos = 0;
    }
    if (r->cwpos >= r->cwork.n) {
        struct replica__idxv drained = r->cwork;
        r->cwork = r->curgent;
        r->curgent = drained;
        r->curgent.n = 0;
        r->cwpos = 0;
    }
    /* Then the keys with news. */
    struct replica__idxv t = r->work;
    r->work = r->hot;
    r->hot = t;
    r->hot.n = 0;
    r->wpos = 0;
    t = r->owork;
    r->owork = r->ohot;
    r->ohot = t;
    r->ohot.n = 0;
    r->owpos = 0;
    r->sweep_left = replica__slice(r->nnk, &r->every_keen, r->interval);
    r->every = replica__quiet_every(r, r->every_keen);
    r->osweep_left = replica__slice(r->nok, &r->oevery, r->interval);
    if (r->sweep_all) {
        r->sweep_left = r->nnk;
        r->sweep = 0;
        r->sweep_all = 0;
    }
    r->budget = r->tick_budget;
    (void)table_reclaim_step(r->notes, now, 64); /* notices past their time */
    r->in_pass = 1;
    r->pass_start = now;
    r->next_tick = now + r->interval;
}

/* Visits the node keys queued in q from *pos on while visits and time
 * are left (replica_tick) and the pass's byte budget is above floor (-1:
 * whatever it is).  An entry whose key left, or was visited already (see
 * replica_node__queue), is skipped; looking costs a visit too.  Returns
 * the visits left. */
static size_t replica__walk(struct replica *r, struct replica__idxv *q, size_t *pos, int64_t floor,
                            size_t left, unsigned *n, int64_t until, int64_t now)
{
    while (left > 0 && (floor < 0 || r->budget > (size_t)floor) && *pos < q->n) {
        replica__prefetch_q(r->nk, r->nnk, q, *pos);
        replica__prefetch_qlink(r->nk, r->nnk, q, *pos, 1);
        uint32_t i = q->v[(*pos)++];
        if (i < r->nnk && (nkey_of(r->nk[i])->p.flags & NK_HOT))
            left = replica__cost(replica_node_visit(r, i, now), left);
        else
            left--;
        left = replica__timed(r, left, n, until);
    }
    return left;
}

/* A pass.  Every interval a pass visits the node keys with news (a
 * request, a lease, a report to send: queued in hot as they happen), the
 * keys still contested at their last visit, and a slice of the others
 * (all of them up to SWEEP_MAX keys, so each key is visited every
 * interval; each every n / SWEEP_MAX intervals beyond); then the
 * owner keys reported on, and a slice of the others for their refresh.
 * Work is proportional to what changed, not to the keys held.  One call
 * does at most TURN_VISITS visits (an answer is never kept waiting behind
 * a walk over a million keys, as Redis's active expire cycle bounds its
 * own) and the pass goes on at the next call: replica_next_deadline says
 * "now" until it is done. */
void replica_tick(struct replica *r, int64_t now_ns)
{
    if (now_ns > r->now)
        r->now = now_ns;
    int64_t now = r->now;
    if (!r->synced && now - r->born >= r->young)
        r->synced = 1;
    if (r->prompt.n > 0) {
        replica__prompt(r, now);
        replica__flush(r, FLUSH_TURN);
    }
    if (!r->in_pass) {
        if (now < r->next_tick)
            return;
        replica__pass_start(r, now);
    }
    size_t left = TURN_VISITS;
    unsigned n = 0;
    int64_t t0 = r->clock != NULL ? r->clock(r->clock_ud) : 0;
    /* A pass behind its keys (new keys coming faster than it visits them)
     * would otherwise take TURN_NS of every turn, however short the
     * clients' work in it (fifty clients unpipelined: a few hundred
     * microseconds a turn): a quarter of the time at most, as Redis's
     * active expire cycle takes. */
    int64_t slice = r->slice_end != 0 ? (t0 - r->slice_end) / TURN_SHARE : TURN_NS;
    int64_t until = t0 + (slice > TURN_NS ? TURN_NS : slice < TURN_MIN_NS ? TURN_MIN_NS : slice);
    r->walking = 1;
    /* Starved quiet keys while their part of the budget lasts (the rest
     * is the contested keys', replica_node_visit), then starved contested
     * keys with all that is left, oldest first; then the keys with news.
     * The others wait their turn. */
    left = replica__walk(r, &r->uwork, &r->uwpos, (int64_t)replica__quiet_floor(r), left, &n, until,
                         now);
    left = replica__walk(r, &r->cwork, &r->cwpos, 0, left, &n, until, now);
    left = replica__walk(r, &r->work, &r->wpos, -1, left, &n, until, now);
    while (left > 0 && r->sweep_left > 0 && r->nnk > 0) {
        if (r->sweep >= r->nnk)
            r->sweep = 0;
        replica__prefetch_sweep(r->nk, r->nnk, r->sweep);
        replica__prefetch_link(r->nk, r->nnk, r->sweep + PF_LINK, 1);
        r->sweep_left--;
        int v = 0;
        if (!(nkey_of(r->nk[r->sweep])->p.flags & NK_HOT)) /* else its own visit comes */
            v = replica_node_visit(r, r->sweep, now);
        left = replica__timed(r, replica__cost(v, left), &n, until);
        if (v != VISIT_DROPPED)
            r->sweep++;
    }
    while (left > 0 && r->owpos < r->owork.n) {
        replica__prefetch_q(r->ok, r->nok, &r->owork, r->owpos);
        replica__prefetch_qlink(r->ok, r->nok, &r->owork, r->owpos, 0);
        uint32_t i = r->owork.v[r->owpos++];
        if (i < r->nok && (okey_of(r->ok[i])->p.flags & OK_QUEUED))
            left = replica__ocost(replica_owner_visit(r, i, now), left);
        else
            left--;
        left = replica__timed(r, left, &n, until);
    }
    while (left > 0 && r->osweep_left > 0 && r->nok > 0) {
        if (r->osweep >= r->nok)
            r->osweep = 0;
        replica__prefetch_sweep(r->ok, r->nok, r->osweep);
        replica__prefetch_link(r->ok, r->nok, r->osweep + PF_LINK, 0);
        r->osweep_left--;
        int ov = 0;
        if (!(okey_of(r->ok[r->osweep])->p.flags & OK_QUEUED))
            ov = replica_owner_visit(r, r->osweep, now);
        left = replica__timed(r, replica__ocost(ov, left), &n, until);
        if (ov != OV_DROPPED)
            r->osweep++;
    }
    r->walking = 0;
    if ((r->uwpos >= r->uwork.n || r->budget <= replica__quiet_floor(r)) &&
        (r->cwpos >= r->cwork.n || r->budget == 0) && r->wpos >= r->work.n &&
        (r->sweep_left == 0 || r->nnk == 0) && r->owpos >= r->owork.n &&
        (r->osweep_left == 0 || r->nok == 0)) {
        r->in_pass = 0;
        if (now - r->pass_start > r->pass_max)
            r->pass_max = now - r->pass_start;
    }
    replica_flush(r);
    if (r->clock != NULL)
        r->slice_end = r->clock(r->clock_ud);
}

int64_t replica_pass_max(const struct replica *r, int64_t now_ns)
{
    int64_t running = r->in_pass && now_ns > r->pass_start ? now_ns - r->pass_start : 0;
    return running > r->pass_max ? running : r->pass_max;
}

void replica_reset_max(struct replica *r)
{
    r->pass_max = 0;
}

size_t replica_backlog(const struct replica *r)
{
    return r->hot.n + (r->work.n - r->wpos) + (r->uwork.n - r->uwpos) + r->urgent.n +
           (r->cwork.n - r->cwpos) + r->curgent.n + r->prompt.n + r->ohot.n +
           (r->owork.n - r->owpos);
}

void replica_flush(struct replica *r)
{
    replica__flush(r, r->in_pass ? FLUSH_TURN : FLUSH_ALL);
}

int64_t replica_next_deadline(const struct replica *r)
{
    return r->in_pass || r->prompt.n > 0 ? r->now : r->next_tick;
}

int replica_prompt_pending(const struct replica *r)
{
    return r->prompt.n > 0;
}

void replica_mark_synced(struct replica *r)
{
    r->synced = 1;
}

int64_t replica_young_ns(const struct replica *r)
{
    return r->young;
}

void replica_unsync(struct replica *r, int64_t now_ns)
{
    if (r->young == 0)
        return; /* a lone first node: nothing to wait for */
    if (now_ns > r->now)
        r->now = now_ns;
    r->synced = 0;
    r->born = r->now;
    for (size_t i = 0; i < r->nnk; i++) {
        struct nkey *k = nkey_of(r->nk[i]);
        replica_node_refill(k, r->now);
        if (k->tokens > 0.999)
            k->tokens = 0.999;
        k->free = 0.0F;
        k->share = 0.0F;
        k->p.flags = (uint8_t)((k->p.flags & ~NK_LEASED) | NK_YOUNG);
    }
}

int replica_synced(const struct replica *r)
{
    return r->synced || r->now - r->born >= r->young;
}

/* ---- introspection ------------------------------------------------------------ */

int replica_key_info(struct replica *r, const char *key, size_t klen, int64_t now_ns,
                     struct replica_key_info *info, replica_slot_fn fn, void *ud)
{
    struct table_entry *e = table_find(r->nodes, key, klen);
    struct table_entry *te = table_find(r->owned, key, klen);
    if (e == NULL && te == NULL)
        return -SLUICE_ENOENT;
    memset(info, 0, sizeof(*info));
    if (now_ns > r->now)
        r->now = now_ns;
    if (e != NULL) {
        struct nkey *k = nkey_of(e);
        replica_node_refill(k, r->now);
        uint32_t owner = replica_node_owner(r, k, key, klen);
        double es = k->share;
        double rate = replica__rate(&k->p) * es;
        (void)replica__params_of(&info->params, &k->p);
        info->policy = (enum policy_partition)k->p.policy;
        info->share = k->share;
        info->demand = k->demand;
        info->remaining = k->tokens > 0 ? (int64_t)floor(k->tokens) : 0;
        int64_t reset = replica__ns_for(replica_node_cap(k, es) - k->tokens, rate);
        info->reset_after_ns = reset == INT64_MAX ? 0 : reset;
        info->owner = r->mem[owner].name;
        info->owned = owner == r->self;
        info->degraded = (k->p.flags & NK_DEGRADED) != 0;
        info->lease_age_ns = (k->p.flags & NK_LEASED) ? r->now - k->last_lease : -1;
    } else {
        struct okey *o = okey_of(te);
        (void)replica__params_of(&info->params, &o->p);
        info->policy = (enum policy_partition)o->p.policy;
        info->owner = r->name;
        info->owned = 1;
        info->lease_age_ns = -1;
    }
    if (te != NULL) {
        struct okey *o = okey_of(te);
        int64_t debt =
            o->p.policy == POLICY_PARTITION_OPTIMISTIC ? replica_owner_debt(o, r->now) : 0;
        info->debt_ns = debt > 0 ? debt : 0;
        info->nslots = o->n;
        for (uint32_t i = 0; fn != NULL && i < o->n; i++) {
            struct orep *rp = &o->reps[i];
            struct replica_slot_info s = {r->mem[rp->member].name,
                                          rp->life,
                                          (int64_t)rp->admitted,
                                          r->now - rp->last_at,
                                          rp->demand,
                                          rp->share,
                                          replica_owner_rep_live(r, rp, r->now),
                                          replica__rep_fshare(rp)};
            fn(ud, &s);
        }
    } else if (e != NULL) {
        struct nkey *k = nkey_of(e);
        info->nslots = 1;
        if (fn != NULL) {
            struct replica_slot_info s = {
                r->name, r->life, (int64_t)k->admitted, 0, k->demand, k->share, 1, k->fshare};
            fn(ud, &s);
        }
    }
    return 0;
}

int64_t replica_key_total(struct replica *r, const char *key, size_t klen)
{
    struct table_entry *te = table_find(r->owned, key, klen);
    if (te != NULL) {
        struct okey *o = okey_of(te);
        int64_t sum = 0;
        for (uint32_t i = 0; i < o->n; i++)
            sum += (int64_t)o->reps[i].admitted;
        return sum;
    }
    struct table_entry *e = table_find(r->nodes, key, klen);
    return e == NULL ? -1 : (int64_t)nkey_of(e)->admitted;
}

void replica_get_stats(const struct replica *r, struct replica_stats *out)
{
    *out = r->st;
    out->keys = r->nnk;
    out->owned_keys = r->nok;
    out->owned_reporters = r->nreps;
}

size_t replica_key_bytes(void)
{
    return sizeof(struct nkey);
}
