/* server: RESP over a Unix socket on libuv (design in server.h). */
#include "server.h"

#include <errno.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "clientmem.h"
#include "log.h"
#include "acceptgate.h"
#include "closebudget.h"
#include "loopstat.h"
#include "tcp.h"
#include "sluice/error.h"

#define READ_CHUNK (64 * 1024)
_Static_assert(READ_CHUNK == 64 * 1024, "server.h: reading stops at max_request + 64 KiB queued");
/* out_soft_limit's and out_hard_limit's defaults (server.h). */
#define OUT_SOFT_DEFAULT ((size_t)256 * 1024)
#define OUT_HARD_DEFAULT ((size_t)16 << 20)
_Static_assert(OUT_SOFT_DEFAULT == 256 * 1024, "server.h: out_soft_limit 0 = 256 KiB");
_Static_assert(OUT_HARD_DEFAULT == 16 * 1024 * 1024,
               "server.h: out_hard_limit 0 = 16 MiB, and server_client_out_limit(NULL)");
/* An output buffer this large is freed once empty instead of being kept. */
#define OUT_KEEP_CAP (64 * 1024)
/* An input buffer past this, mostly consumed, is shrunk to its tail. */
#define IN_KEEP_CAP (2 * READ_CHUNK)
/* malloc_trim once this much client memory was freed, at most once per
 * TRIM_INTERVAL_MS (a wave of disconnects gives back its pages at once),
 * and then after a trim of d ms not before d / TRIM_COST_SHARE.  A trim is
 * long on a fragmented heap (glibc madvises every free page range, each a
 * TLB shootdown that waits for the other CPUs: 10 to 440 ms under the
 * hostile soak), so it runs in libuv's thread pool, not on the loop: the
 * loop goes on, and waits only where it allocates or frees while the trim
 * holds that arena's lock.  The memory is reused meanwhile, only not
 * returned. */
#define TRIM_MIN_BYTES   (1024 * 1024)
#define TRIM_INTERVAL_MS 1000
#define TRIM_COST_SHARE  0.01
/* A client's input is executed one read (up to READ_CHUNK) a loop turn, as
 * Redis reads a client once per event loop iteration: libuv would read a
 * busy socket up to 32 times in one callback (2 MiB), and fifty clients
 * pipelining 60 KB made a 21 ms turn.  A second read in the same turn is
 * kept unexecuted, the client stops being read, and it is executed at the
 * next turn (every such client at the next, so none waits more than one
 * turn behind the others). */
/* One log line per this many ms about clients closed over the budget. */
#define MEM_LOG_INTERVAL_MS 10000
/* The parser's arrays, per argument slot (struct resp_parser). */
#define PARSER_BYTES_PER_ARG (2 * sizeof(size_t) + sizeof(char *))

struct server_client {
    /* First: the handle's address is the client's.  A Unix socket client
     * (pipe) or a TCP one (tcp); both are streams. */
    union {
        uv_pipe_t pipe;
        uv_tcp_t tcp;
    } h;
    struct server *srv;
    struct server_client *prev, *next;
    uint64_t id;
    struct resp_parser parser;
    /* Unconsumed input: bytes [0, inlen) of inbuf; NULL when empty. */
    char *inbuf;
    size_t inlen, incap;
    struct resp_buf out;  /* replies not yet handed to the kernel or to uv_write */
    struct resp_buf wbuf; /* bytes owned by the in-flight uv_write */
    size_t wsent;         /* of wbuf, already taken by uv_try_write */
    uv_write_t wreq;
    unsigned writing : 1;
    unsigned reading : 1;
    unsigned closing : 1;
    unsigned close_after_reply : 1;
    unsigned blocked : 1;
    unsigned in_shared : 1; /* the last alloc handed out the shared buffer */
    unsigned executing : 1; /* inside server__client_execute: no re-entry */
    server_cancel_fn cancel;
    void *cancel_arg;
    char *name;
    size_t name_len;
    size_t ctx_bytes; /* what ctx holds (server_client_set_ctx_bytes) */
    size_t mem;       /* server__client_mem() when last counted into srv->client_mem */
    int proto;        /* 2 or 3 (HELLO 3); 0 is read as 2 */
    void *ctx;        /* the command layer's per-connection state (server_client_set_ctx) */
    void (*ctx_free)(void *ctx);
    server_close_fn on_close; /* server_client_set_close_hook */
    void *on_close_arg;
    uint64_t born_ms, last_ms; /* uv_now at accept, at the last read */
    unsigned tcp : 1;          /* came through the TCP listener */
    unsigned hung_up : 1;      /* in the queue of clients to close at a later turn */
    struct server_client *hu_prev, *hu_next;
    unsigned held : 1; /* read twice this turn: input kept for the next (READ_CHUNK note) */
    struct server_client *held_prev, *held_next;
    uint64_t read_turn;  /* server's turn of c's last read executed */
    unsigned authed : 1; /* AUTH passed (server_client_set_authed) */
};

struct server {
    uv_loop_t *loop;
    uv_pipe_t listener;
    uv_tcp_t tcp_listener;                   /* --listen */
    struct acceptgate gate, tcp_gate;        /* accepts per loop turn, per listener */
    struct server_client *hu_head, *hu_tail; /* hung up, closed at a later turn (FIFO) */
    uv_idle_t hu_idle;                       /* closes them at the next turn */
    uv_check_t turn_end;                     /* after each turn's I/O: a fresh budget */
    int turn_init;
    struct closebudget closes;                   /* hang-ups closed this turn */
    uint64_t turn;                               /* loop turns since start (turn_end counts them) */
    struct server_client *held_head, *held_tail; /* read twice in a turn (FIFO) */
    char *tcp_bind;                              /* NULL: no TCP listener */
    int tcp_open, tcp_port, tcp_loopback;
    char *path;
    unsigned mode;
    int set_gid;
    unsigned gid;
    size_t max_clients, max_request, max_args, soft_limit, hard_limit;
    uint64_t refused_logged_at, refused_logged; /* rate limit of the refusal log line */
    size_t in_limit; /* queued input of a paused client before reading stops */
    size_t max_client_memory;
    /* The one client memory budget (the HTTP and gRPC listeners join it
     * too) and this server's pool in it: the sum of its clients' mem. */
    struct clientmem_budget budget;
    struct clientmem_pool pool;
    size_t trim_bytes;         /* client memory freed since the last malloc_trim */
    uint64_t trim_next_ms;     /* uv_now before which no trim runs (TRIM_COST_SHARE) */
    unsigned depth;            /* clients executing commands now (nested unblocks) */
    int enforcing;             /* inside server__enforce_budget */
    uv_timer_t housekeep;      /* trims and the budget's log line */
    uv_work_t trim_req;        /* the trim running in the thread pool */
    uint64_t trim_took_ns;     /* how long it took (set by the worker) */
    struct loopstat loop_stat; /* the loop's turn durations, from server_start */
    int housekeep_init;
    int trimming;           /* trim_req is queued or running */
    uint64_t mem_logged_at; /* uv_now of the last budget log line */
    int mem_logged;
    uint64_t mem_unlogged, mem_unlogged_bytes, mem_unlogged_largest;
    server_dispatch_fn dispatch;
    server_hint_fn hint;
    void *ud;
    struct server_client *clients;
    uint64_t next_id;
    size_t max_tcp_clients;
    int tcp_auth;
    uint64_t tcp_auth_timeout_ms, tcp_idle_timeout_ms;
    uv_timer_t tcp_sweep; /* the TCP clients' deadlines, once a second */
    int tcp_sweep_init;
    uint64_t tcp_logged_at; /* uv_now of the last eviction/timeout log line */
    uint64_t tcp_unlogged_evictions, tcp_unlogged_timeouts;
    uint64_t now_ns; /* monotonic, read once at the start of the current read batch */
    struct server_stats stats;
    int listening;
    int bound;
    int closing;
    char err[256];
    char shared[READ_CHUNK];
};

