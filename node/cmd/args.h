/*
 * args: parsing of command arguments as they arrive from the RESP parser
 * (byte strings with a length, not NUL-terminated).  Below every command
 * module, so that none of them imports another for these.
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

#endif
