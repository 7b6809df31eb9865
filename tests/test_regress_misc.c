/* test_regress_misc.c: regressions of issue 19 item 10, the smaller
 * mismatches between messages, docs and behaviour: the OOM hint under a tiny
 * cap, a cap that computes to 0, size overflows in the conf, the va_size
 * limit in the XSEG_ERR_SIZE message, release_threshold:0, alloc_calls /
 * free_calls of refused calls, and the num_device_alloc mapping in the docs.
 * (xseg-viz on bad JSON is in test_monitor_viz.) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support_common.h"

static int has(const char *text, const char *what)
{
    return strstr(text, what) != NULL;
}

/* xseg_create(conf) must fail with XSEG_ERR_CONFIG and a message naming
 * every word of `names` (NULL-terminated). */
static void conf_error(const char *conf, const char *const *names)
{
    xseg_t *xs = NULL;
    xseg_status st = xseg_create(&xs, 0, conf);
    const char *msg = xseg_last_error();
    ck_assert_msg(st == XSEG_ERR_CONFIG, "xseg_create(%s) gave %d (%s), not XSEG_ERR_CONFIG",
                  conf, (int)st, msg);
    ck_assert_ptr_null(xs);
    for (; *names; names++)
        ck_assert_msg(has(msg, *names), "xseg_create(%s): \"%s\" does not name %s", conf, msg,
                      *names);
}

/* (a) max_mapped:1 and alloc(1): the page-rounded request is over the cap,
 * so the hint names the cap, not a full device. */
START_TEST(oom_hint_rounds_to_pages)
{
    xseg_t *xs = t_host("host_capacity:64MB,max_mapped:1");
    void *p = (void *)1;
    ck_assert_int_eq(xseg_alloc(xs, 1, NULL, &p), XSEG_ERR_OOM);
    ck_assert_ptr_null(p);
    const char *msg = xseg_last_error();
    ck_assert_msg(has(msg, "hint: raise max_mapped"), "%s", msg);
    ck_assert_msg(has(msg, "the cap is the limit"), "%s", msg);
    ck_assert_msg(!has(msg, "device is full"), "%s", msg);
    /* a large request under a cap of a few pages: the same */
    xseg_destroy(xs);
    xs = t_host("host_capacity:64MB,max_mapped:5MB");
    ck_assert_int_eq(xseg_alloc(xs, 4 * MiB + 1, NULL, &p), XSEG_ERR_OOM);
    ck_assert_msg(has(xseg_last_error(), "the cap is the limit"), "%s", xseg_last_error());
    xseg_destroy(xs);
}
END_TEST

/* (b) a memory_fraction whose cap computes to 0 bytes is a conf error
 * naming the key, never a silent "no cap" (mapped_cap 0, Prometheus +Inf);
 * the smallest non-zero cap is reported as itself. */
START_TEST(cap_of_zero_is_a_conf_error)
{
    static const char *const names[] = {"memory_fraction", NULL};
    conf_error("backend:host,host_capacity:64MB,memory_fraction:0.00000001", names);
    conf_error("backend:host,host_capacity:64MB,max_mapped:1GB,memory_fraction:0.000000001",
               names);
    xseg_t *xs = t_host("host_capacity:64MB,memory_fraction:0.0000001"); /* 6 bytes */
    ck_assert_uint_eq(t_stats(xs).mapped_cap, 6);
    char buf[16384];
    size_t len = 0;
    ck_assert_int_eq(xseg_stats_prometheus(xs, buf, sizeof buf, &len), XSEG_OK);
    ck_assert_msg(has(buf, "xseg_mapped_cap_bytes{device=\"0\"} 6\n"), "%s", buf);
    void *p;
    ck_assert_int_eq(xseg_alloc(xs, 1, NULL, &p), XSEG_ERR_OOM);
    xseg_destroy(xs);
    /* at run time (torch.cuda.set_per_process_memory_fraction) a fraction
     * that tiny caps at 1 byte, as PyTorch refuses everything then; the
     * stats show a cap, not "no cap" */
    xseg_torch_memory_fraction(1e-15, 0);
    ck_assert_str_eq(xseg_last_error(), "");
    ck_assert_int_eq(xseg_default(0, &xs), XSEG_OK);
    ck_assert_uint_eq(t_stats(xs).mapped_cap, 1);
    ck_assert_ptr_null(xseg_torch_alloc(4096, 0, NULL));
    xseg_torch_memory_fraction(0.0, 0);
    ck_assert_uint_eq(t_stats(xs).mapped_cap, 0);
}
END_TEST

