/* test_monitor_prom.c: xseg_stats_prometheus (lib/prom.c) checked line by
 * line without outside tools: HELP and TYPE before each family's samples,
 * names and suffixes, the device label, values equal to the stats, the cap
 * as +Inf or bytes, buffer rules, and xseg_stats_prometheus_render (many
 * sources, extra labels escaped and made UTF-8, bad arguments refused),
 * and the per-tag families (a `tag` label): absent without tags, then one
 * sample per tag shown, equal to xseg_tag_stats_get, asleep or awake.
 * test_monitor_promparse.c runs real
 * Prometheus parsers on the same text. */
#include <check.h>
#include <ctype.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "xseg.h"
#include "support_common.h"

#define MIB ((size_t)1 << 20)

static xseg_t *make(const char *conf)
{
    xseg_t *xs = NULL;
    ck_assert_msg(xseg_create(&xs, 0, conf) == XSEG_OK, "%s", xseg_last_error());
    return xs;
}

static char *render(xseg_t *xs)
{
    size_t len = 0;
    ck_assert_int_eq(xseg_stats_prometheus(xs, NULL, 0, &len), XSEG_ERR_BUFFER_TOO_SMALL);
    char *buf = malloc(len + 1);
    ck_assert_int_eq(xseg_stats_prometheus(xs, buf, len + 1, &len), XSEG_OK);
    ck_assert_uint_eq(strlen(buf), len);
    return buf;
}

/* The value of the sample line starting with `series` ("name{labels}"). */
static const char *sample(const char *text, const char *series)
{
    size_t n = strlen(series);
    for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
        if (!strncmp(p, series, n) && p[n] == ' ')
            return p + n + 1;
    ck_abort_msg("no sample %s", series);
    return NULL;
}

static unsigned long long value(const char *text, const char *series)
{
    return strtoull(sample(text, series), NULL, 10);
}

static int valid_name(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!(islower((unsigned char)s[i]) || s[i] == '_' || (i && isdigit((unsigned char)s[i]))))
            return 0;
    return n > 5 && !strncmp(s, "xseg_", 5);
}

/* Every sample belongs to the family announced just before it by HELP
 * and TYPE; counters end in _total; every sample has device="0". */
static void check_structure(const char *text)
{
    char family[128] = "", type[16] = "";
    int help = 0, samples = 0, families = 0;
    const char *p = text;
    while (*p) {
        const char *e = strchr(p, '\n');
        ck_assert_ptr_nonnull(e); /* every line ends with a newline */
        size_t n = (size_t)(e - p);
        if (!strncmp(p, "# HELP ", 7)) {
            ck_assert_int_eq(sscanf(p + 7, "%127s", family), 1);
            ck_assert(valid_name(family, strlen(family)));
            help = 1;
            families++;
        } else if (!strncmp(p, "# TYPE ", 7)) {
            char name[128];
            ck_assert_int_eq(sscanf(p + 7, "%127s %15s", name, type), 2);
            ck_assert(help);
            ck_assert_str_eq(name, family);
            ck_assert(!strcmp(type, "gauge") || !strcmp(type, "counter"));
            if (!strcmp(type, "counter"))
                ck_assert_str_eq(family + strlen(family) - 6, "_total");
        } else {
            size_t fl = strlen(family);
            ck_assert_msg(n > fl && !strncmp(p, family, fl) && p[fl] == '{', "%.*s", (int)n, p);
            ck_assert_msg(!strncmp(p + fl, "{device=\"0\"", 11), "%.*s", (int)n, p);
            const char *close = memchr(p, '}', n);
            ck_assert_ptr_nonnull(close);
            ck_assert(close[1] == ' ' && close + 2 < e);
            samples++;
        }
        p = e + 1;
    }
    ck_assert_int_ge(families, 30);
    ck_assert_int_ge(samples, families);
}

