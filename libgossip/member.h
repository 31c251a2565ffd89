/*
 * The membership table of one node: every member it knows, by name.
 *
 * Members are individually allocated so that pointers stay valid while the
 * table grows; the table owns them.  Lookup is by name through an open-
 * addressing hash (linear probing, backward-shift deletion), so it stays O(1)
 * with a thousand members.  A dead or left member is first hidden ("reaped")
 * and only removed later: its incarnation must outlive it so that stale gossip
 * cannot bring it back.
 */
#ifndef GOSSIP_MEMBER_H
#define GOSSIP_MEMBER_H

#include <stddef.h>
#include <stdint.h>

#include "gossip/gossip.h"

#define MEMBER_MAX_ACCUSERS 8

struct member {
    char name[GOSSIP_NAME_MAX + 1];
    uint8_t name_len;
    uint8_t is_self;
    uint8_t reaped;   /* forgotten: hidden from the API, kept as a tombstone */
    uint8_t in_plist; /* in the probe order list */
    enum gossip_member_state state;
    uint32_t incarnation;
    uint64_t life;         /* its current life id, as last heard (0: unknown) */
    uint64_t old_lives[4]; /* lives it had before: their packets are replays */
    int64_t born_est;      /* local-clock estimate of when its life began */
    struct gossip_addr addr;
    int64_t state_since;
    int64_t last_heard;
    int64_t probe_failed; /* when our last probe of it failed (0: never) */
    /* suspicion (state == SUSPECT) */
    int64_t susp_start, susp_deadline;
    int susp_k, susp_confirmations;
    /* Our own check of it before our timer declares it dead, when no probe
     * of ours failed during the suspicion (gossip_node_tick): 0 none yet,
     * 1 the next probe goes to it, 2 done. */
    uint8_t susp_check;
    uint64_t susp_accusers[MEMBER_MAX_ACCUSERS]; /* name hashes */
    /* application payload duplicate window */
    uint32_t app_inc;
    uint64_t app_max, app_mask;
    uint8_t app_init;
    /* packet timestamp window, replies to push-pull requests */
    uint8_t has_ts, pp_replied_valid;
    uint64_t ts_life;  /* the life the timestamp window belongs to */
    uint64_t max_ts;   /* newest packet timestamp from it ... */
    int64_t max_ts_at; /* ... and when it arrived, local clock */
    uint32_t pp_replied_xid;
    uint64_t pp_replied_life; /* the sender's life that asked pp_replied_xid:
                                 a restarted node reuses ids from 1 */
    size_t idx;               /* position in member_table.v */
};

struct member_table {
    struct member **v; /* dense array of members, any order */
    size_t n, cap;
    struct member **slots; /* hash slots, NULL = empty */
    size_t nslots;         /* power of two, > 2 * n */
};

uint64_t member_hash(const char *name, size_t len);

/* Empty table; -GOSSIP_ENOMEM. */
int member_table_init(struct member_table *t);
/* Frees the table and every member in it. */
void member_table_free(struct member_table *t);
/* The member with this name, or NULL (reaped members are returned too). */
struct member *member_find(const struct member_table *t, const char *name, size_t len);
/* Adds a zeroed member named name (must not exist; len 1..GOSSIP_NAME_MAX);
 * NULL on allocation failure.  The table owns it. */
struct member *member_add(struct member_table *t, const char *name, size_t len);
/* Removes and frees m. */
void member_remove(struct member_table *t, struct member *m);

/*
 * Lifeguard's dynamic suspicion timeout (after memberlist's suspicion.go):
 * starts at max_ns and shrinks on a log scale towards min_ns as independent
 * confirmations c arrive, reaching min_ns at k confirmations.  k < 1 gives
 * min_ns.
 */
int64_t member_suspicion_timeout(int64_t min_ns, int64_t max_ns, int k, int c);

/* Copies the public view of m. */
void member_info(const struct member *m, struct gossip_member_info *out);

#endif