/* (c) sizes that overflow when rounded to pages, or in the automatic
 * va_size, are conf errors naming the keys, not driver errors. */
START_TEST(size_overflows_are_conf_errors)
{
    static const char *const va[] = {"va_size", NULL};
    static const char *const va_page[] = {"va_size", "page_size", NULL};
    static const char *const cap[] = {"host_capacity", NULL};
    conf_error("backend:host,va_size:18446744073709551614", va);
    conf_error("backend:host,page_size:9223372036854775808,va_size:9223372036854775809",
               va_page);
    conf_error("backend:host,host_capacity:4611686018427387904", cap);  /* 4 x: overflow */
    conf_error("backend:host,host_capacity:9223372036854775808", cap);  /* over off_t */
    conf_error("backend:host,host_capacity:18446744073709551615", cap);
}
END_TEST

/* (d) XSEG_ERR_SIZE names the real limit: the range less one page. */
START_TEST(va_size_message_names_the_limit)
{
    xseg_t *xs = t_host("host_capacity:256MB,va_size:64MB");
    size_t page = t_stats(xs).page_size, limit = 64 * MiB - page;
    char want[64];
    snprintf(want, sizeof want, "%zu", limit);
    void *p;
    ck_assert_int_eq(xseg_alloc(xs, limit + 1, NULL, &p), XSEG_ERR_SIZE);
    const char *msg = xseg_last_error();
    ck_assert_msg(has(msg, want), "\"%s\" does not name the limit %s", msg, want);
    ck_assert_msg(has(msg, "va_size"), "%s", msg);
    ck_assert_int_eq(xseg_alloc(xs, limit, NULL, &p), XSEG_OK); /* the limit itself fits */
    ck_assert_int_eq(xseg_free(xs, p), XSEG_OK);
    xseg_destroy(xs);
}
END_TEST

/* (e) release_threshold:0 releases freed memory at once, as config.md says:
 * nothing stays mapped after a free, large or small, with a stream or not. */
START_TEST(release_threshold_zero_releases_at_once)
{
    static const char *const confs[] = {"host_capacity:256MB,release_threshold:0",
                                        "host_capacity:256MB,release_threshold:0MB,"
                                        "thread_cache:off"};
    for (int c = 0; c < 2; c++) {
        xseg_t *xs = t_host(confs[c]);
        void *stream[] = {NULL, (void *)(uintptr_t)0x5001};
        size_t sizes[] = {8 * MiB, 3 * MiB + 1000, 1000, 100 * 1024};
        for (int s = 0; s < 2; s++)
            for (int i = 0; i < 4; i++)
                for (int round = 0; round < 3; round++) {
                    void *p;
                    ck_assert_int_eq(xseg_alloc(xs, sizes[i], stream[s], &p), XSEG_OK);
                    ck_assert_uint_gt(t_stats(xs).mapped_bytes.current, 0);
                    t_fill(p, sizes[i], (uint32_t)i);
                    ck_assert_int_eq(xseg_free(xs, p), XSEG_OK);
                    xseg_stats st = t_stats(xs);
                    ck_assert_msg(st.mapped_bytes.current == 0,
                                  "%s: %zu bytes on stream %d: %llu bytes still mapped after "
                                  "the free", confs[c], sizes[i], s,
                                  (unsigned long long)st.mapped_bytes.current);
                }
        /* with a live neighbour: the freed block's own pages go */
        void *keep, *p;
        ck_assert_int_eq(xseg_alloc(xs, 4 * MiB, NULL, &keep), XSEG_OK);
        uint64_t live = t_stats(xs).mapped_bytes.current;
        ck_assert_int_eq(xseg_alloc(xs, 16 * MiB, NULL, &p), XSEG_OK);
        ck_assert_int_eq(xseg_free(xs, p), XSEG_OK);
        ck_assert_uint_eq(t_stats(xs).mapped_bytes.current, live);
        ck_assert_int_eq(xseg_free(xs, keep), XSEG_OK);
        ck_assert_uint_eq(t_stats(xs).mapped_bytes.current, 0);
        xseg_destroy(xs);
    }
}
END_TEST

