/*
 * Unit tests of the HTTP listener's pure helpers: query parameters
 * (percent-decoding and its errors), header lookup, and the parts of the
 * request head the decision endpoint reads (query, headers, several
 * requests in one buffer).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "http.h"
#include "sluice/error.h"

static void test_query_get(void **state)
{
    (void)state;
    const char *q = "key=user%3A42&policy=api&cost=2&empty=&flag&plus=a+b&last=%41";
    size_t ql = strlen(q);
    char v[32];
    assert_int_equal(http_query_get(q, ql, "key", v, sizeof(v)), 7);
    assert_string_equal(v, "user:42");
    assert_int_equal(http_query_get(q, ql, "policy", v, sizeof(v)), 3);
    assert_string_equal(v, "api");
    assert_int_equal(http_query_get(q, ql, "empty", v, sizeof(v)), 0);
    assert_string_equal(v, "");
    assert_int_equal(http_query_get(q, ql, "flag", v, sizeof(v)), 0);
    assert_int_equal(http_query_get(q, ql, "plus", v, sizeof(v)), 3);
    assert_string_equal(v, "a b");
    assert_int_equal(http_query_get(q, ql, "last", v, sizeof(v)), 1);
    assert_string_equal(v, "A");
    /* A name is matched whole, not as a prefix. */
    assert_int_equal(http_query_get(q, ql, "ke", v, sizeof(v)), -SLUICE_ENOENT);
    assert_int_equal(http_query_get(q, ql, "cos", v, sizeof(v)), -SLUICE_ENOENT);
    assert_int_equal(http_query_get(NULL, 0, "key", v, sizeof(v)), -SLUICE_ENOENT);
    /* Bounds and bad escapes. */
    assert_int_equal(http_query_get(q, ql, "key", v, 7), -SLUICE_ETOOBIG);
    assert_int_equal(http_query_get(q, ql, "key", v, 8), 7);
    static const char *bad[] = {"k=%", "k=%4", "k=%zz", "k=%00", "k=a%4&x=1"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(http_query_get(bad[i], strlen(bad[i]), "k", v, sizeof(v)), -SLUICE_EPROTO);
    /* Only the query's first length bytes count. */
    assert_int_equal(http_query_get("k=abcdef", 5, "k", v, sizeof(v)), 3);
    assert_string_equal(v, "abc");
}

static void test_request_query_and_headers(void **state)
{
    (void)state;
    const char *req = "GET /v1/throttle?key=a&policy=p HTTP/1.1\r\n"
                      "Host: x\r\nX-Sluice-Key: hdr\r\nx-forwarded-for: 10.0.0.1\r\n\r\n"
                      "GET /health HTTP/1.1\r\n\r\n";
    struct http_request r;
    int n = http_parse_request(req, strlen(req), HTTP_MAX_REQUEST, &r);
    assert_true(n > 0);
    assert_int_equal((size_t)n, strlen(req) - strlen("GET /health HTTP/1.1\r\n\r\n"));
    assert_int_equal(r.path_len, 12);
    assert_memory_equal(r.path, "/v1/throttle", 12);
    assert_int_equal(r.query_len, strlen("key=a&policy=p"));
    assert_memory_equal(r.query, "key=a&policy=p", r.query_len);
    assert_int_equal(r.nheaders, 3);
    size_t len;
    const char *v = http_request_header(&r, "x-sluice-key", &len);
    assert_non_null(v);
    assert_int_equal(len, 3);
    assert_memory_equal(v, "hdr", 3);
    v = http_request_header(&r, "X-Forwarded-For", &len);
    assert_non_null(v);
    assert_memory_equal(v, "10.0.0.1", len);
    assert_null(http_request_header(&r, "X-Sluice-Policy", &len));
    /* The next request in the buffer parses on its own. */
    n = http_parse_request(req + n, strlen(req + n), HTTP_MAX_REQUEST, &r);
    assert_true(n > 0);
    assert_null(r.query);
    assert_int_equal(r.nheaders, 0);
}

static void test_many_headers_are_capped(void **state)
{
    (void)state;
    char req[4096] = "GET / HTTP/1.1\r\n";
    for (int i = 0; i < HTTP_MAX_HEADERS + 10; i++) {
        char line[32];
        snprintf(line, sizeof(line), "H%d: %d\r\n", i, i);
        strcat(req, line);
    }
    strcat(req, "\r\n");
    struct http_request r;
    assert_int_equal(http_parse_request(req, strlen(req), HTTP_MAX_REQUEST, &r), (int)strlen(req));
    assert_int_equal(r.nheaders, HTTP_MAX_HEADERS);
}

/* A request line read across a bare line feed: libhttp-parser's head then
 * ends past the first empty line, at a later one.  Its headers would come
 * from the bytes the listener takes for the next request (a desync, as in
 * request smuggling): refused, whatever follows. */
static void test_head_ends_where_parser_agrees(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "GET /m?Ro&key= H:\n\r\n1.1\r\nonino:\n\r\n",
        "GET /v1/throttle?key=a H:\n\r\n1.1\r\nX-Sluice-Key: b\r\n\r\n",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct http_request r;
        int n = http_parse_request(bad[i], strlen(bad[i]), HTTP_MAX_REQUEST, &r);
        if (n > 0) {
            /* Accepted only if every header lies inside the head it reports. */
            for (size_t h = 0; h < r.nheaders; h++)
                assert_true(r.headers[h].value + r.headers[h].value_len <= bad[i] + n);
        } else {
            assert_int_equal(n, -SLUICE_EPROTO);
        }
    }
    /* A head of bare line feeds still parses, headers and all. */
    const char *lf = "GET /v1/throttle?key=a HTTP/1.1\nX-Sluice-Key: b\n\nGET / HTTP/1.1\n\n";
    struct http_request r;
    int n = http_parse_request(lf, strlen(lf), HTTP_MAX_REQUEST, &r);
    assert_int_equal(n, (int)(strlen(lf) - strlen("GET / HTTP/1.1\n\n")));
    size_t len;
    const char *v = http_request_header(&r, "X-Sluice-Key", &len);
    assert_non_null(v);
    assert_memory_equal(v, "b", len);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_query_get),
        cmocka_unit_test(test_request_query_and_headers),
        cmocka_unit_test(test_many_headers_are_capped),
        cmocka_unit_test(test_head_ends_where_parser_agrees),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
