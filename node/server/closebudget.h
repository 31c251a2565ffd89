/*
 * closebudget: at most CLOSEBUDGET_PER_TURN connections closed per turn of
 * the event loop, per listener (RESP, HTTP, gRPC), among those that hung up
 * or outstayed a deadline, so that a crowd hanging up at once (after a
 * stall, a crashed client pool) cannot make one turn long: closing a socket
 * took 17 us on a loaded host, and 1,100 silent TCP clients hanging up
 * together made a 7.5 ms turn.
 *
 * How.  A listener asks closebudget_take before closing such a connection.
 * Past the turn's budget it answers 0: the listener stops reading the
 * connection, queues it (its own FIFO) and serves the queue from an idle
 * handle at the next turns, asking again before each close.  The
 * listener's check handle (run after each turn's I/O) calls
 * closebudget_turn_end.  Closes that must happen now (the listener has no
 * turn handles yet, or the client is in the middle of a command) are
 * forced: they are done and still charged to the turn.
 *
 * Static data only; nothing here allocates or fails.
 */
#ifndef SLUICE_CLOSEBUDGET_H
#define SLUICE_CLOSEBUDGET_H

#define CLOSEBUDGET_PER_TURN 64

struct closebudget {
    unsigned spent; /* closes this turn, forced ones included */
};

/* 1: close now (charged to this turn); 0: this turn's budget is spent,
 * the caller queues the connection for a later turn.  force: 1 always. */
static inline int closebudget_take(struct closebudget *b, int force)
{
    if (!force && b->spent >= CLOSEBUDGET_PER_TURN)
        return 0;
    b->spent++;
    return 1;
}

/* A fresh budget: called once a turn, after its I/O. */
static inline void closebudget_turn_end(struct closebudget *b)
{
    b->spent = 0;
}

#endif