static void server__client_close(struct server_client *c);
static void server__client_unqueue(struct server_client *c);
static void server__client_unhold(struct server_client *c);
static void server__client_resume(struct server_client *c);
static void server__client_update_reading(struct server_client *c);
static void server__freed(struct server *s, size_t bytes);
static void server__enforce_budget(struct server *s);
static void *server__heaviest(void *ud, size_t *bytes);
static void server__evict(void *ud, void *client);

static void server__budget_freed(void *ud, size_t bytes)
{
    server__freed(ud, bytes);
}

int server_create(uv_loop_t *loop, const struct server_config *cfg, server_dispatch_fn dispatch,
                  void *ud, struct server **out)
{
    struct sockaddr_un sun;
    if (cfg == NULL || cfg->socket_path == NULL || cfg->socket_path[0] == '\0' ||
        strlen(cfg->socket_path) >= sizeof(sun.sun_path) || dispatch == NULL)
        return -SLUICE_EINVAL;
    struct server *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return -SLUICE_ENOMEM;
    s->path = strdup(cfg->socket_path);
    if (cfg->listen != NULL && (s->tcp_bind = strdup(cfg->listen)) == NULL) {
        free(s->path);
        s->path = NULL;
    }
    if (s->path == NULL) {
        free(s);
        return -SLUICE_ENOMEM;
    }
    s->loop = loop;
    s->mode = cfg->socket_mode;
    s->set_gid = cfg->set_socket_gid;
    s->gid = cfg->socket_gid;
    s->max_clients = cfg->max_clients ? cfg->max_clients : SERVER_DEFAULT_MAX_CLIENTS;
    s->max_request = cfg->max_request ? cfg->max_request : RESP_DEFAULT_MAX_REQUEST;
    s->max_args = cfg->max_args ? cfg->max_args : RESP_DEFAULT_MAX_ARGS;
    s->soft_limit = cfg->out_soft_limit ? cfg->out_soft_limit : OUT_SOFT_DEFAULT;
    s->hard_limit = cfg->out_hard_limit ? cfg->out_hard_limit : OUT_HARD_DEFAULT;
    if (s->hard_limit < s->soft_limit)
        s->hard_limit = s->soft_limit;
    s->in_limit = s->max_request + READ_CHUNK;
    s->max_client_memory =
        cfg->max_client_memory ? cfg->max_client_memory : SERVER_DEFAULT_MAX_CLIENT_MEMORY;
    if (s->max_client_memory != SERVER_CLIENT_MEMORY_UNLIMITED &&
        s->max_clients > s->max_client_memory / 2 / sizeof(struct server_client))
        log_warn("--max-clients %zu idle clients alone would take half of --max-client-memory "
                 "(%zu bytes): busy ones will be disconnected early",
                 s->max_clients, s->max_client_memory);
    s->max_tcp_clients =
        cfg->max_tcp_clients ? cfg->max_tcp_clients : SERVER_DEFAULT_MAX_TCP_CLIENTS;
    s->tcp_auth = cfg->tcp_auth;
    s->tcp_auth_timeout_ms =
        cfg->tcp_auth_timeout_ms ? cfg->tcp_auth_timeout_ms : SERVER_DEFAULT_TCP_AUTH_TIMEOUT_MS;
    s->tcp_idle_timeout_ms = cfg->tcp_idle_timeout_ms;
    clientmem_budget_init(&s->budget, s->max_client_memory);
    s->budget.freed = server__budget_freed;
    s->budget.freed_ud = s;
    s->pool.heaviest = server__heaviest;
    s->pool.evict = server__evict;
    s->pool.ud = s;
    clientmem_join(&s->budget, &s->pool);
    s->dispatch = dispatch;
    s->ud = ud;
    s->next_id = 1;
    s->now_ns = uv_hrtime();
    *out = s;
    return 0;
}

const char *server_error(const struct server *s)
{
    return s->err;
}

void server_set_hint(struct server *s, server_hint_fn hint)
{
    s->hint = hint;
}

void server_get_stats(const struct server *s, struct server_stats *out)
{
    *out = s->stats;
    out->client_memory = clientmem_total(&s->budget);
    out->loop_turns = s->loop_stat.turns;
    out->loop_max_turn_us = s->loop_stat.max_turn_ns / 1000u;
    out->loop_max_turn_cpu_us = s->loop_stat.max_turn_cpu_ns / 1000u;
    out->memory_trim_ms = s->stats.memory_trim_ns / 1000000u;
}

void server_get_loop_turns(const struct server *s, struct metrics_histogram *out)
{
    *out = s->loop_stat.hist;
}

void server_reset_loop_max(struct server *s)
{
    loopstat_reset_max(&s->loop_stat);
}

struct clientmem_budget *server_memory_budget(struct server *s)
{
    return &s->budget;
}

int64_t server_client_now_ns(const struct server_client *c)
{
    return (int64_t)(c != NULL ? server_client_server(c)->now_ns : uv_hrtime());
}

struct server *server_client_server(const struct server_client *c)
{
    return c->srv;
}

uint64_t server_client_id(const struct server_client *c)
{
    return c->id;
}

const char *server_client_name(const struct server_client *c)
{
    return c->name ? c->name : "";
}

int server_client_proto(const struct server_client *c)
{
    return c != NULL && c->proto == 3 ? 3 : 2;
}

void server_client_set_proto(struct server_client *c, int proto)
{
    if (c != NULL)
        c->proto = proto == 3 ? 3 : 2;
}

void *server_client_ctx(const struct server_client *c)
{
    return c != NULL ? c->ctx : NULL;
}

void server_client_set_ctx(struct server_client *c, void *ctx, void (*ctx_free)(void *ctx))
{
    if (c == NULL) {
        /* No connection to own it (a command run without one): ownership
         * still passes, so the context is freed now rather than leaked. */
        if (ctx_free != NULL)
            ctx_free(ctx);
        return;
    }
    if (c->ctx_free != NULL && c->ctx != ctx)
        c->ctx_free(c->ctx);
    if (c->ctx != ctx)
        c->ctx_bytes = 0;
    c->ctx = ctx;
    c->ctx_free = ctx_free;
}

void server_client_set_close_hook(struct server_client *c, server_close_fn fn, void *arg)
{
    if (c == NULL)
        return;
    c->on_close = fn;
    c->on_close_arg = arg;
}

void *server_client_close_arg(const struct server_client *c)
{
    return c != NULL && c->on_close != NULL ? c->on_close_arg : NULL;
}

void server_client_set_ctx_bytes(struct server_client *c, size_t bytes)
{
    if (c != NULL)
        c->ctx_bytes = bytes;
}

int server_client_set_name(struct server_client *c, const char *name, size_t len)
{
    char *n = NULL;
    if (len > 0) {
        n = malloc(len + 1);
        if (n == NULL)
            return -SLUICE_ENOMEM;
        memcpy(n, name, len);
        n[len] = '\0';
    }
    free(c->name);
    c->name = n;
    c->name_len = n != NULL ? len + 1 : 0;
    return 0;
}

struct resp_buf *server_client_out(struct server_client *c)
{
    return &c->out;
}

static size_t server__client_pending(const struct server_client *c)
{
    return c->out.len + (c->writing ? c->wbuf.len - c->wsent : 0);
}

/* ---- memory ---- */

/* What c holds: its buffers at capacity, its name, the command layer's
 * state and the fixed part (the structure, with its libuv handle). */
