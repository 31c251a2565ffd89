/* log: timestamped, levelled lines on stderr (see log.h). */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "sluice/error.h"

static enum log_level current_level = LOG_INFO;

static const char *const level_names[] = {"debug", "info ", "warn ", "error"};

void log_set_level(enum log_level level)
{
    current_level = level;
}

int log_parse_level(const char *name, enum log_level *level)
{
    static const struct {
        const char *name;
        enum log_level level;
    } names[] = {{"debug", LOG_DEBUG},  {"info", LOG_INFO},   {"warn", LOG_WARN},
                 {"warning", LOG_WARN}, {"error", LOG_ERROR}, {"off", LOG_OFF}};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        if (strcasecmp(name, names[i].name) == 0) {
            *level = names[i].level;
            return 0;
        }
    }
    return -SLUICE_EINVAL;
}

void log_msg(enum log_level level, const char *fmt, ...)
{
    if (level < current_level || level >= LOG_OFF)
        return;
    /* Build the whole line first so concurrent writers (other processes on
     * the same terminal) never interleave within a line. */
    char line[1024];
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    size_t n = strftime(line, sizeof(line), "%Y-%m-%dT%H:%M:%SZ ", &tm);
    n += (size_t)snprintf(line + n, sizeof(line) - n, "%s ", level_names[level]);
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof(line) - n - 1, fmt, ap);
    va_end(ap);
    if (m < 0)
        return;
    n += (size_t)m;
    if (n > sizeof(line) - 2)
        n = sizeof(line) - 2;
    line[n++] = '\n';
    fwrite(line, 1, n, stderr);
}