/* (f) alloc_calls / free_calls count every call, refused ones included. */
START_TEST(refused_calls_are_counted)
{
    xseg_t *xs = t_host("host_capacity:64MB");
    void *p;
    ck_assert_int_eq(xseg_alloc(xs, 0, NULL, &p), XSEG_ERR_INVALID_ARG);
    ck_assert_int_eq(xseg_alloc(xs, SIZE_MAX, NULL, &p), XSEG_ERR_SIZE);
    ck_assert_int_eq(xseg_alloc(xs, 4096, NULL, NULL), XSEG_ERR_INVALID_ARG);
    ck_assert_int_eq(xseg_free(xs, NULL), XSEG_ERR_INVALID_ARG);
    xseg_stats st = t_stats(xs);
    ck_assert_uint_eq(st.alloc_calls, 3);
    ck_assert_uint_eq(st.free_calls, 1);
    ck_assert_int_eq(xseg_alloc(xs, 4096, NULL, &p), XSEG_OK);
    ck_assert_int_eq(xseg_free(xs, p), XSEG_OK);
    ck_assert_int_eq(xseg_free(xs, p), XSEG_ERR_DOUBLE_FREE);
    st = t_stats(xs);
    ck_assert_uint_eq(st.alloc_calls, 4);
    ck_assert_uint_eq(st.free_calls, 3);
    xseg_destroy(xs);
}
END_TEST

/* The line of `file` (under the source tree) that contains `what`, or "". */
static void line_with(const char *file, const char *what, char *line, size_t len)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", XSEG_SOURCE_DIR, file);
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    line[0] = '\0';
    char buf[4096];
    while (fgets(buf, sizeof buf, f))
        if (has(buf, what)) {
            snprintf(line, len, "%s", buf);
            break;
        }
    fclose(f);
    ck_assert_msg(line[0], "%s has no line with %s", file, what);
}

/* (g) docs/stats.md and docs/pytorch.md map num_device_alloc /
 * num_device_free as the code does (map / unmap driver calls). */
START_TEST(num_device_alloc_mapping_agrees)
{
    char line[4096];
    line_with("tools/python/xseg/_stats.py", "out[\"num_device_alloc\"]", line, sizeof line);
    ck_assert_msg(has(line, "driver_calls[OP_MAP]"), "code: %s", line);
    line_with("tools/python/xseg/_stats.py", "out[\"num_device_free\"]", line, sizeof line);
    ck_assert_msg(has(line, "driver_calls[OP_UNMAP]"), "code: %s", line);
    line_with("docs/pytorch.md", "| `num_device_alloc`", line, sizeof line);
    ck_assert_msg(has(line, "`driver_calls.map` / `driver_calls.unmap`"), "pytorch.md: %s", line);
    line_with("docs/stats.md", "`num_device_alloc`", line, sizeof line);
    ck_assert_msg(has(line, "`num_device_alloc` = `map`") &&
                      has(line, "`num_device_free` = `unmap`"),
                  "stats.md: %s", line);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("regress_misc");
    TCase *tc = tcase_create("misc");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, oom_hint_rounds_to_pages);
    tcase_add_test(tc, cap_of_zero_is_a_conf_error);
    tcase_add_test(tc, size_overflows_are_conf_errors);
    tcase_add_test(tc, va_size_message_names_the_limit);
    tcase_add_test(tc, release_threshold_zero_releases_at_once);
    tcase_add_test(tc, refused_calls_are_counted);
    tcase_add_test(tc, num_device_alloc_mapping_agrees);
    suite_add_tcase(s, tc);
    return t_run(s);
}