static size_t server__client_mem(const struct server_client *c)
{
    return sizeof(*c) + c->incap + c->out.cap + c->wbuf.cap + c->name_len + c->ctx_bytes +
           c->parser.cap * PARSER_BYTES_PER_ARG;
}

static void server__on_housekeep(uv_timer_t *t);

/*
 * Frees a closed client's buffers now rather than when libuv runs the close
 * callback at the end of the loop iteration: within one iteration many
 * clients may be read and disconnected, and their memory would add up
 * meanwhile.  Only for a client that is not executing; libuv no longer
 * touches a closed pipe's write buffer (the write is only cancelled).
 */
static void server__client_release(struct server_client *c)
{
    free(c->inbuf);
    c->inbuf = NULL;
    c->inlen = c->incap = 0;
    resp_buf_free(&c->out);
    resp_buf_free(&c->wbuf);
    c->wsent = 0;
    free(c->name);
    c->name = NULL;
    c->name_len = 0;
}

/* Runs server__on_housekeep within delay_ms (sooner if it is already due sooner). */
static void server__housekeep_within(struct server *s, uint64_t delay_ms)
{
    if (!s->housekeep_init || s->closing)
        return;
    if (uv_is_active((uv_handle_t *)&s->housekeep) &&
        uv_timer_get_due_in(&s->housekeep) <= delay_ms)
        return;
    uv_timer_start(&s->housekeep, server__on_housekeep, delay_ms, 0);
}

static void server__freed(struct server *s, size_t bytes)
{
    s->trim_bytes += bytes;
    if (s->trim_bytes >= TRIM_MIN_BYTES) {
        uint64_t now = uv_now(s->loop);
        uint64_t wait = s->trim_next_ms > now ? s->trim_next_ms - now : 0;
        server__housekeep_within(s, wait > TRIM_INTERVAL_MS ? wait : TRIM_INTERVAL_MS);
    }
}

/* Brings c's share of the client memory up to date. */
static void server__client_account(struct server_client *c)
{
    if (c->closing)
        return;
    struct server *s = c->srv;
    size_t m = server__client_mem(c);
    clientmem_charge(&s->pool, c->mem, m);
    c->mem = m;
}

int server_client_reply_fits(struct server_client *c)
{
    if (c == NULL || c->closing)
        return 0;
    struct server *s = c->srv;
    if (server__client_pending(c) > s->hard_limit)
        return -SLUICE_ETOOBIG;
    /* c->mem is what c counted at its last settle; its buffers grew since. */
    size_t now = server__client_mem(c);
    size_t total = clientmem_total(&s->budget) - c->mem + now;
    if (total > s->max_client_memory)
        return -SLUICE_ETOOBIG;
    return 0;
}

void server_client_drop_reply(struct server_client *c, size_t mark)
{
    if (c == NULL)
        return;
    struct server *s = c->srv;
    size_t built = c->out.len > mark ? c->out.len - mark : 0;
    if (c->out.len > mark)
        c->out.len = mark;
    s->stats.output_limit_disconnects++;
    log_warn("client %llu: reply of %zu bytes and growing passed the output limit (%zu) or the "
             "client memory budget (%zu), disconnecting",
             (unsigned long long)c->id, built, s->hard_limit, s->max_client_memory);
}

size_t server_client_out_limit(const struct server_client *c)
{
    return c != NULL ? c->srv->hard_limit : OUT_HARD_DEFAULT;
}

/* One line per MEM_LOG_INTERVAL_MS about the clients closed over budget
 * since the last line; a later one is left to the housekeeping timer. */
static void server__log_budget(struct server *s)
{
    if (s->mem_unlogged == 0)
        return;
    uint64_t now_ms = uv_now(s->loop);
    if (s->mem_logged && now_ms - s->mem_logged_at < MEM_LOG_INTERVAL_MS) {
        server__housekeep_within(s, MEM_LOG_INTERVAL_MS - (now_ms - s->mem_logged_at));
        return;
    }
    log_warn("client memory over --max-client-memory (%zu bytes): disconnected %llu clients "
             "holding %llu bytes (largest %llu), heaviest first; %llu so far",
             s->max_client_memory, (unsigned long long)s->mem_unlogged,
             (unsigned long long)s->mem_unlogged_bytes, (unsigned long long)s->mem_unlogged_largest,
             (unsigned long long)s->stats.client_memory_disconnects);
    s->mem_logged = 1;
    s->mem_logged_at = now_ms;
    s->mem_unlogged = s->mem_unlogged_bytes = s->mem_unlogged_largest = 0;
}

/* In the thread pool: gives the heap's free pages back. */
static void server__trim_work(uv_work_t *req)
{
    struct server *s = req->data;
    uint64_t t0 = uv_hrtime();
#if defined(__GLIBC__)
    malloc_trim(0);
#endif
    s->trim_took_ns = uv_hrtime() - t0; /* read by server__trim_done, after this returns */
}

/* Back on the loop (also when cancelled at close). */
static void server__trim_done(uv_work_t *req, int status)
{
    struct server *s = req->data;
    s->trimming = 0;
    if (status != 0)
        return;
    s->stats.memory_trim_ns += s->trim_took_ns;
    s->trim_next_ms = uv_now(s->loop) + (uint64_t)((double)s->trim_took_ns / 1e6 / TRIM_COST_SHARE);
    if (s->trim_bytes >= TRIM_MIN_BYTES)
        server__housekeep_within(s, s->trim_next_ms - uv_now(s->loop));
}

static void server__on_housekeep(uv_timer_t *t)
{
    struct server *s = t->data;
    uv_update_time(s->loop);
    uint64_t now = uv_now(s->loop);
    if (s->trim_bytes >= TRIM_MIN_BYTES && s->trimming) {
        /* server__trim_done schedules the next */
    } else if (s->trim_bytes >= TRIM_MIN_BYTES && now < s->trim_next_ms) {
        server__housekeep_within(s, s->trim_next_ms - now); /* its share of time is spent */
    } else if (s->trim_bytes >= TRIM_MIN_BYTES) {
        s->trim_req.data = s;
        if (uv_queue_work(s->loop, &s->trim_req, server__trim_work, server__trim_done) == 0) {
            s->trim_bytes = 0;
            s->trimming = 1;
            s->stats.memory_trims++;
        }
    }
    server__log_budget(s);
}

/* The budget's question to this pool: its heaviest client, brought up to
 * date.  None while a command executes (the client running it, or one it
 * unblocked, may be the heaviest): the read that started it checks after. */
static void *server__heaviest(void *ud, size_t *bytes)
{
    struct server *s = ud;
    if (s->depth > 0 || s->closing)
        return NULL;
    struct server_client *worst = NULL;
    for (struct server_client *c = s->clients; c != NULL; c = c->next) {
        if (c->closing)
            continue;
        server__client_account(c); /* figures not yet counted since their last read */
        if (worst == NULL || c->mem > worst->mem)
            worst = c;
    }
    if (worst != NULL)
        *bytes = worst->mem;
    return worst;
}

/* The budget closes one of this pool's clients (its bytes leave at once). */
static void server__evict(void *ud, void *client)
{
    struct server *s = ud;
    struct server_client *c = client;
    s->stats.client_memory_disconnects++;
    s->mem_unlogged++;
    s->mem_unlogged_bytes += c->mem;
    if (c->mem > s->mem_unlogged_largest)
        s->mem_unlogged_largest = c->mem;
    log_debug("client %llu: holds %zu bytes, client memory over budget, disconnecting",
              (unsigned long long)c->id, c->mem);
    server__client_close(c); /* no-op when a cancel callback already closed it */
    server__client_release(c);
    server__log_budget(s);
}

/*
 * Past the budget, disconnects the heaviest connections (of any listener
 * sharing it) until the sum is within it.  Not while a command executes.
 */