START_TEST(t_structure_and_values)
{
    xseg_t *xs = make("backend:host,host_capacity:256MB");
    void *p[5];
    for (int i = 0; i < 5; i++)
        ck_assert_int_eq(xseg_alloc(xs, (size_t)(i + 1) * MIB + 3, NULL, &p[i]), XSEG_OK);
    ck_assert_int_eq(xseg_free(xs, p[0]), XSEG_OK);
    char *text = render(xs);
    check_structure(text);
    xseg_stats s = {.size = sizeof s};
    ck_assert_int_eq(xseg_get_stats(xs, &s), XSEG_OK);
    ck_assert_uint_eq(value(text, "xseg_allocated_bytes{device=\"0\"}"), s.allocated_bytes.current);
    ck_assert_uint_eq(value(text, "xseg_allocated_peak_bytes{device=\"0\"}"),
                      s.allocated_bytes.peak);
    ck_assert_uint_eq(value(text, "xseg_requested_bytes{device=\"0\"}"), s.requested_bytes.current);
    ck_assert_uint_eq(value(text, "xseg_mapped_bytes{device=\"0\"}"), s.mapped_bytes.current);
    ck_assert_uint_eq(value(text, "xseg_cached_bytes{device=\"0\"}"), s.cached_bytes.current);
    ck_assert_uint_eq(value(text, "xseg_active_blocks{device=\"0\"}"), 4);
    ck_assert_uint_eq(value(text, "xseg_alloc_calls_total{device=\"0\"}"), 5);
    ck_assert_uint_eq(value(text, "xseg_free_calls_total{device=\"0\"}"), 1);
    ck_assert_uint_eq(value(text, "xseg_allocations_total{device=\"0\"}"), 5);
    ck_assert_uint_eq(value(text, "xseg_device_total_bytes{device=\"0\"}"), 256 * MIB);
    ck_assert_uint_eq(value(text, "xseg_driver_calls_total{device=\"0\",op=\"map\"}"),
                      s.driver_calls[XSEG_OP_MAP]);
    ck_assert_uint_eq(value(text, "xseg_info{device=\"0\",backend=\"host\",version=\""
                                  XSEG_VERSION_STRING "\"}"), 1);
    free(text);
    xseg_destroy(xs);
}
END_TEST

START_TEST(t_cap_inf_or_bytes)
{
    xseg_t *xs = make("backend:host,host_capacity:256MB");
    char *text = render(xs);
    ck_assert(!strncmp(sample(text, "xseg_mapped_cap_bytes{device=\"0\"}"), "+Inf\n", 5));
    free(text);
    xseg_destroy(xs);
    xs = make("backend:host,host_capacity:256MB,max_mapped:96MB");
    text = render(xs);
    ck_assert_uint_eq(value(text, "xseg_mapped_cap_bytes{device=\"0\"}"), 96 * MIB);
    free(text);
    xseg_destroy(xs);
}
END_TEST

START_TEST(t_every_op)
{
    xseg_t *xs = make("backend:host,host_capacity:64MB");
    char *text = render(xs), series[128];
    for (int i = 0; i < XSEG_OP_COUNT; i++) {
        snprintf(series, sizeof series, "xseg_driver_calls_total{device=\"0\",op=\"%s\"}",
                 xseg_op_name((xseg_op)i));
        sample(text, series);
    }
    free(text);
    xseg_destroy(xs);
}
END_TEST

START_TEST(t_buffer_rules)
{
    xseg_t *xs = make("backend:host,host_capacity:64MB");
    char small[50];
    size_t len = 0;
    ck_assert_int_eq(xseg_stats_prometheus(xs, small, sizeof small, &len),
                     XSEG_ERR_BUFFER_TOO_SMALL);
    ck_assert_uint_gt(len, sizeof small);
    ck_assert_uint_eq(strlen(small), sizeof small - 1);
    ck_assert_ptr_nonnull(strstr(xseg_last_error(), "bytes needed"));
    ck_assert_int_eq(xseg_stats_prometheus(xs, NULL, 3, NULL), XSEG_ERR_INVALID_ARG);
    ck_assert_int_eq(xseg_stats_prometheus(NULL, small, sizeof small, NULL), XSEG_ERR_INVALID_ARG);
    xseg_destroy(xs);
}
END_TEST

