/*
 * acceptgate: at most a fixed number of new connections accepted per turn
 * of the event loop, per listener, so that a connection storm (thousands of
 * clients connecting and reconnecting at once) cannot make one loop turn
 * long: each accept costs the listener its set-up (an HTTP/2 session, a
 * search for a victim when the listener is full), and libuv would otherwise
 * accept until the backlog is empty within one turn.
 *
 * How.  A listener's connection callback asks acceptgate_admit first.  Past
 * the turn's budget it returns 0 and the callback returns without calling
 * uv_accept: libuv then stops watching the listener, the kernel keeps the
 * connection in the backlog, and an idle handle calls the connection
 * callback again at the start of the next turn (before that turn's I/O),
 * whose uv_accept resumes the listener.  Clients already connected are
 * served in between; a newcomer waits a turn or a few, not refused.
 *
 * A check handle (run after each turn's I/O) starts the next turn's budget;
 * the accepts of the idle handle and of the poll that follows it are one
 * turn's.
 */
#ifndef SLUICE_ACCEPTGATE_H
#define SLUICE_ACCEPTGATE_H

#include <stdint.h>
#include <uv.h>

/* The default budget: 32 accepts a turn, and no more once the turn's
 * accepts took ACCEPTGATE_BUDGET_NS (an HTTP/2 session's set-up alone took
 * 250 us on a loaded host: 32 of them were 8 ms). */
#define ACCEPTGATE_DEFAULT   32
#define ACCEPTGATE_BUDGET_NS 500000u

struct acceptgate {
    uv_idle_t idle;
    uv_check_t check;
    uv_stream_t *listener;
    uv_connection_cb cb;
    unsigned used, max;
    uint64_t first_ns; /* uv_hrtime at the turn's first accept */
    int inited, deferred;
    uint64_t deferrals; /* turns that ended with a connection waiting */
};

/* Prepares g for listener, whose connection callback is cb (g is owned by
 * the caller and must outlive the loop's closing of it: acceptgate_close,
 * then the loop runs).  max 0 means ACCEPTGATE_DEFAULT.  0 or -SLUICE_EIO. */
int acceptgate_init(struct acceptgate *g, uv_loop_t *loop, uv_stream_t *listener,
                    uv_connection_cb cb, unsigned max);

/* Called first in the connection callback: 1 to accept now, 0 to return
 * without uv_accept (the connection is accepted at the next turn). */
int acceptgate_admit(struct acceptgate *g);

/* Stops deferring and closes the idle handle (a no-op if never inited). */
void acceptgate_close(struct acceptgate *g);

#endif