static void server__enforce_budget(struct server *s)
{
    if (s->depth > 0 || s->enforcing || s->closing ||
        clientmem_total(&s->budget) <= s->max_client_memory)
        return;
    s->enforcing = 1;
    clientmem_enforce(&s->budget);
    s->enforcing = 0;
}

/* After c's read, write or unblock: count its memory, keep the budget. */
static void server__client_settle(struct server_client *c)
{
    server__client_account(c);
    server__enforce_budget(c->srv);
}

/* ---- output ---- */

static void server__client_flush(struct server_client *c);

static void server__on_write(uv_write_t *req, int status)
{
    struct server_client *c = req->data;
    c->writing = 0;
    c->wbuf.len = 0;
    c->wsent = 0;
    if (c->wbuf.cap > OUT_KEEP_CAP)
        resp_buf_free(&c->wbuf);
    if (c->closing)
        return;
    if (status < 0) {
        server__client_close(c);
        return;
    }
    server__client_flush(c);
    if (!c->closing && !c->writing)
        server__client_resume(c);
    server__client_settle(c);
}

/*
 * Sends c->out: as much as the socket takes now, the rest through uv_write.
 * Closes the client on a write error, on output past the hard limit, or when
 * a close was requested and everything has been sent.
 */
static void server__client_flush(struct server_client *c)
{
    if (c->closing)
        return;
    if (server__client_pending(c) > c->srv->hard_limit) {
        c->srv->stats.output_limit_disconnects++;
        log_warn("client %llu: output buffer over %zu bytes, disconnecting",
                 (unsigned long long)c->id, c->srv->hard_limit);
        server__client_close(c);
        return;
    }
    if (!c->writing && c->out.len > 0) {
        uv_buf_t b = uv_buf_init(c->out.data, (unsigned)c->out.len);
        int n = uv_try_write((uv_stream_t *)&c->h.pipe, &b, 1);
        if (n < 0 && n != UV_EAGAIN) {
            server__client_close(c);
            return;
        }
        if (n < 0)
            n = 0;
        if ((size_t)n == c->out.len) {
            c->out.len = 0;
            if (c->out.cap > OUT_KEEP_CAP)
                resp_buf_free(&c->out);
        } else {
            /* Hand the remainder to uv_write; new replies go to a fresh out. */
            struct resp_buf tmp = c->wbuf;
            c->wbuf = c->out;
            c->out = tmp;
            c->out.len = 0;
            c->wsent = (size_t)n;
            uv_buf_t rest = uv_buf_init(c->wbuf.data + n, (unsigned)(c->wbuf.len - (size_t)n));
            c->wreq.data = c;
            int rc = uv_write(&c->wreq, (uv_stream_t *)&c->h.pipe, &rest, 1, server__on_write);
            if (rc < 0) {
                server__client_close(c);
                return;
            }
            c->writing = 1;
        }
    }
    if (c->close_after_reply && !c->writing && c->out.len == 0)
        server__client_close(c);
}

/* ---- input ---- */

static int server__client_paused(const struct server_client *c)
{
    return c->blocked || c->closing || c->close_after_reply || c->held ||
           server__client_pending(c) > c->srv->soft_limit;
}

/*
 * Look-ahead (server_hint_fn).  Pipelined commands are parsed a window of
 * AHEAD_CMDS at a time (a command of more than AHEAD_ARGS arguments ends
 * the window and runs after it), and while command i runs the hint has
 * asked for the bucket of command i + AHEAD_BUCKET and the entry of command
 * i + AHEAD_ENTRY.  A command takes a microsecond or so, time enough for a
 * cache miss to arrive; asking for a whole window's buckets and then their
 * entries in two tight loops did not help a daemon at a million keys, as
 * the first entries' buckets were still on their way.
 */
#define AHEAD_CMDS   16
#define AHEAD_ARGS   8
#define AHEAD_BUCKET 4
#define AHEAD_ENTRY  2

/* One command of a window: its arguments (pointing into the client's
 * input, which stays put while the window runs), the offset just past it,
 * and the hint's state for it. */
struct server__ahead {
    size_t argc, end;
    const char *argv[AHEAD_ARGS];
    size_t argvlen[AHEAD_ARGS];
    uint32_t hint;
};

/* Runs one command; returns 0 when it paused the client. */
static int server__client_run(struct server_client *c, size_t argc, const char **argv,
                              const size_t *argvlen)
{
    struct server *s = c->srv;
    s->stats.total_commands++;
    if (s->dispatch(s->ud, c, argc, argv, argvlen, &c->out) == SERVER_CLOSE_AFTER_REPLY)
        c->close_after_reply = 1;
    return !server__client_paused(c);
}

/*
 * Executes the complete commands in buf[0..len) until the input runs out or
 * the client pauses; returns the bytes consumed.  A command that pauses the
 * client ends its window: the bytes after it are parsed again when the
 * client resumes, so the parser forgets what it read past it.  A framing
 * error is answered after the commands before it ran, and the rest of the
 * input is dropped.
 */
static size_t server__client_execute(struct server_client *c, const char *buf, size_t len)
{
    struct server *s = c->srv;
    struct server__ahead w[AHEAD_CMDS];
    size_t pos = 0;
    c->executing = 1;
    s->depth++;
    while (pos < len && !server__client_paused(c)) {
        struct resp_cmd cmd;
        size_t n = 0, p = pos;
        int rc = 1, direct = 0;
        while (n < AHEAD_CMDS && p < len) {
            rc = resp_parse(&c->parser, buf + p, len - p, &cmd);
            if (rc <= 0)
                break;
            p += cmd.consumed;
            if (cmd.argc == 0)
                continue;
            if (cmd.argc > AHEAD_ARGS) {
                direct = 1; /* runs after the window, from the parser's arrays */
                break;
            }
            w[n].argc = cmd.argc;
            w[n].end = p;
            memcpy(w[n].argv, cmd.argv, cmd.argc * sizeof(cmd.argv[0]));
            memcpy(w[n].argvlen, cmd.argvlen, cmd.argc * sizeof(cmd.argvlen[0]));
            n++;
        }
        server_hint_fn hint = n > 1 ? s->hint : NULL;
        for (size_t j = 0; hint != NULL && j < n && j < AHEAD_BUCKET; j++)
            hint(s->ud, w[j].argc, w[j].argv, w[j].argvlen, 0, &w[j].hint);
        for (size_t j = 0; hint != NULL && j < n && j < AHEAD_ENTRY; j++)
            hint(s->ud, w[j].argc, w[j].argv, w[j].argvlen, 1, &w[j].hint);
        size_t i = 0;
        for (; i < n; i++) {
            if (hint != NULL && i + AHEAD_BUCKET < n) {
                struct server__ahead *a = &w[i + AHEAD_BUCKET];
                hint(s->ud, a->argc, a->argv, a->argvlen, 0, &a->hint);
            }
            if (hint != NULL && i + AHEAD_ENTRY < n) {
                struct server__ahead *a = &w[i + AHEAD_ENTRY];
                hint(s->ud, a->argc, a->argv, a->argvlen, 1, &a->hint);
            }
            if (!server__client_run(c, w[i].argc, w[i].argv, w[i].argvlen))
                break;
        }
        if (i < n) { /* paused after w[i]: the rest is read again later */
            pos = w[i].end;
            resp_parser_reset(&c->parser);
            break;
        }
        if (direct) {
            if (!server__client_run(c, cmd.argc, cmd.argv, cmd.argvlen)) {
                pos = p;
                break;
            }
        }
        if (rc < 0) {
            s->stats.protocol_errors++;
            log_debug("client %llu: %s", (unsigned long long)c->id, resp_parser_error(&c->parser));
            resp_add_errorf(&c->out, "ERR %s", resp_parser_error(&c->parser));
            c->close_after_reply = 1;
            resp_parser_reset(&c->parser);
            c->executing = 0;
            s->depth--;
            return len; /* the rest is unframeable: drop it */
        }
        pos = p;
        if (rc == 0)
            break;
    }
    c->executing = 0;
    s->depth--;
    return pos;
}