static size_t count(const char *text, const char *what)
{
    size_t n = 0;
    for (const char *p = text; (p = strstr(p, what)) != NULL; p++)
        n++;
    return n;
}

static char *render_n(const xseg_prom_source *src, size_t n)
{
    size_t len = 0;
    ck_assert_int_eq(xseg_stats_prometheus_render(src, n, NULL, 0, &len),
                     XSEG_ERR_BUFFER_TOO_SMALL);
    char *buf = malloc(len + 1);
    ck_assert_int_eq(xseg_stats_prometheus_render(src, n, buf, len + 1, &len), XSEG_OK);
    ck_assert_uint_eq(strlen(buf), len);
    return buf;
}

/* xseg_stats_prometheus_render: one source without labels is exactly
 * xseg_stats_prometheus; two sources share each family's comment lines;
 * label values are escaped and made UTF-8; bad arguments are refused. */
START_TEST(t_render_sources)
{
    xseg_t *xs = make("backend:host,host_capacity:64MB");
    void *p;
    ck_assert_int_eq(xseg_alloc(xs, 3 * MIB, NULL, &p), XSEG_OK);
    xseg_stats st = {.size = sizeof st};
    ck_assert_int_eq(xseg_get_stats(xs, &st), XSEG_OK);
    char *one = render(xs);
    xseg_prom_source src[2] = {{&st, "host", NULL, 0, NULL, NULL}};
    char *same = render_n(src, 1);
    ck_assert_str_eq(same, one);
    const char *names[] = {"job", "process"};
    const char *values[] = {"a\"b\\c\nd", "\xff" "ok\xc3\xa9\xe2\x82"}; /* bad byte, cut char */
    src[1] = (xseg_prom_source){&st, "host", "9.9.9", 2, names, values};
    char *two = render_n(src, 2);
    ck_assert_uint_eq(count(two, "# HELP "), count(one, "# HELP "));
    ck_assert_uint_eq(count(two, "\nxseg_ooms_total{"), 2);
    ck_assert_ptr_nonnull(strstr(two, "xseg_allocated_bytes{job=\"a\\\"b\\\\c\\nd\",process=\""
                                      "\xef\xbf\xbdok\xc3\xa9\xef\xbf\xbd\xef\xbf\xbd\","
                                      "device=\"0\"} 3145728\n"));
    ck_assert_ptr_nonnull(strstr(two, "device=\"0\",backend=\"host\",version=\"9.9.9\"} 1\n"));
    /* no sources: the comment lines alone */
    char *none = render_n(NULL, 0);
    ck_assert_uint_eq(count(none, "# HELP "), count(one, "# HELP "));
    ck_assert_ptr_null(strstr(none, "{"));
    /* an older, shorter xseg_stats reads as zeros past its size */
    xseg_stats old = st;
    old.size = (uint32_t)offsetof(xseg_stats, driver_calls);
    src[0] = (xseg_prom_source){&old, "host", NULL, 0, NULL, NULL};
    char *short_ = render_n(src, 1);
    ck_assert_ptr_nonnull(strstr(short_, "\nxseg_allocated_bytes{device=\"0\"} 3145728\n"));
    ck_assert_ptr_nonnull(strstr(short_, "\nxseg_alloc_calls_total{device=\"0\"} 0\n"));
    /* refused */
    char buf[64];
    const char *bad[] = {"device", "9x", "a-b", "__x", ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        src[1] = (xseg_prom_source){&st, "host", NULL, 1, &bad[i], values};
        ck_assert_int_eq(xseg_stats_prometheus_render(src, 2, buf, sizeof buf, NULL),
                         XSEG_ERR_INVALID_ARG);
        ck_assert_ptr_nonnull(strstr(xseg_last_error(), "source 1, label 0"));
    }
    src[1] = (xseg_prom_source){&st, "host", NULL, XSEG_PROM_MAX_LABELS + 1, names, values};
    ck_assert_int_eq(xseg_stats_prometheus_render(src, 2, buf, sizeof buf, NULL),
                     XSEG_ERR_INVALID_ARG);
    src[1] = (xseg_prom_source){NULL, "host", NULL, 0, NULL, NULL};
    ck_assert_int_eq(xseg_stats_prometheus_render(src, 2, buf, sizeof buf, NULL),
                     XSEG_ERR_INVALID_ARG);
    ck_assert_int_eq(xseg_stats_prometheus_render(NULL, 1, buf, sizeof buf, NULL),
                     XSEG_ERR_INVALID_ARG);
    ck_assert_int_eq(xseg_stats_prometheus_render(src, 1, NULL, 3, NULL), XSEG_ERR_INVALID_ARG);
    free(one);
    free(same);
    free(two);
    free(none);
    free(short_);
    xseg_destroy(xs);
}
END_TEST

