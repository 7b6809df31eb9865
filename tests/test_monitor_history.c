/* test_monitor_history.c: the event ring buffer (conf key history,
 * lib/history.c) and xseg_history_json: kinds, order, live and mapped bytes
 * after each event, wrap-around, OOM and trim events, buffer rules. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "xseg.h"
#include "support_common.h"

#define MIB ((size_t)1 << 20)

typedef struct hev {
    unsigned long long seq, t, addr, size, stream, live, mapped;
    char kind[16];
} hev;

typedef struct hist {
    char *json;
    unsigned long long capacity, recorded, dropped;
    hev *ev;
    size_t n;
} hist;

static xseg_t *make(const char *conf)
{
    xseg_t *xs = NULL;
    ck_assert_msg(xseg_create(&xs, 0, conf) == XSEG_OK, "%s", xseg_last_error());
    return xs;
}

static unsigned long long num(const char *json, const char *key)
{
    const char *p = strstr(json, key);
    ck_assert_msg(p != NULL, "no %s in %.200s", key, json);
    return strtoull(p + strlen(key), NULL, 10);
}

static hist get(xseg_t *xs)
{
    hist h = {0};
    size_t len = 0;
    ck_assert_int_eq(xseg_history_json(xs, NULL, 0, &len), XSEG_ERR_BUFFER_TOO_SMALL);
    h.json = malloc(len + 1);
    ck_assert_int_eq(xseg_history_json(xs, h.json, len + 1, &len), XSEG_OK);
    ck_assert_uint_eq(strlen(h.json), len);
    h.capacity = num(h.json, "\"capacity\":");
    h.recorded = num(h.json, "\"recorded\":");
    h.dropped = num(h.json, "\"dropped\":");
    h.ev = calloc(h.capacity + 1, sizeof *h.ev);
    for (const char *p = strstr(h.json, "{\"seq\":"); p; p = strstr(p + 1, "{\"seq\":")) {
        hev *e = &h.ev[h.n];
        int got = sscanf(p, "{\"seq\":%llu,\"t_ns\":%llu,\"kind\":\"%15[a-z]\",\"addr\":%llu,"
                            "\"size\":%llu,\"stream\":%llu,\"live\":%llu,\"mapped\":%llu}",
                         &e->seq, &e->t, e->kind, &e->addr, &e->size, &e->stream, &e->live,
                         &e->mapped);
        ck_assert_int_eq(got, 8);
        ck_assert_uint_le(++h.n, h.capacity);
    }
    return h;
}

static void put(hist *h)
{
    free(h->json);
    free(h->ev);
}

static xseg_stats stats(xseg_t *xs)
{
    xseg_stats s = {.size = sizeof s};
    ck_assert_int_eq(xseg_get_stats(xs, &s), XSEG_OK);
    return s;
}

static const hev *last(const hist *h)
{
    ck_assert_uint_gt(h->n, 0);
    return &h->ev[h->n - 1];
}

START_TEST(t_off)
{
    xseg_t *xs = make("backend:host,host_capacity:64MB");
    char buf[64];
    ck_assert_int_eq(xseg_history_json(xs, buf, sizeof buf, NULL), XSEG_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(xseg_last_error(), "history:N"));
    ck_assert_int_eq(xseg_history_json(NULL, buf, sizeof buf, NULL), XSEG_ERR_INVALID_ARG);
    xseg_destroy(xs);
}
END_TEST

START_TEST(t_empty)
{
    xseg_t *xs = make("backend:host,host_capacity:64MB,history:16");
    hist h = get(xs);
    ck_assert_uint_eq(h.capacity, 16);
    ck_assert_uint_eq(h.recorded, 0);
    ck_assert_uint_eq(h.n, 0);
    ck_assert_ptr_nonnull(strstr(h.json, "\"events\":[\n]}"));
    put(&h);
    xseg_destroy(xs);
}
END_TEST

/* After every call, its event is the last one and carries the counters. */
START_TEST(t_alloc_free_numbers)
{
    xseg_t *xs = make("backend:host,host_capacity:256MB,history:1000");
    void *p[6];
    for (int i = 0; i < 6; i++) {
        size_t size = (size_t)(i + 1) * MIB + 7;
        void *stream = (void *)(uintptr_t)(i % 2 ? 0x50 : 0);
        ck_assert_int_eq(xseg_alloc(xs, size, stream, &p[i]), XSEG_OK);
        hist h = get(xs);
        xseg_stats s = stats(xs);
        const hev *e = last(&h);
        ck_assert_str_eq(e->kind, "alloc");
        ck_assert_uint_eq(e->addr, (uintptr_t)p[i]);
        ck_assert_uint_eq(e->size, size);
        ck_assert_uint_eq(e->stream, (uintptr_t)stream);
        ck_assert_uint_eq(e->live, s.allocated_bytes.current);
        ck_assert_uint_eq(e->mapped, s.mapped_bytes.current);
        put(&h);
    }
    for (int i = 0; i < 6; i++) {
        ck_assert_int_eq(xseg_free(xs, p[i]), XSEG_OK);
        hist h = get(xs);
        xseg_stats s = stats(xs);
        const hev *e = last(&h);
        ck_assert_str_eq(e->kind, "free");
        ck_assert_uint_eq(e->addr, (uintptr_t)p[i]);
        ck_assert_uint_eq(e->size, (size_t)(i + 1) * MIB + 7);
        ck_assert_uint_eq(e->live, s.allocated_bytes.current);
        ck_assert_uint_eq(e->mapped, s.mapped_bytes.current);
        put(&h);
    }
    /* every map adds what it says; seq and time only go forward */
    hist h = get(xs);
    unsigned long long mapped = 0, maps = 0;
    for (size_t i = 0; i < h.n; i++) {
        const hev *e = &h.ev[i];
        ck_assert_uint_eq(e->seq, i);
        if (i)
            ck_assert_uint_ge(e->t, h.ev[i - 1].t);
        if (!strcmp(e->kind, "map")) {
            mapped += e->size;
            maps++;
            ck_assert_uint_eq(e->mapped, mapped);
        }
    }
    xseg_stats s = stats(xs);
    ck_assert_uint_eq(maps, s.driver_calls[XSEG_OP_MAP]);
    ck_assert_uint_eq(mapped, s.mapped_bytes.current);
    put(&h);
    xseg_destroy(xs);
}
END_TEST

