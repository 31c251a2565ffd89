/*
 * Fuzz target: the C client's reply parser.  The input is what a (hostile)
 * server sends back after one command, delivered through a socketpair and
 * followed by EOF.  The client must return a reply tree or an error, never
 * crash, loop or leak.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "sluice/client.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
const char *const *fuzz_seed_inputs(size_t **lens);

static const char *const seeds[] = {
    "*5\r\n:0\r\n:16\r\n:15\r\n:-1\r\n:2\r\n",
    "+PONG\r\n",
    "-ERR unknown command\r\n",
    "$5\r\nhello\r\n",
    "$-1\r\n",
    "*2\r\n*1\r\n$1\r\na\r\n*-1\r\n",
    "*3\r\n$0\r\n\r\n:9223372036854775807\r\n+OK\r\n",
    NULL,
};
const char *const *fuzz_seed_inputs(size_t **lens)
{
    (void)lens; /* text seeds: the driver takes their strlen */
    return seeds;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) < 0)
        abort();
    /* The driver's inputs are at most a few KiB: they fit the socket buffer. */
    size_t off = 0;
    while (off < size) {
        ssize_t w = write(sv[1], data + off, size - off);
        if (w <= 0)
            break;
        off += (size_t)w;
    }
    shutdown(sv[1], SHUT_WR);
    struct sluice_client *c;
    if (sluice_client_from_fd(sv[0], &c) < 0)
        abort();
    const char *argv[] = {"PING"};
    struct sluice_reply *r = NULL;
    if (sluice_client_command(c, 1, argv, NULL, &r) == 0)
        sluice_reply_free(r);
    sluice_client_close(c);
    close(sv[1]);
    return 0;
}
