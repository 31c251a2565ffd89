/*
 * log: one readable line per event on stderr,
 *
 *   2026-11-22T10:00:00Z info  listening on /run/sluice/sluice.sock
 *
 * UTC timestamps so lines from several hosts sort together.  Messages below
 * the configured level cost one comparison.  Never fails: a line that cannot
 * be written is dropped.  Not thread-safe by design: the daemon logs from its
 * event-loop thread only.
 */
#ifndef SLUICE_LOG_H
#define SLUICE_LOG_H

enum log_level { LOG_DEBUG = 0, LOG_INFO = 1, LOG_WARN = 2, LOG_ERROR = 3, LOG_OFF = 4 };

/* Messages below level are dropped (default LOG_INFO). */
void log_set_level(enum log_level level);
/* Parses "debug", "info", "warn"/"warning", "error", "off".  Returns 0 or
 * -SLUICE_EINVAL for an unknown name (level untouched). */
int log_parse_level(const char *name, enum log_level *level);
void log_msg(enum log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_debug(...) log_msg(LOG_DEBUG, __VA_ARGS__)
#define log_info(...)  log_msg(LOG_INFO, __VA_ARGS__)
#define log_warn(...)  log_msg(LOG_WARN, __VA_ARGS__)
#define log_error(...) log_msg(LOG_ERROR, __VA_ARGS__)

#endif
