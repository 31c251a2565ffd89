/* broadcast_*: retransmit-limited broadcast queue (see broadcast.h). */
#include "broadcast.h"

#include <stdlib.h>
#include <string.h>

#include "gossip/error.h"

void broadcast_init(struct broadcast_queue *q, size_t max)
{
    memset(q, 0, sizeof(*q));
    q->max = max ? max : 1;
}

void broadcast_free(struct broadcast_queue *q)
{
    for (size_t i = 0; i < q->n; i++)
        free(q->v[i]);
    free(q->v);
    memset(q, 0, sizeof(*q));
}

/* Order: fewer transmits first, then newer (higher id) first. */
static int before(const struct broadcast_item *a, const struct broadcast_item *b)
{
    if (a->transmits != b->transmits)
        return a->transmits < b->transmits;
    return a->id > b->id;
}

static void remove_at(struct broadcast_queue *q, size_t i)
{
    free(q->v[i]);
    memmove(q->v + i, q->v + i + 1, (q->n - i - 1) * sizeof(*q->v));
    q->n--;
}

int broadcast_push(struct broadcast_queue *q, uint64_t key, const uint8_t *data, size_t len)
{
    if (key != 0) {
        for (size_t i = 0; i < q->n; i++) {
            if (q->v[i]->key == key) {
                remove_at(q, i);
                break;
            }
        }
    }
    if (q->n >= q->max) {
        remove_at(q, q->n - 1); /* the last is the most transmitted, oldest */
        q->dropped++;
    }
    if (q->n == q->cap) {
        size_t cap = q->cap ? q->cap * 2 : 16;
        struct broadcast_item **v = realloc(q->v, cap * sizeof(*v));
        if (v == NULL)
            return -GOSSIP_ENOMEM;
        q->v = v;
        q->cap = cap;
    }
    struct broadcast_item *it = malloc(sizeof(*it) + len);
    if (it == NULL)
        return -GOSSIP_ENOMEM;
    it->key = key;
    it->id = q->next_id++;
    it->transmits = 0;
    it->last_packet = 0;
    it->len = len;
    memcpy(it->data, data, len);
    /* Newest with zero transmits sorts first. */
    memmove(q->v + 1, q->v, q->n * sizeof(*q->v));
    q->v[0] = it;
    q->n++;
    return 0;
}

void broadcast_fill(struct broadcast_queue *q, uint32_t limit, uint64_t packet_id, uint8_t *buf,
                    size_t cap, size_t *len, size_t *nmsgs)
{
    size_t taken = 0;
    for (size_t i = 0; i < q->n; i++) {
        struct broadcast_item *it = q->v[i];
        if (it->last_packet == packet_id)
            continue;
        if (cap - *len < it->len) {
            if (cap - *len < 8)
                break; /* nothing useful fits any more */
            continue;
        }
        memcpy(buf + *len, it->data, it->len);
        *len += it->len;
        it->transmits++;
        it->last_packet = packet_id;
        taken++;
    }
    if (taken == 0)
        return;
    *nmsgs += taken;
    /* Retire items at the limit, then restore the order (insertion sort). */
    size_t w = 0;
    for (size_t i = 0; i < q->n; i++) {
        if (q->v[i]->transmits >= limit)
            free(q->v[i]);
        else
            q->v[w++] = q->v[i];
    }
    q->n = w;
    for (size_t i = 1; i < q->n; i++) {
        struct broadcast_item *x = q->v[i];
        size_t j = i;
        while (j > 0 && before(x, q->v[j - 1])) {
            q->v[j] = q->v[j - 1];
            j--;
        }
        q->v[j] = x;
    }
}