/* The tag families' samples of one tag against xseg_tag_stats_get. */
static void check_tag(const char *text, xseg_t *xs, int tag, const char *name)
{
    xseg_tag_stats t = {.size = sizeof t};
    ck_assert_int_eq(xseg_tag_stats_get(xs, tag, &t), XSEG_OK);
    char series[160];
    static const struct { const char *family; size_t off; } u64[] = {
        {"xseg_tag_live_bytes", offsetof(xseg_tag_stats, live_bytes.current)},
        {"xseg_tag_live_peak_bytes", offsetof(xseg_tag_stats, live_bytes.peak)},
        {"xseg_tag_mapped_bytes", offsetof(xseg_tag_stats, mapped_bytes.current)},
        {"xseg_tag_mapped_peak_bytes", offsetof(xseg_tag_stats, mapped_bytes.peak)},
        {"xseg_tag_sleeping_bytes", offsetof(xseg_tag_stats, sleeping_bytes)},
        {"xseg_tag_backup_bytes", offsetof(xseg_tag_stats, backup_bytes)},
        {"xseg_tag_sleeps_total", offsetof(xseg_tag_stats, sleeps)},
        {"xseg_tag_wakes_total", offsetof(xseg_tag_stats, wakes)},
    };
    for (size_t i = 0; i < sizeof u64 / sizeof u64[0]; i++) {
        snprintf(series, sizeof series, "%s{device=\"0\",tag=\"%s\"}", u64[i].family, name);
        uint64_t want;
        memcpy(&want, (const char *)&t + u64[i].off, sizeof want);
        ck_assert_msg(value(text, series) == want, "%s: %llu, xseg_tag_stats_get %llu", series,
                      value(text, series), (unsigned long long)want);
    }
    snprintf(series, sizeof series, "xseg_tag_asleep{device=\"0\",tag=\"%s\"}", name);
    ck_assert_uint_eq(value(text, series), (unsigned long long)t.asleep);
    snprintf(series, sizeof series, "xseg_tag_last_sleep_seconds{device=\"0\",tag=\"%s\"}",
             name);
    ck_assert(strtod(sample(text, series), NULL) * 1e9 > (double)t.last_sleep_ns - 1.0 &&
              strtod(sample(text, series), NULL) * 1e9 < (double)t.last_sleep_ns + 1.0);
}

/* Tag families: none while no tag but the default is used (a registered,
 * unused tag included); then default and each tag in use, asleep or not. */
