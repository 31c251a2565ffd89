/*
 * file: bounded reads of regular files (see file.h).
 */
#include "file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sluice/error.h"

int file_read_regular(const char *path, size_t max, char **out, size_t *len, struct stat *st,
                      char *err, size_t errlen)
{
    struct stat sb;
    if (errlen > 0)
        err[0] = '\0';
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return -SLUICE_EIO;
    }
    if (fstat(fd, &sb) < 0) {
        snprintf(err, errlen, "%s: cannot stat: %s", path, strerror(errno));
        close(fd);
        return -SLUICE_EIO;
    }
    if (!S_ISREG(sb.st_mode)) {
        snprintf(err, errlen, "%s: not a regular file (a FIFO or device would block the daemon)",
                 path);
        close(fd);
        return -SLUICE_EINVAL;
    }
    if (sb.st_size < 0 || (unsigned long long)sb.st_size > max) {
        snprintf(err, errlen, "%s: larger than %zu bytes", path, max);
        close(fd);
        return -SLUICE_ETOOBIG;
    }
    size_t want = (size_t)sb.st_size, got = 0;
    char *buf = malloc(want + 1);
    if (buf == NULL) {
        snprintf(err, errlen, "%s: out of memory", path);
        close(fd);
        return -SLUICE_ENOMEM;
    }
    /* A file that grows while read is cut at the size fstat gave. */
    while (got < want) {
        ssize_t n = read(fd, buf + got, want - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            snprintf(err, errlen, "%s: cannot read: %s", path, strerror(errno));
            free(buf);
            close(fd);
            return -SLUICE_EIO;
        }
        if (n == 0)
            break; /* shrank meanwhile: what is there */
        got += (size_t)n;
    }
    close(fd);
    buf[got] = '\0';
    *out = buf;
    *len = got;
    if (st != NULL)
        *st = sb;
    return 0;
}

int file_same(const struct stat *a, const struct stat *b)
{
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_size == b->st_size &&
           a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec &&
           a->st_ctim.tv_sec == b->st_ctim.tv_sec && a->st_ctim.tv_nsec == b->st_ctim.tv_nsec;
}
