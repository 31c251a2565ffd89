/*
 * file: reading a whole configuration-sized file without ever blocking the
 * event loop on something that is not a file.
 *
 * A FIFO, a device or a socket given where a config, YAML or key file is
 * expected would block a plain open/read (a FIFO's open waits for a
 * writer) and hang every client of the daemon.  file_read_regular opens
 * with O_NONBLOCK, refuses anything but a regular file, bounds the size,
 * and reads what fstat promised.
 */
#ifndef SLUICE_FILE_H
#define SLUICE_FILE_H

#include <stddef.h>
#include <sys/stat.h>

/*
 * Reads the regular file at path, at most max bytes, into a new buffer
 * (*out, NUL-terminated, *len bytes before the NUL; the caller frees it).
 * st, when not NULL, receives the file's fstat (its identity and mtime, for
 * telling a changed file from the same one).  Fails with -SLUICE_EIO
 * (cannot open or read; errno's text in err), -SLUICE_EINVAL (not a
 * regular file), -SLUICE_ETOOBIG (over max) or -SLUICE_ENOMEM, writing
 * "PATH: reason" into err (errlen bytes); nothing is allocated on failure.
 */
int file_read_regular(const char *path, size_t max, char **out, size_t *len, struct stat *st,
                      char *err, size_t errlen);

/* 1 when a and b are the same file with the same size and modification
 * time (nothing to reload), else 0. */
int file_same(const struct stat *a, const struct stat *b);

#endif
