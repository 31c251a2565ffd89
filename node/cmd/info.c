/*
 * info: lines of INFO's text sections (see info.h).
 */
#include "info.h"

#include <stdio.h>
#include <string.h>

void info_u64(struct resp_buf *t, const char *name, uint64_t v)
{
    char line[160];
    int n = snprintf(line, sizeof(line), "%s:%llu\r\n", name, (unsigned long long)v);
    if (n > 0 && (size_t)n < sizeof(line))
        resp_add_raw(t, line, (size_t)n);
}

/* Any length: a fixed line buffer used to drop a long value's whole line
 * (a readiness reason of 200 bytes or more vanished from INFO). */
void info_str(struct resp_buf *t, const char *name, const char *v)
{
    resp_add_raw(t, name, strlen(name));
    resp_add_raw(t, ":", 1);
    resp_add_raw(t, v, strlen(v));
    resp_add_raw(t, "\r\n", 2);
}

void info_counters(struct resp_buf *t, const struct counter_table *tab, const void *stats)
{
    for (size_t i = 0; i < tab->n; i++)
        info_u64(t, tab->rows[i].info, counter_value(&tab->rows[i], stats));
}
