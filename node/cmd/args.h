/*
 * args: parsing of command arguments as they arrive from the RESP parser
 * (byte strings with a length, not NUL-terminated), and the one reply
 * several commands share (CL.THROTTLE's five integers).  Below every
 * command module, so that none of them imports another for these.
 */
#ifndef SLUICE_ARGS_H
#define SLUICE_ARGS_H

#include <stddef.h>
#include <stdint.h>

/*
 * Strict decimal int64: optional '+' or '-', then digits, no spaces, no
 * trailing bytes; overflow is an error.  Returns 0 or -SLUICE_EINVAL /
 * -SLUICE_ERANGE; *out is untouched on error.
 */
int args_parse_int64(const char *s, size_t len, int64_t *out);

/* 1 if the argument arg (len bytes, not NUL-terminated) is word in any
 * case, else 0. */
int args_is(const char *arg, size_t len, const char *word);

/* Appends CL.THROTTLE's reply, an array of five integers (limited, limit,
 * remaining, retry after, reset after), written in place with one reserve:
 * the hot path of every decision.  Out of memory is the buffer's. */
struct resp_buf;
void args_reply_cell(struct resp_buf *out, const int64_t v[5]);

#endif
