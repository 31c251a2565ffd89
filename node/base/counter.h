/*
 * counter: a module's counters, declared once as a table that both INFO
 * (cmd/info.h) and /metrics (server/metrics.h) render.
 *
 * A module keeps its counters in a plain stats struct of uint64_t fields
 * (struct limiter_stats, struct replica_stats, ...) and exports one
 * const table beside it: per field, its INFO name, its metric family (the
 * text after "sluice_"), whether it is a running total or a gauge, and a
 * line of help.  INFO prints "info:value", /metrics prints the family with
 * the same value, so the two cannot disagree; adding a counter is the field,
 * its increment and one row.  A row may name a field of a struct nested in
 * the stats struct (COUNTER_ROW(struct daemon_rls_stats, srv.errors, ...)),
 * so a module's stats are read where another keeps them, never copied field
 * by field.  The help of every family names its INFO field, which is how a
 * test (and a person) pairs them.
 *
 * Tables are static data; nothing here allocates or fails.
 */
#ifndef SLUICE_COUNTER_H
#define SLUICE_COUNTER_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

enum counter_kind {
    COUNTER_TOTAL = 0, /* only grows; the family ends in _total */
    COUNTER_GAUGE = 1, /* a level now */
};

struct counter_row {
    const char *info;   /* INFO's field name */
    const char *metric; /* the family's name after "sluice_" */
    enum counter_kind kind;
    const char *help; /* one sentence for # HELP */
    size_t off;       /* offset of a uint64_t in the module's stats struct */
};

struct counter_table {
    const struct counter_row *rows;
    size_t n;
};

/* A row for uint64_t `field` of struct `type`; a field of another size
 * fails to build. */
#define COUNTER_ROW(type, field, info, metric, kind, help)                                         \
    {                                                                                              \
        info, metric, kind, help,                                                                  \
            offsetof(type, field) +                                                                \
                0 * sizeof(char[sizeof(((type *)0)->field) == sizeof(uint64_t) ? 1 : -1])          \
    }

#define COUNTER_TABLE(rows)                                                                        \
    {                                                                                              \
        rows, sizeof(rows) / sizeof(rows[0])                                                       \
    }

/* The value of row r in the stats struct at stats. */
static inline uint64_t counter_value(const struct counter_row *r, const void *stats)
{
    uint64_t v;
    memcpy(&v, (const char *)stats + r->off, sizeof(v));
    return v;
}

/* Adds every row of t in the stats struct at src to the same row at dst:
 * one set of counters from several instances of a module (the two HTTP
 * listeners), a row added to the table being summed with it.  Fields of
 * the struct that no row names are left as they are in dst. */
static inline void counter_table_add(const struct counter_table *t, void *dst, const void *src)
{
    for (size_t i = 0; i < t->n; i++) {
        uint64_t v = counter_value(&t->rows[i], dst) + counter_value(&t->rows[i], src);
        memcpy((char *)dst + t->rows[i].off, &v, sizeof(v));
    }
}

#endif
