/*
 * resp: the Redis protocol (RESP2) as bytes in, commands out, and replies in,
 * bytes out.  No sockets, no allocation per argument.
 *
 * Parsing is incremental.  The caller keeps the unconsumed bytes of one
 * connection contiguous and calls resp_parse() on them whenever more arrive;
 * the parser remembers how far it got, so a request split across any number
 * of reads costs O(total bytes), not O(bytes^2).  Between calls the caller may
 * move the bytes (compact or realloc its buffer) but must not change them:
 * the parser keeps offsets, never pointers, until a command is complete.
 *
 * A complete command comes back as argc/argv/argvlen whose pointers point
 * INTO the caller's buffer: they stay valid until the caller moves or
 * overwrites those bytes.  `consumed` says how many bytes the command used;
 * the caller drops them and parses again for the next pipelined command.
 *
 * Wire format of a request (RESP2 array of bulk strings) and of the replies
 * this module writes:
 *
 *   request   *3\r\n $11\r\n CL.THROTTLE\r\n $7\r\n user:42\r\n $2\r\n 15\r\n
 *             +----+-----+ +----+------+------------+ ...
 *             | *  | argc| | $  | len  | len bytes  |   each part ends in CRLF
 *             +----+-----+ +----+------+------------+
 *   replies   +OK\r\n            simple string
 *             -ERR reason\r\n    error
 *             :42\r\n            integer
 *             $5\r\nhello\r\n   bulk string ($-1\r\n: null)
 *             *5\r\n...          array of n replies
 *             %2\r\n... _\r\n   RESP3 map of n key/value pairs, RESP3 null
 *
 * Both request forms Redis accepts are understood: arrays of bulk strings
 * (what client libraries send) and inline commands (`PING\r\n`, what telnet
 * and hand-typed input send; split on spaces and tabs, no quoting).
 *
 * Errors that break framing (bad type byte, bad length, oversize request,
 * too many arguments) return -SLUICE_EPROTO or -SLUICE_ETOOBIG with a message
 * in the parser (resp_parser_error()); after one the connection cannot be
 * resynchronised and should be answered with that message and closed.
 */
#ifndef SLUICE_RESP_H
#define SLUICE_RESP_H

#include <stddef.h>
#include <stdint.h>

#define RESP_DEFAULT_MAX_REQUEST (64 * 1024)
#define RESP_DEFAULT_MAX_ARGS    1024

struct resp_parser {
    /* Configuration: set by resp_parser_init, may be changed between commands. */
    size_t max_request; /* max bytes of one command, framing included */
    size_t max_args;    /* max arguments of one command */

    /* Progress through the current command (private). */
    int mode;          /* 0 nothing yet, 1 multibulk, 2 inline */
    int64_t nargs;     /* arguments announced by the array header */
    size_t argi;       /* arguments fully parsed */
    int64_t bulklen;   /* length of the bulk being read, -1 if at its header */
    size_t pos;        /* offset of the next unparsed byte */
    size_t cap;        /* capacity of the arrays below */
    size_t *off;       /* argument offsets into the buffer */
    size_t *argvlen;   /* argument lengths */
    const char **argv; /* argument pointers, filled when complete */
    const char *err;   /* static message of the last error */
};

struct resp_cmd {
    size_t argc;
    const char **argv;     /* owned by the parser; valid until the next parse */
    const size_t *argvlen; /* same */
    size_t consumed;       /* bytes of the buffer this command used */
};

/* Initialises p with the given bounds (0 picks the default).  Allocates
 * nothing until the first argument arrives; never fails. */
void resp_parser_init(struct resp_parser *p, size_t max_request, size_t max_args);
/* Frees the parser's arrays; p may be reused after resp_parser_init. */
void resp_parser_free(struct resp_parser *p);
/* Forgets any partially parsed command (the buffer was discarded). */
void resp_parser_reset(struct resp_parser *p);

/*
 * Parses one command from buf[0..len), which must start at the first byte not
 * yet consumed.  Returns 1 and fills *out when a command is complete (an empty
 * command, an empty inline line or `*0`, gives argc 0 and must be skipped by
 * the caller), 0 when more bytes are needed, -SLUICE_EPROTO on malformed
 * input, -SLUICE_ETOOBIG when a bound is exceeded, -SLUICE_ENOMEM when the
 * argument arrays cannot grow.  After an error the message is in
 * resp_parser_error() and the parser must be reset before reuse.
 */
int resp_parse(struct resp_parser *p, const char *buf, size_t len, struct resp_cmd *out);

/* The message of the last error, e.g. "Protocol error: invalid bulk length";
 * static, never NULL. */
const char *resp_parser_error(const struct resp_parser *p);

/*
 * Output buffer: replies are appended; the owner sends data[0..len).
 * Appending fails only with -SLUICE_ENOMEM, leaving the buffer unchanged.
 */
struct resp_buf {
    char *data;
    size_t len;
    size_t cap;
};

void resp_buf_init(struct resp_buf *b);
void resp_buf_free(struct resp_buf *b);
/* Makes room for n more bytes. */
int resp_buf_reserve(struct resp_buf *b, size_t n);
int resp_add_raw(struct resp_buf *b, const char *p, size_t n);
/* +str\r\n: str must not contain CR or LF. */
int resp_add_simple(struct resp_buf *b, const char *str);
/* -msg\r\n: msg must start with an error code ("ERR ...", "NOPROTO ...");
 * CR and LF in msg are replaced by spaces so a quoted argument cannot break
 * framing. */
int resp_add_error(struct resp_buf *b, const char *msg);
/* Like resp_add_error with printf formatting. */
int resp_add_errorf(struct resp_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int resp_add_int(struct resp_buf *b, int64_t v);
int resp_add_bulk(struct resp_buf *b, const char *p, size_t n);
int resp_add_bulk_str(struct resp_buf *b, const char *s);
int resp_add_array(struct resp_buf *b, size_t n);
/* $-1\r\n, RESP2's null bulk string. */
int resp_add_null(struct resp_buf *b);
/* RESP3 (after HELLO 3): %n\r\n, a map of n key/value pairs (2n replies
 * follow), and _\r\n, the null. */
int resp_add_map(struct resp_buf *b, size_t npairs);
int resp_add_null3(struct resp_buf *b);
/* One field of a map (or of RESP2's flat field/value array): the bulk
 * string k, then v. -SLUICE_ENOMEM may leave k appended without v. */
int resp_add_pair_int(struct resp_buf *b, const char *k, int64_t v);
int resp_add_pair_str(struct resp_buf *b, const char *k, const char *v);

/* Writes v in decimal to dst (at least 21 bytes); returns the length. */
size_t resp_format_int(char *dst, int64_t v);

#endif
