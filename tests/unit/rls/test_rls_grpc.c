/*
 * gRPC framing and grpc-timeout (node/rls/grpc.c): whole frames at every
 * split point, the size bound decided from the prefix alone, the compressed
 * flag refused, and the timeout units of the gRPC over HTTP/2 spec.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "rls/grpc.h"
#include "rls/service.h"
#include "sluice/error.h"

static void test_frame_split_points(void **state)
{
    (void)state;
    uint8_t buf[64];
    const char body[] = "hello, rate limit";
    size_t n = sizeof(body) - 1;
    rls_grpc_prefix(buf, n);
    memcpy(buf + RLS_GRPC_PREFIX, body, n);
    const uint8_t *msg;
    size_t len, used;
    for (size_t cut = 0; cut < RLS_GRPC_PREFIX + n; cut++)
        assert_int_equal(rls_grpc_frame(buf, cut, 1024, &msg, &len, &used), -SLUICE_EAGAIN);
    assert_int_equal(rls_grpc_frame(buf, RLS_GRPC_PREFIX + n + 3, 1024, &msg, &len, &used), 0);
    assert_int_equal(len, n);
    assert_int_equal(used, RLS_GRPC_PREFIX + n);
    assert_memory_equal(msg, body, n);
    /* an empty message is a message */
    rls_grpc_prefix(buf, 0);
    assert_int_equal(rls_grpc_frame(buf, RLS_GRPC_PREFIX, 1024, &msg, &len, &used), 0);
    assert_int_equal(len, 0);
}

static void test_frame_bounds_and_flags(void **state)
{
    (void)state;
    const uint8_t big[] = {0, 0, 1, 0, 1}; /* 65537 bytes declared */
    const uint8_t *msg;
    size_t len, used;
    assert_int_equal(rls_grpc_frame(big, sizeof(big), 65536, &msg, &len, &used), -SLUICE_ETOOBIG);
    const uint8_t huge[] = {0, 0xff, 0xff, 0xff, 0xff};
    assert_int_equal(rls_grpc_frame(huge, sizeof(huge), 65536, &msg, &len, &used), -SLUICE_ETOOBIG);
    const uint8_t gz[] = {1, 0, 0, 0, 1, 'x'};
    assert_int_equal(rls_grpc_frame(gz, 1, 65536, &msg, &len, &used), -SLUICE_EPROTO);
    const uint8_t bad[] = {2, 0, 0, 0, 0};
    assert_int_equal(rls_grpc_frame(bad, sizeof(bad), 65536, &msg, &len, &used), -SLUICE_EPROTO);
}

static void test_timeout(void **state)
{
    (void)state;
    int64_t ns;
    assert_int_equal(rls_grpc_timeout("20m", 3, &ns), 0);
    assert_int_equal(ns, 20000000);
    assert_int_equal(rls_grpc_timeout("1S", 2, &ns), 0);
    assert_int_equal(ns, 1000000000);
    assert_int_equal(rls_grpc_timeout("2H", 2, &ns), 0);
    assert_int_equal(ns, 7200000000000LL);
    assert_int_equal(rls_grpc_timeout("3M", 2, &ns), 0);
    assert_int_equal(ns, 180000000000LL);
    assert_int_equal(rls_grpc_timeout("7u", 2, &ns), 0);
    assert_int_equal(ns, 7000);
    assert_int_equal(rls_grpc_timeout("99999999n", 9, &ns), 0);
    assert_int_equal(ns, 99999999);
    assert_int_equal(rls_grpc_timeout("99999999H", 9, &ns), 0); /* 3.6e20 ns saturates */
    assert_int_equal(ns, INT64_MAX);
    assert_int_equal(rls_grpc_timeout("123456789S", 10, &ns), -SLUICE_EINVAL); /* 9 digits */
    assert_int_equal(rls_grpc_timeout("S", 1, &ns), -SLUICE_EINVAL);
    assert_int_equal(rls_grpc_timeout("10s", 3, &ns), -SLUICE_EINVAL);
    assert_int_equal(rls_grpc_timeout("-1S", 3, &ns), -SLUICE_EINVAL);
    assert_int_equal(rls_grpc_timeout("1 S", 3, &ns), -SLUICE_EINVAL);
}

static void test_status_map(void **state)
{
    (void)state;
    assert_int_equal(rls_service_grpc_status(0), RLS_GRPC_OK);
    assert_int_equal(rls_service_grpc_status(-SLUICE_EPROTO), RLS_GRPC_INVALID_ARGUMENT);
    assert_int_equal(rls_service_grpc_status(-SLUICE_ETOOBIG), RLS_GRPC_INVALID_ARGUMENT);
    assert_int_equal(rls_service_grpc_status(-SLUICE_EFULL), RLS_GRPC_RESOURCE_EXHAUSTED);
    assert_int_equal(rls_service_grpc_status(-SLUICE_EIO), RLS_GRPC_INTERNAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_frame_split_points),
        cmocka_unit_test(test_frame_bounds_and_flags),
        cmocka_unit_test(test_timeout),
        cmocka_unit_test(test_status_map),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