/* Keeps buf[0..len) as the client's unconsumed input. */
static int server__client_keep(struct server_client *c, const char *buf, size_t len)
{
    if (len == 0) {
        free(c->inbuf);
        c->inbuf = NULL;
        c->inlen = c->incap = 0;
        return 0;
    }
    if (buf == c->inbuf) {
        c->inlen = len;
        return 0;
    }
    if (buf >= c->inbuf && buf < c->inbuf + c->incap) {
        memmove(c->inbuf, buf, len);
        c->inlen = len;
        /* A large request was consumed: keep the tail and room for a read,
         * not the capacity it needed. */
        if (c->incap > IN_KEEP_CAP && len + READ_CHUNK <= c->incap / 2) {
            char *nb = realloc(c->inbuf, len + READ_CHUNK);
            if (nb != NULL) {
                c->inbuf = nb;
                c->incap = len + READ_CHUNK;
            }
        }
        return 0;
    }
    if (c->incap < len) {
        char *nb = realloc(c->inbuf, len);
        if (nb == NULL)
            return -SLUICE_ENOMEM;
        c->inbuf = nb;
        c->incap = len;
    }
    memcpy(c->inbuf, buf, len);
    c->inlen = len;
    return 0;
}

static void server__on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    struct server_client *c = (struct server_client *)h;
    if (c->inlen == 0) {
        c->in_shared = 1;
        *buf = uv_buf_init(c->srv->shared, sizeof(c->srv->shared));
        return;
    }
    c->in_shared = 0;
    if (c->incap - c->inlen < READ_CHUNK / 4) {
        size_t cap = c->inlen + READ_CHUNK;
        char *nb = realloc(c->inbuf, cap);
        if (nb == NULL) {
            *buf = uv_buf_init(NULL, 0); /* libuv reports UV_ENOBUFS */
            return;
        }
        c->inbuf = nb;
        c->incap = cap;
    }
    *buf = uv_buf_init(c->inbuf + c->inlen, (unsigned)(c->incap - c->inlen));
}

static void server__on_hu_idle(uv_idle_t *h);

/* c's peer hung up (or its socket failed): closed now, or once this turn's
 * close budget (closebudget.h) is spent at a later turn (not read
 * meanwhile). */
static void server__client_hung_up(struct server_client *c)
{
    struct server *s = c->srv;
    if (closebudget_take(&s->closes, !s->turn_init || c->executing)) {
        server__client_close(c);
        return;
    }
    if (c->hung_up || c->closing)
        return;
    if (c->reading) {
        uv_read_stop((uv_stream_t *)&c->h.pipe);
        c->reading = 0;
    }
    c->hung_up = 1;
    s->stats.deferred_closes++;
    c->hu_next = NULL;
    c->hu_prev = s->hu_tail;
    if (s->hu_tail != NULL)
        s->hu_tail->hu_next = c;
    else
        s->hu_head = c;
    s->hu_tail = c;
    uv_idle_start(&s->hu_idle, server__on_hu_idle);
}

static void server__on_hu_idle(uv_idle_t *h)
{
    struct server *s = h->data;
    while (s->hu_head != NULL && closebudget_take(&s->closes, 0)) {
        struct server_client *c = s->hu_head;
        server__client_unqueue(c);
        server__client_close(c);
        server__client_release(c);
    }
    /* Clients read twice last turn: their kept input now, each once. */
    struct server_client *last = s->held_tail;
    while (s->held_head != NULL) {
        struct server_client *c = s->held_head;
        server__client_unhold(c);
        c->read_turn = s->turn + 1; /* this turn's read */
        s->now_ns = uv_hrtime();
        server__client_resume(c); /* executes its input, reads it again */
        server__client_settle(c);
        if (c == last)
            break;
    }
    if (s->hu_head == NULL && s->held_head == NULL)
        uv_idle_stop(h);
}

static void server__on_turn_end(uv_check_t *h)
{
    struct server *s = h->data;
    closebudget_turn_end(&s->closes);
    s->turn++;
}

/* c was read twice this turn: keeps data[0..len) unexecuted for the next
 * turn and stops reading c meanwhile.  0, or -SLUICE_ENOMEM (then c is
 * closed). */
static int server__client_hold(struct server_client *c, const char *data, size_t len)
{
    struct server *s = c->srv;
    if (server__client_keep(c, data, len) < 0) {
        server__client_close(c);
        return -SLUICE_ENOMEM;
    }
    if (c->reading) {
        uv_read_stop((uv_stream_t *)&c->h.pipe);
        c->reading = 0;
    }
    if (!c->held) {
        c->held = 1;
        c->held_next = NULL;
        c->held_prev = s->held_tail;
        if (s->held_tail != NULL)
            s->held_tail->held_next = c;
        else
            s->held_head = c;
        s->held_tail = c;
    }
    s->stats.held_reads++;
    uv_idle_start(&s->hu_idle, server__on_hu_idle);
    server__client_settle(c);
    return 0;
}

static void server__on_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf)
{
    struct server_client *c = (struct server_client *)stream;
    if (nread < 0) {
        server__client_hung_up(c);
        return;
    }
    if (nread == 0)
        return;
    c->srv->now_ns = uv_hrtime();
    c->last_ms = uv_now(c->srv->loop);
    const char *data;
    size_t len;
    if (c->in_shared) {
        data = buf->base;
        len = (size_t)nread;
    } else {
        c->inlen += (size_t)nread;
        data = c->inbuf;
        len = c->inlen;
    }
    struct server *s = c->srv;
    if (s->turn_init && c->read_turn == s->turn + 1) {
        (void)server__client_hold(c, data, len);
        return;
    }
    c->read_turn = s->turn + 1;
    size_t used = server__client_execute(c, data, len);
    if (server__client_keep(c, data + used, len - used) < 0) {
        server__client_close(c);
        return;
    }
    server__client_flush(c);
    server__client_resume(c);
    server__client_settle(c);
}

/*
 * A client is read from even while paused (blocked, or with output backed
 * up), so that a disconnect is noticed and a blocked command cancelled at
 * once; only its queued input is bounded: past in_limit bytes, reading stops
 * until commands are executed again.
 */
static void server__client_update_reading(struct server_client *c)
{
    if (c->closing)
        return;
    int want = c->inlen < c->srv->in_limit && !c->close_after_reply && !c->hung_up && !c->held;
    if (want && !c->reading) {
        if (uv_read_start((uv_stream_t *)&c->h.pipe, server__on_alloc, server__on_read) < 0) {
            server__client_close(c);
            return;
        }
        c->reading = 1;
    } else if (!want && c->reading) {
        uv_read_stop((uv_stream_t *)&c->h.pipe);
        c->reading = 0;
    }
}

/*
 * Executes queued input for as long as the client is not paused, flushing
 * between rounds: a flush that drains the output un-pauses the client, and
 * nothing else would wake it if its peer has nothing more to send.
 */
static void server__client_resume(struct server_client *c)
{
    while (!server__client_paused(c) && c->inlen > 0) {
        c->srv->now_ns = uv_hrtime();
        size_t used = server__client_execute(c, c->inbuf, c->inlen);
        if (server__client_keep(c, c->inbuf + used, c->inlen - used) < 0) {
            server__client_close(c);
            return;
        }
        server__client_flush(c);
        if (used == 0)
            break; /* an incomplete command: wait for more bytes */
    }
    server__client_update_reading(c);
}

