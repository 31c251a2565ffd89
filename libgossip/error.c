/* gossip_strerror: one string per code of enum gossip_err. */
#include "gossip/error.h"

static const char *const error_strings[GOSSIP_ERR_MAX_] = {
    [GOSSIP_OK] = "success",
    [GOSSIP_EINVAL] = "invalid argument",
    [GOSSIP_ENOMEM] = "out of memory",
    [GOSSIP_EPROTO] = "malformed packet",
    [GOSSIP_ETOOBIG] = "too large",
    [GOSSIP_EAUTH] = "authentication failed",
    [GOSSIP_ENOKEY] = "unknown key id",
    [GOSSIP_EVERSION] = "unsupported wire version",
    [GOSSIP_EREPLAY] = "replayed or stale packet",
    [GOSSIP_EFULL] = "queue or table full",
    [GOSSIP_ENOENT] = "no such member",
    [GOSSIP_EIO] = "system call failed",
    [GOSSIP_ESTATE] = "invalid in current state",
    [GOSSIP_EEXIST] = "already exists",
};

const char *gossip_strerror(int err)
{
    if (err < 0)
        err = -err;
    if (err >= GOSSIP_ERR_MAX_ || error_strings[err] == 0)
        return "unknown error";
    return error_strings[err];
}
