/*
 * sluice client: a small blocking client for the daemon's Unix socket.
 *
 * It speaks RESP2, so it also works against any Redis server.  One client is
 * one connection, used from one thread at a time.  Errors are returned as
 * negative sluice_err codes (sluice/error.h); an error REPLY from the server
 * is not a failure of the call: it comes back as a reply of type
 * SLUICE_REPLY_ERROR.
 *
 * Ownership: sluice_client_connect() returns a client the caller frees with
 * sluice_client_close(); sluice_client_command() returns a reply tree the
 * caller frees with sluice_reply_free() (which frees the whole tree).
 */
#ifndef SLUICE_CLIENT_H
#define SLUICE_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct sluice_client;

enum sluice_reply_type {
    SLUICE_REPLY_STRING = 1, /* bulk string: str/len */
    SLUICE_REPLY_STATUS = 2, /* simple string (+OK): str/len */
    SLUICE_REPLY_ERROR = 3,  /* error (-ERR ...): str/len, without the '-' */
    SLUICE_REPLY_INTEGER = 4,
    SLUICE_REPLY_NIL = 5,
    SLUICE_REPLY_ARRAY = 6, /* elements/nelem */
};

struct sluice_reply {
    enum sluice_reply_type type;
    int64_t integer;
    char *str; /* NUL-terminated copy for the string types */
    size_t len;
    struct sluice_reply **elements;
    size_t nelem;
};

/* The socket path used when none is given: $SLUICE_SOCKET if set, else
 * /run/sluice/sluice.sock if the directory /run/sluice exists (a system
 * daemon), else $XDG_RUNTIME_DIR/sluice/sluice.sock if that variable holds
 * an absolute path, else /tmp/sluice-UID/sluice.sock (UID the effective
 * user's): directories only the daemon's user can create in, never a name
 * in /tmp that another user could bind first.  Static (per thread) or
 * environment storage, valid until the next call: do not free. */
const char *sluice_client_default_path(void);

/* Connects to the Unix socket at path (NULL: the default path, which is
 * then refused with errno EPERM unless its directory is ours or root's with
 * mode 0700 - or is /run/sluice, which only root can have made - and the
 * process answering runs as us, root or /run/sluice's owner (SO_PEERCRED)).
 * A path named explicitly is the caller's choice and is not checked.  Fails with -SLUICE_EINVAL
 * (path too long), -SLUICE_EIO (cannot connect, or refused; errno is kept), -SLUICE_ENOMEM. */
int sluice_client_connect(const char *path, struct sluice_client **out);
/* Wraps an already connected stream socket (a socketpair in tests, a socket
 * passed by a supervisor).  On success the client owns fd and closes it in
 * sluice_client_close(); on failure (-SLUICE_EINVAL for fd < 0,
 * -SLUICE_ENOMEM) the caller still owns it. */
int sluice_client_from_fd(int fd, struct sluice_client **out);
void sluice_client_close(struct sluice_client *c);

/*
 * Sends one command (argc arguments; argvlen may be NULL for NUL-terminated
 * argv) and waits for its reply.  Fails with -SLUICE_EIO (connection lost),
 * -SLUICE_EPROTO (unparseable reply), -SLUICE_ENOMEM.
 */
int sluice_client_command(struct sluice_client *c, int argc, const char *const *argv,
                          const size_t *argvlen, struct sluice_reply **reply);

void sluice_reply_free(struct sluice_reply *r);

#ifdef __cplusplus
}
#endif
#endif