void server_client_block(struct server_client *c, server_cancel_fn cancel, void *arg)
{
    c->blocked = 1;
    c->cancel = cancel;
    c->cancel_arg = arg;
}

void server_client_unblock(struct server_client *c)
{
    if (!c->blocked)
        return;
    c->blocked = 0;
    c->cancel = NULL;
    c->cancel_arg = NULL;
    if (c->executing)
        return; /* unblocked by its own handler: the running loop goes on */
    server__client_flush(c);
    if (!c->closing && !c->writing)
        server__client_resume(c);
    server__client_settle(c); /* checks the budget only when called outside a command */
}

/* ---- lifecycle ---- */

static void server__on_client_closed(uv_handle_t *h)
{
    struct server_client *c = (struct server_client *)h;
    resp_parser_free(&c->parser);
    resp_buf_free(&c->out);
    resp_buf_free(&c->wbuf);
    free(c->inbuf);
    free(c->name);
    if (c->ctx_free != NULL)
        c->ctx_free(c->ctx);
    free(c);
}

static void server__client_unhold(struct server_client *c)
{
    if (!c->held)
        return;
    struct server *s = c->srv;
    if (c->held_prev != NULL)
        c->held_prev->held_next = c->held_next;
    else
        s->held_head = c->held_next;
    if (c->held_next != NULL)
        c->held_next->held_prev = c->held_prev;
    else
        s->held_tail = c->held_prev;
    c->held_prev = c->held_next = NULL;
    c->held = 0;
}

static void server__client_unqueue(struct server_client *c)
{
    server__client_unhold(c);
    if (!c->hung_up)
        return;
    struct server *s = c->srv;
    if (c->hu_prev != NULL)
        c->hu_prev->hu_next = c->hu_next;
    else
        s->hu_head = c->hu_next;
    if (c->hu_next != NULL)
        c->hu_next->hu_prev = c->hu_prev;
    else
        s->hu_tail = c->hu_prev;
    c->hu_prev = c->hu_next = NULL;
    c->hung_up = 0;
}

static void server__client_close(struct server_client *c)
{
    if (c->closing)
        return;
    server__client_unqueue(c);
    c->closing = 1;
    log_debug("client %llu: closed", (unsigned long long)c->id);
    if (c->blocked) {
        c->blocked = 0;
        if (c->cancel != NULL)
            c->cancel(c, c->cancel_arg);
    }
    if (c->on_close != NULL) {
        server_close_fn fn = c->on_close;
        c->on_close = NULL;
        fn(c, c->on_close_arg);
    }
    struct server *s = c->srv;
    if (c->prev)
        c->prev->next = c->next;
    else
        s->clients = c->next;
    if (c->next)
        c->next->prev = c->prev;
    s->stats.connected_clients--;
    if (c->tcp)
        s->stats.tcp_clients--;
    clientmem_charge(&s->pool, c->mem, 0);
    c->mem = 0;
    uv_close((uv_handle_t *)&c->h.pipe, server__on_client_closed);
}

/* One line per MEM_LOG_INTERVAL_MS about TCP clients closed for a
 * newcomer or over a deadline since the last line. */
static void server__tcp_log(struct server *s)
{
    if (s->tcp_unlogged_evictions == 0 && s->tcp_unlogged_timeouts == 0)
        return;
    uint64_t now_ms = uv_now(s->loop);
    if (s->tcp_logged_at != 0 && now_ms - s->tcp_logged_at < MEM_LOG_INTERVAL_MS)
        return; /* the sweep logs them later */
    log_warn("TCP listener: closed %llu clients for newcomers over --max-tcp-clients (%zu) and "
             "%llu that did not AUTH within %llu ms or sat idle; %llu and %llu so far",
             (unsigned long long)s->tcp_unlogged_evictions, s->max_tcp_clients,
             (unsigned long long)s->tcp_unlogged_timeouts,
             (unsigned long long)s->tcp_auth_timeout_ms, (unsigned long long)s->stats.tcp_evictions,
             (unsigned long long)s->stats.tcp_timeouts);
    s->tcp_logged_at = now_ms;
    s->tcp_unlogged_evictions = s->tcp_unlogged_timeouts = 0;
}

/*
 * The TCP listener is full and newcomer just came: closes the worst other
 * TCP client, one that has not authenticated (oldest first) when AUTH is
 * required, else the one idle longest.  A newcomer is never refused, so a
 * crowd of silent connections cannot keep a real client out: it displaces
 * them, and having authenticated it outranks them all.
 */
static void server__tcp_evict(struct server *s, struct server_client *newcomer)
{
    struct server_client *worst = NULL;
    for (struct server_client *c = s->clients; c != NULL; c = c->next) {
        if (!c->tcp || c == newcomer || c->closing)
            continue;
        if (worst == NULL) {
            worst = c;
            continue;
        }
        int cu = s->tcp_auth && !c->authed, wu = s->tcp_auth && !worst->authed;
        if (cu != wu) {
            if (cu)
                worst = c;
        } else if (cu ? c->born_ms < worst->born_ms : c->last_ms < worst->last_ms) {
            worst = c;
        }
    }
    if (worst == NULL)
        return;
    s->stats.tcp_evictions++;
    s->tcp_unlogged_evictions++;
    log_debug("client %llu: closed for a newcomer over --max-tcp-clients",
              (unsigned long long)worst->id);
    server__client_close(worst);
    if (!worst->executing)
        server__client_release(worst);
    server__tcp_log(s);
}

/* Once a second: TCP clients past their AUTH deadline or idle too long. */
static void server__on_tcp_sweep(uv_timer_t *t)
{
    struct server *s = t->data;
    uint64_t now = uv_now(s->loop);
    struct server_client *next;
    for (struct server_client *c = s->clients; c != NULL; c = next) {
        next = c->next;
        if (!c->tcp || c->closing || c->executing)
            continue;
        int late = s->tcp_auth && !c->authed && now - c->born_ms >= s->tcp_auth_timeout_ms;
        int idle = s->tcp_idle_timeout_ms != 0 && !c->blocked &&
                   now - c->last_ms >= s->tcp_idle_timeout_ms;
        if (!late && !idle)
            continue;
        s->stats.tcp_timeouts++;
        s->tcp_unlogged_timeouts++;
        log_debug("client %llu: %s, closing", (unsigned long long)c->id,
                  late ? "no AUTH in time" : "idle");
        server__client_close(c);
        server__client_release(c);
    }
    server__tcp_log(s);
}

/* A new client on either listener: accepted into c's handle (initialised
 * by the caller), then set up.  Frees c on failure. */
static void server__accept(struct server *s, uv_stream_t *listener, struct server_client *c);

/* A connection on the Unix socket (tcp 0) or the TCP listener (tcp 1). */
static void server__new_client(uv_stream_t *listener, int status, int tcp)
{
    struct server *s = listener->data;
    if (status < 0 || s->closing)
        return;
    if (!acceptgate_admit(tcp ? &s->tcp_gate : &s->gate))
        return; /* accepted at the next turn */
    struct server_client *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return;
    if ((tcp ? uv_tcp_init(s->loop, &c->h.tcp) : uv_pipe_init(s->loop, &c->h.pipe, 0)) < 0) {
        free(c);
        return;
    }
    c->tcp = tcp ? 1 : 0;
    server__accept(s, listener, c);
    if (tcp && !c->closing)
        uv_tcp_nodelay(&c->h.tcp, 1);
}

static void server__on_connection(uv_stream_t *listener, int status)
{
    server__new_client(listener, status, 0);
}

static void server__on_tcp_connection(uv_stream_t *listener, int status)
{
    server__new_client(listener, status, 1);
}

