/*
 * The default socket path, in order: $SLUICE_SOCKET, /run/sluice (when it
 * exists), $XDG_RUNTIME_DIR/sluice (an absolute one), /tmp/sluice-UID;
 * never the shared /tmp/sluice.sock another user could bind first.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "sluice/client.h"

static void test_default_order(void **unused)
{
    (void)unused;
    char want[128];
    setenv("SLUICE_SOCKET", "/srv/app/s.sock", 1);
    setenv("XDG_RUNTIME_DIR", "/run/user/1000", 1);
    assert_string_equal(sluice_client_default_path(), "/srv/app/s.sock");
    unsetenv("SLUICE_SOCKET");
    struct stat st;
    if (stat("/run/sluice", &st) == 0 && S_ISDIR(st.st_mode)) {
        assert_string_equal(sluice_client_default_path(), "/run/sluice/sluice.sock");
        skip(); /* the rest of the order is hidden by a system set-up */
    }
    assert_string_equal(sluice_client_default_path(), "/run/user/1000/sluice/sluice.sock");
    /* An empty SLUICE_SOCKET counts as unset; a relative XDG dir is not used. */
    setenv("SLUICE_SOCKET", "", 1);
    setenv("XDG_RUNTIME_DIR", "relative/dir", 1);
    snprintf(want, sizeof(want), "/tmp/sluice-%lu/sluice.sock", (unsigned long)geteuid());
    assert_string_equal(sluice_client_default_path(), want);
    unsetenv("XDG_RUNTIME_DIR");
    assert_string_equal(sluice_client_default_path(), want);
    assert_string_not_equal(sluice_client_default_path(), "/tmp/sluice.sock");
    /* An XDG dir too long for a socket path falls back as well. */
    char longdir[200];
    memset(longdir, 'x', sizeof(longdir) - 1);
    longdir[0] = '/';
    longdir[sizeof(longdir) - 1] = '\0';
    setenv("XDG_RUNTIME_DIR", longdir, 1);
    assert_string_equal(sluice_client_default_path(), want);
    unsetenv("XDG_RUNTIME_DIR");
    unsetenv("SLUICE_SOCKET");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_default_order),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
