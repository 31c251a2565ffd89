/* sluice_strerror: one string per code of enum sluice_err. */
#include "sluice/error.h"

static const char *const error_strings[SLUICE_ERR_MAX_] = {
    [SLUICE_OK] = "success",
    [SLUICE_EINVAL] = "invalid argument",
    [SLUICE_ENOMEM] = "out of memory",
    [SLUICE_ERANGE] = "value out of range",
    [SLUICE_EFULL] = "table or queue full",
    [SLUICE_ENOENT] = "no such key",
    [SLUICE_EPROTO] = "protocol error",
    [SLUICE_ETOOBIG] = "input too large",
    [SLUICE_EAGAIN] = "incomplete input",
    [SLUICE_EIO] = "system call failed",
    [SLUICE_ECONFIG] = "invalid configuration",
    [SLUICE_EEXIST] = "already exists",
    [SLUICE_ECANCELED] = "operation cancelled",
    [SLUICE_ETIMEDOUT] = "deadline passed",
};

const char *sluice_strerror(int err)
{
    if (err < 0)
        err = -err;
    if (err >= SLUICE_ERR_MAX_ || error_strings[err] == 0)
        return "unknown error";
    return error_strings[err];
}
