/* test_monitor_viz.c: the JSON dumps (stats, snapshot, history, xseg-top
 * --json) read by a real JSON parser (python3's json), and tools/xseg-viz
 * rendering snapshots and histories: well-formed SVG (python3's XML
 * parser), one shape per block in use, the legend, the OOM marks, a
 * segment per tag framed in its colour, a sleeping tag's blocks faded; bad
 * input ends with a one-line message, not a traceback.  Needs
 * python3; without it the whole test is skipped (exit status 77). */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "xseg.h"

#define MIB ((size_t)1 << 20)
#define VIZ XSEG_SOURCE_DIR "/tools/xseg-viz/xseg-viz"
#define TOP XSEG_BINARY_DIR "/tools/xseg-top/xseg-top"

typedef xseg_status (*dump_fn)(xseg_t *, char *, size_t, size_t *);

static char g_dir[128];

static int run(const char *cmd)
{
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void setup(void)
{
    snprintf(g_dir, sizeof g_dir, "/tmp/xseg-viz-test.XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(g_dir));
}

static void teardown(void)
{
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    run(cmd);
}

static void path_of(char *buf, size_t len, const char *name)
{
    snprintf(buf, len, "%s/%s", g_dir, name);
}

static void dump(xseg_t *xs, dump_fn fn, const char *name)
{
    char path[256];
    size_t len = 0;
    fn(xs, NULL, 0, &len);
    char *buf = malloc(len + 1);
    ck_assert_int_eq(fn(xs, buf, len + 1, &len), XSEG_OK);
    path_of(path, sizeof path, name);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(buf, f);
    fclose(f);
    free(buf);
}

static char *slurp(const char *name)
{
    char path[256];
    path_of(path, sizeof path, name);
    FILE *f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    char *buf = malloc((size_t)n + 1);
    ck_assert_int_eq(fread(buf, 1, (size_t)n, f), n);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

static int count(const char *text, const char *what)
{
    int n = 0;
    for (const char *p = text; (p = strstr(p, what)); p++)
        n++;
    return n;
}

/* python3 evaluates `expr` with `d` = the parsed JSON file; must be true. */
static void json_true(const char *name, const char *expr)
{
    char path[256], cmd[2048];
    path_of(path, sizeof path, name);
    snprintf(cmd, sizeof cmd,
             "python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); "
             "sys.exit(0 if (%s) else 1)' '%s'", expr, path);
    ck_assert_msg(run(cmd) == 0, "%s: %s", name, expr);
}

static void viz(const char *kind, const char *in, const char *out)
{
    char a[256], b[256], cmd[1024];
    path_of(a, sizeof a, in);
    path_of(b, sizeof b, out);
    snprintf(cmd, sizeof cmd, "python3 '%s' %s '%s' -o '%s'", VIZ, kind, a, b);
    ck_assert_int_eq(run(cmd), 0);
}

static void xml_ok(const char *name)
{
    char path[256], cmd[1024];
    path_of(path, sizeof path, name);
    snprintf(cmd, sizeof cmd,
             "python3 -c 'import sys,xml.etree.ElementTree as E; E.parse(sys.argv[1])' '%s'", path);
    ck_assert_msg(run(cmd) == 0, "%s is not well-formed XML", name);
}

/* A little layout: live blocks, a cached hole, a trimmed hole, slabs. */
static xseg_t *workload(void)
{
    xseg_t *xs = NULL;
    ck_assert_int_eq(xseg_create(&xs, 0, "backend:host,host_capacity:256MB,max_mapped:96MB,"
                                        "history:10000"), XSEG_OK);
    void *p[12], *s[40];
    for (int i = 0; i < 12; i++)
        ck_assert_int_eq(xseg_alloc(xs, (size_t)(i % 4 + 1) * 2 * MIB + 1000,
                                    (void *)(uintptr_t)(i % 2), &p[i]), XSEG_OK);
    for (int i = 0; i < 40; i++)
        ck_assert_int_eq(xseg_alloc(xs, 700 + (size_t)i * 100, NULL, &s[i]), XSEG_OK);
    for (int i = 1; i < 12; i += 3)
        ck_assert_int_eq(xseg_free(xs, p[i]), XSEG_OK);
    ck_assert_int_eq(xseg_trim(xs, 4 * MIB, NULL), XSEG_OK);
    void *big;
    ck_assert_int_eq(xseg_alloc(xs, 200 * MIB, NULL, &big), XSEG_ERR_OOM);
    return xs;
}

START_TEST(t_json_dumps_parse)
{
    xseg_t *xs = workload();
    dump(xs, xseg_stats_json, "stats.json");
    dump(xs, xseg_snapshot_json, "snap.json");
    dump(xs, xseg_history_json, "hist.json");
    json_true("stats.json", "d[\"ooms\"] == 1 and d[\"backend\"] == \"host\"");
    json_true("snap.json", "sum(b[\"size\"] for b in d[\"segments\"][0][\"blocks\"]) == "
                           "d[\"segments\"][0][\"size\"]");
    json_true("snap.json", "len([b for b in d[\"segments\"][0][\"blocks\"] "
                           "if b[\"state\"] == \"allocated\"]) == 8");
    json_true("hist.json", "d[\"events\"][-1][\"kind\"] == \"oom\" and "
                           "[e[\"seq\"] for e in d[\"events\"]] == list(range(len(d[\"events\"])))");
    xseg_destroy(xs);
}
END_TEST

START_TEST(t_top_json_parses)
{
    if (access(TOP, X_OK) != 0) {
        fprintf(stderr, "t_top_json_parses: xseg-top not built, not run\n");
        return;
    }
    char cmd[1024], out[256];
    setenv("XSEG_SHM_DIR", g_dir, 1);
    xseg_t *xs = NULL;
    ck_assert_int_eq(xseg_create(&xs, 0, "backend:host,host_capacity:64MB,stats_shm:on"), XSEG_OK);
    void *p;
    ck_assert_int_eq(xseg_alloc(xs, 5 * MIB, NULL, &p), XSEG_OK);
    path_of(out, sizeof out, "top.json");
    snprintf(cmd, sizeof cmd, TOP " --once --json --interval 0.05 --dir '%s' > '%s'", g_dir, out);
    ck_assert_int_eq(run(cmd), 0);
    char expr[256];
    snprintf(expr, sizeof expr, "d[\"processes\"][0][\"pid\"] == %d and "
             "d[\"processes\"][0][\"allocators\"][0][\"allocated_bytes\"] == %zu and "
             "d[\"processes\"][0][\"allocators\"][0][\"rates\"] is not None",
             (int)getpid(), 5 * MIB);
    json_true("top.json", expr);
    xseg_destroy(xs);
}
END_TEST

START_TEST(t_snapshot_picture)
{
    xseg_t *xs = workload();
    dump(xs, xseg_snapshot_json, "snap.json");
    viz("snapshot", "snap.json", "snap.svg");
    viz("snapshot", "snap.json", "snap.html");
    xml_ok("snap.svg");
    char *svg = slurp("snap.svg"), *page = slurp("snap.html");
    ck_assert(!strncmp(page, "<!DOCTYPE html>", 15));
    ck_assert_ptr_nonnull(strstr(page, "<svg"));
    /* one titled shape (at least) per allocated block and per slab */
    ck_assert_int_ge(count(svg, "<title>allocated 0x"), 8);
    ck_assert_int_ge(count(svg, "<title>slab 0x"), 1);
    ck_assert_int_ge(count(svg, "<title>handle 0x"), 1);
    ck_assert_ptr_nonnull(strstr(svg, "url(#hatch)"));       /* unmapped holes */
    ck_assert_ptr_nonnull(strstr(svg, "fill='#b7e4b0'"));    /* cached space */
    ck_assert_ptr_nonnull(strstr(svg, "cached: mapped, free")); /* legend */
    ck_assert_ptr_nonnull(strstr(svg, "allocated (stream 0x1)"));
    free(svg);
    free(page);
    xseg_destroy(xs);
}
END_TEST

/* Tags: each tag's segment titled and framed, its blocks naming it, the
 * sleeping tag's blocks faded; the JSON dumps name the tags. */
START_TEST(t_snapshot_tags_picture)
{
    xseg_t *xs = NULL;
    ck_assert_int_eq(xseg_create(&xs, 0, "backend:host,host_capacity:256MB"), XSEG_OK);
    int w, kv;
    ck_assert_int_eq(xseg_tag_id("viz_w", &w), XSEG_OK);
    ck_assert_int_eq(xseg_tag_id("viz_kv", &kv), XSEG_OK);
    void *p;
    ck_assert_int_eq(xseg_alloc(xs, 3 * MIB, NULL, &p), XSEG_OK);
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(xseg_alloc_tagged(xs, 4 * MIB, NULL, w, &p), XSEG_OK);
    ck_assert_int_eq(xseg_alloc_tagged(xs, 6 * MIB, NULL, kv, &p), XSEG_OK);
    ck_assert_int_eq(xseg_sleep(xs, &w, 1, XSEG_SLEEP_DISCARD), XSEG_OK);
    dump(xs, xseg_snapshot_json, "tsnap.json");
    dump(xs, xseg_stats_json, "tstats.json");
    json_true("tsnap.json", "[s[\"tag_name\"] for s in d[\"segments\"]] == "
                            "[\"default\", \"viz_w\", \"viz_kv\"] and "
                            "all(b[\"tag\"] == s[\"tag\"] for s in d[\"segments\"] "
                            "for b in s[\"blocks\"])");
    json_true("tstats.json", "[(t[\"name\"], t[\"asleep\"], t[\"sleeping_bytes\"]) for t in "
                             "d[\"tags\"]] == [(\"default\", 0, 0), (\"viz_w\", 1, 12582912), "
                             "(\"viz_kv\", 0, 0)]");
    viz("snapshot", "tsnap.json", "tsnap.svg");
    xml_ok("tsnap.svg");
    char *svg = slurp("tsnap.svg");
    ck_assert_ptr_nonnull(strstr(svg, ">tag viz_w (asleep): segment 0x"));
    ck_assert_ptr_nonnull(strstr(svg, ">tag viz_kv: segment 0x"));
    ck_assert_ptr_nonnull(strstr(svg, ">tag default: segment 0x"));
    ck_assert_ptr_nonnull(strstr(svg, ">frame: tag viz_w<")); /* legend */
    ck_assert_int_ge(count(svg, "stroke='#d1495b' stroke-width='2'"), 6); /* tag 1: 6 rows */
    /* the three blocks of the sleeping tag, faded, titled with it */
    ck_assert_int_ge(count(svg, ", tag viz_w (asleep: memory given back)</title>"), 3);
    ck_assert_int_ge(count(svg, "fill-opacity='0.35'"), 3);
    ck_assert_int_ge(count(svg, ", tag viz_kv</title>"), 1);
    free(svg);
    xseg_destroy(xs);
}
END_TEST

START_TEST(t_history_picture)
{
    xseg_t *xs = workload();
    dump(xs, xseg_history_json, "hist.json");
    viz("history", "hist.json", "hist.svg");
    xml_ok("hist.svg");
    char *svg = slurp("hist.svg");
    ck_assert_int_eq(count(svg, "<polyline"), 2);            /* live, mapped */
    ck_assert_int_eq(count(svg, "<title>OOM: request of 200.00 MiB</title>"), 1);
    ck_assert_ptr_nonnull(strstr(svg, "cap 96.00 MiB"));
    ck_assert_ptr_nonnull(strstr(svg, "1 oom"));
    free(svg);
    char a[256], b[256], cmd[1024];
    path_of(a, sizeof a, "hist.json");
    path_of(b, sizeof b, "hist-events.html");
    snprintf(cmd, sizeof cmd, "python3 '%s' history '%s' --by-events -o '%s'", VIZ, a, b);
    ck_assert_int_eq(run(cmd), 0);
    xseg_destroy(xs);
}
END_TEST

/* Bad input (not JSON, not a dump, a missing file): a one-line message on
 * stderr and a non-zero exit status, never a Python traceback. */
START_TEST(t_viz_bad_input)
{
    static const char *const inputs[][2] = {
        {"bad.json", "{\"device\": 0, \"segments\": ["},
        {"empty.json", ""},
        {"list.json", "[1, 2]"},
        {"nodump.json", "{\"device\": 0}"},
        {"wrong.json", "{\"device\": 0, \"segments\": 5, \"events\": 7}"},
    };
    static const char *const kinds[] = {"snapshot", "history"};
    char in[256], err[256], cmd[1024];
    path_of(err, sizeof err, "viz.err");
    for (size_t i = 0; i < sizeof inputs / sizeof inputs[0] + 1; i++)
        for (int k = 0; k < 2; k++) {
            if (i < sizeof inputs / sizeof inputs[0]) {
                path_of(in, sizeof in, inputs[i][0]);
                FILE *f = fopen(in, "w");
                ck_assert_ptr_nonnull(f);
                fputs(inputs[i][1], f);
                fclose(f);
            } else {
                path_of(in, sizeof in, "missing.json");
            }
            snprintf(cmd, sizeof cmd, "python3 '%s' %s '%s' -o '%s/out.html' 2> '%s'", VIZ,
                     kinds[k], in, g_dir, err);
            int rc = run(cmd);
            char *msg = slurp("viz.err");
            ck_assert_msg(rc != 0, "xseg-viz %s %s: exit status 0", kinds[k], in);
            ck_assert_msg(!strstr(msg, "Traceback"), "xseg-viz %s %s: %s", kinds[k], in, msg);
            ck_assert_msg(!strncmp(msg, "xseg-viz: ", 10) && count(msg, "\n") == 1,
                          "xseg-viz %s %s: not a one-line message: %s", kinds[k], in, msg);
            free(msg);
        }
}
END_TEST

int main(void)
{
    if (run("python3 -c 'import json, xml.etree.ElementTree' > /dev/null 2>&1") != 0) {
        printf("SKIP: python3 is not installed\n");
        return 77;
    }
    Suite *s = suite_create("monitor_viz");
    TCase *tc = tcase_create("viz");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, t_json_dumps_parse);
    tcase_add_test(tc, t_top_json_parses);
    tcase_add_test(tc, t_snapshot_picture);
    tcase_add_test(tc, t_snapshot_tags_picture);
    tcase_add_test(tc, t_history_picture);
    tcase_add_test(tc, t_viz_bad_input);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