static void server__accept(struct server *s, uv_stream_t *listener, struct server_client *c)
{
    c->srv = s;
    if (uv_accept(listener, (uv_stream_t *)&c->h.pipe) < 0) {
        uv_close((uv_handle_t *)&c->h.pipe, server__on_client_closed);
        return;
    }
    resp_parser_init(&c->parser, s->max_request, s->max_args);
    c->id = s->next_id++;
    s->stats.total_connections++;
    c->next = s->clients;
    if (s->clients)
        s->clients->prev = c;
    s->clients = c;
    s->stats.connected_clients++;
    c->born_ms = c->last_ms = uv_now(s->loop);
    if (c->tcp) {
        s->stats.tcp_clients++;
        if (s->stats.tcp_clients > s->max_tcp_clients)
            server__tcp_evict(s, c);
    } else if (s->stats.connected_clients - s->stats.tcp_clients > s->max_clients) {
        s->stats.rejected_connections++;
        /* An operator needs to see this, but a flood must not flood the log:
         * one line a minute, with the count since the last one. */
        uint64_t now_ms = uv_now(s->loop);
        if (s->refused_logged_at == 0 || now_ms - s->refused_logged_at >= 60000) {
            log_warn("refusing clients: %zu connected is --max-clients (%llu refused since the "
                     "last such line)",
                     s->max_clients,
                     (unsigned long long)(s->stats.rejected_connections - s->refused_logged));
            s->refused_logged_at = now_ms;
            s->refused_logged = s->stats.rejected_connections;
        }
        resp_add_error(&c->out, "ERR max number of clients reached");
        c->close_after_reply = 1;
        server__client_flush(c);
        return;
    }
    if (uv_read_start((uv_stream_t *)&c->h.pipe, server__on_alloc, server__on_read) < 0) {
        server__client_close(c);
        return;
    }
    c->reading = 1;
    log_debug("client %llu: connected", (unsigned long long)c->id);
    server__client_settle(c);
}

/*
 * Decides what to do with an existing file at the socket path: unlink it if
 * it is a socket nobody listens on; refuse if someone answers or it is not a
 * socket.  Returns 0 when the path is free.
 */
static int server__clear_stale(struct server *s)
{
    struct stat st, ds;
    char dir[sizeof(((struct sockaddr_un *)0)->sun_path)];
    snprintf(dir, sizeof(dir), "%s", s->path);
    char *slash = strrchr(dir, '/');
    if (slash == NULL)
        snprintf(dir, sizeof(dir), ".");
    else
        *(slash == dir ? slash + 1 : slash) = '\0';
    if (stat(dir, &ds) < 0) {
        snprintf(s->err, sizeof(s->err), "socket directory %s: %s", dir, strerror(errno));
        return -SLUICE_EIO;
    }
    /* Where others may create files and the directory is not sticky, they
     * could replace the socket with their own, and clients would believe
     * its answers. */
    int sticky = (ds.st_mode & S_ISVTX) != 0;
    if ((ds.st_mode & (S_IWGRP | S_IWOTH)) != 0 && !sticky) {
        snprintf(s->err, sizeof(s->err),
                 "socket directory %s is writable by others (mode %04o) and not sticky: anyone "
                 "could replace the socket; use a private directory",
                 dir, (unsigned)(ds.st_mode & 07777));
        return -SLUICE_EEXIST;
    }
    if (lstat(s->path, &st) < 0) {
        if (errno == ENOENT)
            return 0;
        snprintf(s->err, sizeof(s->err), "cannot stat %s: %s", s->path, strerror(errno));
        return -SLUICE_EIO;
    }
    if (!S_ISSOCK(st.st_mode)) {
        snprintf(s->err, sizeof(s->err), "%s exists and is not a socket; refusing to replace it",
                 s->path);
        return -SLUICE_EEXIST;
    }
    /* In a shared sticky directory (/tmp), a socket that is not ours was
     * put there by someone else, first: a squatter. */
    if (sticky && (ds.st_mode & (S_IWGRP | S_IWOTH)) != 0 && st.st_uid != geteuid()) {
        snprintf(s->err, sizeof(s->err),
                 "%s belongs to uid %lu, not to this user: another user bound it first; "
                 "refusing to start (use a private directory)",
                 s->path, (unsigned long)st.st_uid);
        return -SLUICE_EEXIST;
    }
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    if (fd < 0) {
        snprintf(s->err, sizeof(s->err), "socket: %s", strerror(errno));
        return -SLUICE_EIO;
    }
    struct sockaddr_un sun;
    memset(&sun, 0, sizeof(sun));
    sun.sun_family = AF_UNIX;
    memcpy(sun.sun_path, s->path, strlen(s->path) + 1);
    int rc = connect(fd, (struct sockaddr *)&sun, sizeof(sun));
    int err = errno;
    close(fd);
    if (rc == 0) {
        snprintf(s->err, sizeof(s->err),
                 "another daemon is listening on %s; refusing to start (stop it or use --socket)",
                 s->path);
        return -SLUICE_EEXIST;
    }
    if (err != ECONNREFUSED) {
        snprintf(s->err, sizeof(s->err), "cannot probe existing socket %s: %s", s->path,
                 strerror(err));
        return -SLUICE_EIO;
    }
    if (unlink(s->path) < 0 && errno != ENOENT) {
        snprintf(s->err, sizeof(s->err), "cannot remove stale socket %s: %s", s->path,
                 strerror(errno));
        return -SLUICE_EIO;
    }
    log_info("removed stale socket %s", s->path);
    return 0;
}

int server_start(struct server *s)
{
    int rc = server__clear_stale(s);
    if (rc < 0)
        return rc;
    uv_timer_init(s->loop, &s->housekeep);
    s->housekeep.data = s;
    s->housekeep_init = 1;
    uv_pipe_init(s->loop, &s->listener, 0);
    s->listener.data = s;
    s->listening = 1;
    /* Create the file owner-only, then widen to the requested mode: no window
     * in which the umask's permissions apply. */
    mode_t old = umask(0177);
    rc = uv_pipe_bind(&s->listener, s->path);
    umask(old);
    if (rc < 0) {
        snprintf(s->err, sizeof(s->err), "cannot bind %s: %s", s->path, uv_strerror(rc));
        return -SLUICE_EIO;
    }
    s->bound = 1;
    /* Group first, mode second: the socket never has group access for the
     * wrong group. */
    if (s->set_gid && chown(s->path, (uid_t)-1, (gid_t)s->gid) < 0) {
        snprintf(s->err, sizeof(s->err), "cannot set group %u on %s: %s", s->gid, s->path,
                 strerror(errno));
        return -SLUICE_EIO;
    }
    if (chmod(s->path, (mode_t)s->mode) < 0) {
        snprintf(s->err, sizeof(s->err), "cannot chmod %s: %s", s->path, strerror(errno));
        return -SLUICE_EIO;
    }
    if (acceptgate_init(&s->gate, s->loop, (uv_stream_t *)&s->listener, server__on_connection, 0) <
        0) {
        snprintf(s->err, sizeof(s->err), "cannot start the accept budget");
        return -SLUICE_EIO;
    }
    if (uv_idle_init(s->loop, &s->hu_idle) != 0) {
        snprintf(s->err, sizeof(s->err), "cannot start the turn budget");
        return -SLUICE_EIO;
    }
    if (uv_check_init(s->loop, &s->turn_end) != 0) {
        uv_close((uv_handle_t *)&s->hu_idle, NULL);
        snprintf(s->err, sizeof(s->err), "cannot start the turn budget");
        return -SLUICE_EIO;
    }
    s->hu_idle.data = s;
    s->turn_end.data = s;
    uv_check_start(&s->turn_end, server__on_turn_end);
    uv_unref((uv_handle_t *)&s->turn_end);
    s->turn_init = 1;
    rc = uv_listen((uv_stream_t *)&s->listener, TCP_LISTEN_BACKLOG, server__on_connection);
    if (rc < 0) {
        snprintf(s->err, sizeof(s->err), "cannot listen on %s: %s", s->path, uv_strerror(rc));
        return -SLUICE_EIO;
    }
    if (s->tcp_bind != NULL) {
        char err[200];
        rc = tcp_listen(s->loop, &s->tcp_listener, s->tcp_bind, server__on_tcp_connection,
                        &s->tcp_open, &s->tcp_port, &s->tcp_loopback, err, sizeof(err));
        s->tcp_listener.data = s;
        if (rc < 0) {
            snprintf(s->err, sizeof(s->err), "listen: %s", err);
            return rc;
        }
        if (acceptgate_init(&s->tcp_gate, s->loop, (uv_stream_t *)&s->tcp_listener,
                            server__on_tcp_connection, 0) < 0) {
            snprintf(s->err, sizeof(s->err), "cannot start the accept budget");
            return -SLUICE_EIO;
        }
        if (s->tcp_auth || s->tcp_idle_timeout_ms != 0) {
            uv_timer_init(s->loop, &s->tcp_sweep);
            s->tcp_sweep.data = s;
            s->tcp_sweep_init = 1;
            uv_timer_start(&s->tcp_sweep, server__on_tcp_sweep, 1000, 1000);
            uv_unref((uv_handle_t *)&s->tcp_sweep);
        }
    }
    /* A measure that cannot start is no reason to refuse clients. */
    if (loopstat_start(&s->loop_stat, s->loop) < 0)
        log_warn("cannot measure the event loop's turns (loop_max_turn_us stays 0)");
    return 0;
}