START_TEST(t_tags)
{
    xseg_t *xs = make("backend:host,host_capacity:256MB");
    int w, kv, unused;
    ck_assert_int_eq(xseg_tag_id("prom_w", &w), XSEG_OK);
    ck_assert_int_eq(xseg_tag_id("prom_kv", &kv), XSEG_OK);
    ck_assert_int_eq(xseg_tag_id("prom_unused", &unused), XSEG_OK);
    void *d, *a, *b, *c;
    ck_assert_int_eq(xseg_alloc(xs, 1 * MIB, NULL, &d), XSEG_OK);
    char *text = render(xs);
    ck_assert_ptr_null(strstr(text, "xseg_tag_"));
    free(text);
    ck_assert_int_eq(xseg_alloc_tagged(xs, 5 * MIB, NULL, w, &a), XSEG_OK);
    ck_assert_int_eq(xseg_alloc_tagged(xs, 3 * MIB, NULL, kv, &b), XSEG_OK);
    ck_assert_int_eq(xseg_alloc_tagged(xs, 2 * MIB, NULL, kv, &c), XSEG_OK);
    ck_assert_int_eq(xseg_sleep(xs, &w, 1, XSEG_SLEEP_BACKUP), XSEG_OK);
    text = render(xs);
    check_structure(text);
    check_tag(text, xs, 0, "default");
    check_tag(text, xs, w, "prom_w");
    check_tag(text, xs, kv, "prom_kv");
    ck_assert_uint_eq(value(text, "xseg_tag_asleep{device=\"0\",tag=\"prom_w\"}"), 1);
    ck_assert_uint_eq(value(text, "xseg_tag_sleeping_bytes{device=\"0\",tag=\"prom_w\"}"),
                      5 * MIB);
    ck_assert_uint_eq(value(text, "xseg_tag_backup_bytes{device=\"0\",tag=\"prom_w\"}"),
                      5 * MIB);
    ck_assert_uint_eq(value(text, "xseg_tag_mapped_bytes{device=\"0\",tag=\"prom_w\"}"), 0);
    ck_assert_uint_eq(value(text, "xseg_tag_live_bytes{device=\"0\",tag=\"prom_kv\"}"), 5 * MIB);
    ck_assert_uint_eq(value(text, "xseg_tag_live_peak_bytes{device=\"0\",tag=\"prom_kv\"}"),
                      5 * MIB);
    ck_assert_uint_ge(value(text, "xseg_tag_mapped_bytes{device=\"0\",tag=\"prom_kv\"}"),
                      6 * MIB);
    ck_assert_uint_eq(value(text, "xseg_tag_asleep{device=\"0\",tag=\"prom_kv\"}"), 0);
    ck_assert_uint_eq(value(text, "xseg_tag_live_bytes{device=\"0\",tag=\"default\"}"), MIB);
    ck_assert_ptr_null(strstr(text, "prom_unused"));
    ck_assert_uint_eq(count(text, "\nxseg_tag_live_bytes{"), 3);
    ck_assert_uint_eq(count(text, "# TYPE xseg_tag_"), 11);
    free(text);
    ck_assert_int_eq(xseg_wake(xs, &w, 1), XSEG_OK);
    text = render(xs);
    check_tag(text, xs, w, "prom_w");
    ck_assert_uint_eq(value(text, "xseg_tag_asleep{device=\"0\",tag=\"prom_w\"}"), 0);
    ck_assert_uint_eq(value(text, "xseg_tag_wakes_total{device=\"0\",tag=\"prom_w\"}"), 1);
    ck_assert_uint_eq(value(text, "xseg_tag_sleeping_bytes{device=\"0\",tag=\"prom_w\"}"), 0);
    ck_assert_uint_eq(value(text, "xseg_tag_mapped_bytes{device=\"0\",tag=\"prom_w\"}"),
                      6 * MIB);
    free(text);
    /* the tag label is the library's: a source may not bring its own */
    xseg_stats st = {.size = sizeof st};
    const char *names[] = {"tag"}, *values[] = {"x"};
    xseg_prom_source src = {&st, "host", NULL, 1, names, values};
    char buf[64];
    ck_assert_int_eq(xseg_stats_prometheus_render(&src, 1, buf, sizeof buf, NULL),
                     XSEG_ERR_INVALID_ARG);
    xseg_destroy(xs);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("monitor_prom");
    TCase *tc = tcase_create("prom");
    tcase_add_test(tc, t_structure_and_values);
    tcase_add_test(tc, t_cap_inf_or_bytes);
    tcase_add_test(tc, t_every_op);
    tcase_add_test(tc, t_buffer_rules);
    tcase_add_test(tc, t_render_sources);
    tcase_add_test(tc, t_tags);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return t_run(suite());
}