START_TEST(t_trim_unmap)
{
    xseg_t *xs = make("backend:host,host_capacity:256MB,history:1000");
    void *p[4];
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(xseg_alloc(xs, 8 * MIB, NULL, &p[i]), XSEG_OK);
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(xseg_free(xs, p[i]), XSEG_OK);
    hist before = get(xs);
    size_t released = 0;
    ck_assert_int_eq(xseg_trim(xs, 0, &released), XSEG_OK);
    ck_assert_uint_gt(released, 0);
    hist h = get(xs);
    const hev *e = last(&h);
    ck_assert_str_eq(e->kind, "trim");
    ck_assert_uint_eq(e->size, released);
    ck_assert_uint_eq(e->mapped, stats(xs).mapped_bytes.current);
    /* the unmaps between: each lowers mapped by its size */
    unsigned long long prev = before.ev[before.n - 1].mapped, unmapped = 0;
    for (size_t i = before.n; i + 1 < h.n; i++) {
        ck_assert_str_eq(h.ev[i].kind, "unmap");
        ck_assert_uint_eq(h.ev[i].mapped, prev - h.ev[i].size);
        prev = h.ev[i].mapped;
        unmapped += h.ev[i].size;
    }
    ck_assert_uint_eq(unmapped, released);
    put(&before);
    put(&h);
    xseg_destroy(xs);
}
END_TEST

START_TEST(t_oom_event)
{
    xseg_t *xs = make("backend:host,host_capacity:256MB,max_mapped:16MB,history:100");
    void *p;
    ck_assert_int_eq(xseg_alloc(xs, 32 * MIB, NULL, &p), XSEG_ERR_OOM);
    hist h = get(xs);
    const hev *e = last(&h);
    ck_assert_str_eq(e->kind, "oom");
    ck_assert_uint_eq(e->size, 32 * MIB);
    ck_assert_uint_eq(num(h.json, "\"cap\":"), 16 * MIB);
    put(&h);
    xseg_destroy(xs);
}
END_TEST

/* Only the last N stay, oldest first, numbered from the start. */
START_TEST(t_wrap)
{
    xseg_t *xs = make("backend:host,host_capacity:256MB,history:10");
    void *p;
    ck_assert_int_eq(xseg_alloc(xs, 4096, NULL, &p), XSEG_OK); /* maps once */
    ck_assert_int_eq(xseg_free(xs, p), XSEG_OK);
    for (int i = 0; i < 50; i++) {
        ck_assert_int_eq(xseg_alloc(xs, 4096, NULL, &p), XSEG_OK);
        ck_assert_int_eq(xseg_free(xs, p), XSEG_OK);
    }
    hist h = get(xs);
    ck_assert_uint_eq(h.capacity, 10);
    ck_assert_uint_eq(h.n, 10);
    ck_assert_uint_eq(h.dropped, h.recorded - 10);
    for (size_t i = 0; i < h.n; i++) {
        ck_assert_uint_eq(h.ev[i].seq, h.dropped + i);
        ck_assert_str_eq(h.ev[i].kind, i % 2 ? "free" : "alloc");
    }
    put(&h);
    xseg_destroy(xs);
}
END_TEST

START_TEST(t_buffer_rules)
{
    xseg_t *xs = make("backend:host,host_capacity:64MB,history:10");
    void *p;
    ck_assert_int_eq(xseg_alloc(xs, 4096, NULL, &p), XSEG_OK);
    char small[32];
    size_t len = 0;
    ck_assert_int_eq(xseg_history_json(xs, small, sizeof small, &len), XSEG_ERR_BUFFER_TOO_SMALL);
    ck_assert_uint_gt(len, sizeof small);
    ck_assert_uint_eq(strlen(small), sizeof small - 1); /* cut, NUL-terminated */
    ck_assert_int_eq(xseg_history_json(xs, NULL, 5, &len), XSEG_ERR_INVALID_ARG);
    xseg_destroy(xs);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("monitor_history");
    TCase *tc = tcase_create("history");
    tcase_add_test(tc, t_off);
    tcase_add_test(tc, t_empty);
    tcase_add_test(tc, t_alloc_free_numbers);
    tcase_add_test(tc, t_trim_unmap);
    tcase_add_test(tc, t_oom_event);
    tcase_add_test(tc, t_wrap);
    tcase_add_test(tc, t_buffer_rules);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return t_run(suite());
}
