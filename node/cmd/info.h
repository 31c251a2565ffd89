/*
 * info: the "name:value" lines of INFO's text sections, shared by every
 * command module that contributes a section.
 */
#ifndef SLUICE_INFO_H
#define SLUICE_INFO_H

#include <stdint.h>

#include "counter.h"
#include "resp.h"

/* Append one INFO line "name:value\r\n" to t.  A line that does not fit
 * the formatting buffer (a name or value of hundreds of bytes) is left out
 * rather than cut; out-of-memory is the buffer's (see resp_add_raw). */
void info_u64(struct resp_buf *t, const char *name, uint64_t v);
void info_str(struct resp_buf *t, const char *name, const char *v);
/* One line per row of a module's counter table (base/counter.h), the
 * values read from its stats struct; /metrics renders the same rows. */
void info_counters(struct resp_buf *t, const struct counter_table *tab, const void *stats);

#endif
