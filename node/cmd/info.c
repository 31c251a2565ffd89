/*
 * info: lines of INFO's text sections (see info.h).
 */
#include "info.h"

#include <stdio.h>

void info_u64(struct resp_buf *t, const char *name, uint64_t v)
{
    char line[160];
    int n = snprintf(line, sizeof(line), "%s:%llu\r\n", name, (unsigned long long)v);
    if (n > 0 && (size_t)n < sizeof(line))
        resp_add_raw(t, line, (size_t)n);
}

void info_str(struct resp_buf *t, const char *name, const char *v)
{
    char line[200];
    int n = snprintf(line, sizeof(line), "%s:%s\r\n", name, v);
    if (n > 0 && (size_t)n < sizeof(line))
        resp_add_raw(t, line, (size_t)n);
}

void info_counters(struct resp_buf *t, const struct counter_table *tab, const void *stats)
{
    for (size_t i = 0; i < tab->n; i++)
        info_u64(t, tab->rows[i].info, counter_value(&tab->rows[i], stats));
}