int server_tcp_port(const struct server *s)
{
    return s->tcp_port;
}

int server_tcp_loopback(const struct server *s)
{
    return s->tcp_loopback;
}

int server_client_is_tcp(const struct server_client *c)
{
    return c != NULL && c->tcp;
}

int server_client_authed(const struct server_client *c)
{
    return c == NULL || c->authed;
}

void server_client_set_authed(struct server_client *c)
{
    if (c != NULL)
        c->authed = 1;
}

void server_close(struct server *s)
{
    if (s->closing)
        return;
    s->closing = 1;
    while (s->clients != NULL)
        server__client_close(s->clients);
    if (s->housekeep_init)
        uv_close((uv_handle_t *)&s->housekeep, NULL);
    if (s->trimming)
        (void)uv_cancel((uv_req_t *)&s->trim_req); /* else the loop waits for it */
    loopstat_stop(&s->loop_stat);
    if (s->tcp_sweep_init)
        uv_close((uv_handle_t *)&s->tcp_sweep, NULL);
    acceptgate_close(&s->gate);
    acceptgate_close(&s->tcp_gate);
    if (s->turn_init) {
        s->turn_init = 0;
        uv_close((uv_handle_t *)&s->hu_idle, NULL);
        uv_close((uv_handle_t *)&s->turn_end, NULL);
    }
    if (s->listening)
        uv_close((uv_handle_t *)&s->listener, NULL);
    if (s->tcp_open)
        uv_close((uv_handle_t *)&s->tcp_listener, NULL);
    if (s->bound)
        unlink(s->path);
}

void server_destroy(struct server *s)
{
    if (s == NULL)
        return;
    free(s->path);
    free(s->tcp_bind);
    free(s);
}

static const struct counter_row server__client_rows[] = {
    COUNTER_ROW(struct server_stats, connected_clients, "connected_clients", "connected_clients",
                COUNTER_GAUGE, "Client connections open on the socket."),
    COUNTER_ROW(struct server_stats, client_memory, "client_memory", "client_memory_bytes",
                COUNTER_GAUGE, "Bytes held by client connections' buffers."),
};
const struct counter_table server_client_counters = COUNTER_TABLE(server__client_rows);

static const struct counter_row server__command_rows[] = {
    COUNTER_ROW(struct server_stats, total_connections, "total_connections_received",
                "connections_total", COUNTER_TOTAL,
                "Client connections accepted, refused ones included."),
    COUNTER_ROW(struct server_stats, total_commands, "total_commands_processed", "commands_total",
                COUNTER_TOTAL, "Commands executed."),
    COUNTER_ROW(struct server_stats, rejected_connections, "rejected_connections",
                "rejected_connections_total", COUNTER_TOTAL,
                "Client connections refused over max_clients."),
    COUNTER_ROW(struct server_stats, protocol_errors, "protocol_errors", "protocol_errors_total",
                COUNTER_TOTAL, "Connections closed for malformed or oversized requests."),
    COUNTER_ROW(struct server_stats, output_limit_disconnects, "output_limit_disconnects",
                "output_limit_disconnects_total", COUNTER_TOTAL,
                "Clients disconnected for not reading their replies (output hard limit)."),
    COUNTER_ROW(struct server_stats, client_memory_disconnects, "client_memory_disconnects",
                "client_memory_disconnects_total", COUNTER_TOTAL,
                "Clients disconnected, heaviest first, because client memory was over "
                "max_client_memory."),
    COUNTER_ROW(struct server_stats, memory_trims, "memory_trims", "memory_trims_total",
                COUNTER_TOTAL,
                "Times freed client memory was returned to the system (malloc_trim, in the thread "
                "pool, at most 1% of the time)."),
    COUNTER_ROW(struct server_stats, memory_trim_ms, "memory_trim_ms",
                "memory_trim_milliseconds_total", COUNTER_TOTAL,
                "The time those returns took, in ms (in the thread pool, off the event loop)."),
    COUNTER_ROW(struct server_stats, held_reads, "held_reads", "held_reads_total", COUNTER_TOTAL,
                "Client reads kept for the next event loop turn (a client is executed one read a "
                "turn)."),
    COUNTER_ROW(struct server_stats, deferred_closes, "deferred_closes", "deferred_closes_total",
                COUNTER_TOTAL,
                "Clients that hung up closed at a later event loop turn (64 are closed a turn)."),
    COUNTER_ROW(struct server_stats, loop_turns, "loop_turns", "loop_turns_total", COUNTER_TOTAL,
                "Event loop turns measured (sluice_loop_turn_seconds has their work)."),
    COUNTER_ROW(struct server_stats, loop_max_turn_us, "loop_max_turn_us",
                "loop_max_turn_microseconds", COUNTER_GAUGE,
                "The longest event loop turn's work since start or CONFIG RESETSTAT, in us."),
    COUNTER_ROW(struct server_stats, loop_max_turn_cpu_us, "loop_max_turn_cpu_us",
                "loop_max_turn_cpu_microseconds", COUNTER_GAUGE,
                "The most CPU time one event loop turn used (of a sample of the turns, and every "
                "long one) since start or CONFIG RESETSTAT, in us (below loop_max_turn_us when "
                "the thread waited for a CPU)."),
};
const struct counter_table server_command_counters = COUNTER_TABLE(server__command_rows);

static const struct counter_row server__tcp_rows[] = {
    COUNTER_ROW(struct server_stats, tcp_clients, "tcp_clients", "tcp_clients", COUNTER_GAUGE,
                "RESP clients connected over TCP (--listen)."),
    COUNTER_ROW(struct server_stats, tcp_evictions, "tcp_evictions", "tcp_evictions_total",
                COUNTER_TOTAL,
                "TCP clients closed for a newcomer over --max-tcp-clients (unauthenticated "
                "first, then the longest idle)."),
    COUNTER_ROW(struct server_stats, tcp_timeouts, "tcp_timeouts", "tcp_timeouts_total",
                COUNTER_TOTAL,
                "TCP clients closed without AUTH in 10 s or idle past --tcp-idle-timeout."),
};
const struct counter_table server_tcp_counters = COUNTER_TABLE(server__tcp_rows);
