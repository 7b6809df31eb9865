/* test_monitor_promparse.c: the Prometheus text of xseg_stats_prometheus
 * and of `xseg-top --prometheus` read by real parsers: `promtool check
 * metrics` (Debian package prometheus) and the text parser of
 * prometheus_client (python3-prometheus-client), each where installed:
 * also a process name that is not UTF-8, xseg-top's families and HELP
 * lines against the library's, and the tag families (a `tag` label) of
 * both for an allocator with a tag asleep.
 * With neither, the whole test is skipped (exit status 77). */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tag_fields.h"
#include "xseg.h"

#define MIB ((size_t)1 << 20)
#define TOP XSEG_BINARY_DIR "/tools/xseg-top/xseg-top"

static int g_promtool;
static const char *g_python; /* a python3 with prometheus_client, or NULL */

/* Parses argv[1], checks that every family has samples, that counters are
 * counters, and that argv[2]=argv[3] (series=value) holds. */
static const char *const PY_CHECK =
    "import sys\n"
    "from prometheus_client.parser import text_string_to_metric_families as parse\n"
    "fams = list(parse(open(sys.argv[1]).read()))\n"
    "assert len(fams) >= int(sys.argv[4]), len(fams)\n"
    "vals = {}\n"
    "for f in fams:\n"
    "    assert f.name.startswith('xseg_'), f.name\n"
    "    assert f.type in ('gauge', 'counter'), (f.name, f.type)\n"
    "    for s in f.samples:\n"
    "        key = s.name + '{' + ','.join('%s=\"%s\"' % kv for kv in sorted(s.labels.items())) + '}'\n"
    "        assert key not in vals, 'duplicate series ' + key\n"
    "        vals[key] = s.value\n"
    "want = sys.argv[2]\n"
    "assert vals.get(want) == float(sys.argv[3]), (want, vals.get(want))\n"
    "print('parsed %d families, %d series' % (len(fams), len(vals)))\n";

static int run(const char *cmd)
{
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    ck_assert_int_eq(fclose(f), 0);
}

/* promtool prints lint problems and exits non-zero on errors: require a
 * clean exit and no output at all. */
static void check_promtool(const char *path)
{
    char cmd[1024], out[1024];
    if (!g_promtool)
        return;
    snprintf(cmd, sizeof cmd, "promtool check metrics < '%s' > '%s.lint' 2>&1", path, path);
    ck_assert_int_eq(run(cmd), 0);
    snprintf(out, sizeof out, "%s.lint", path);
    FILE *f = fopen(out, "r");
    ck_assert_ptr_nonnull(f);
    char line[512];
    ck_assert_msg(fgets(line, sizeof line, f) == NULL, "promtool: %s", line);
    fclose(f);
}

static void check_python(const char *path, const char *series, unsigned long long v, int fams)
{
    char script[512], cmd[2048];
    if (!g_python)
        return;
    snprintf(script, sizeof script, "%s.py", path);
    write_file(script, PY_CHECK);
    snprintf(cmd, sizeof cmd, "%s '%s' '%s' '%s' %llu %d", g_python, script, path, series, v, fams);
    ck_assert_int_eq(run(cmd), 0);
}

static void remove_files(const char *path)
{
    char p[512];
    unlink(path);
    snprintf(p, sizeof p, "%s.py", path);
    unlink(p);
    snprintf(p, sizeof p, "%s.lint", path);
    unlink(p);
}

static char *render(xseg_t *xs)
{
    size_t len = 0;
    xseg_stats_prometheus(xs, NULL, 0, &len);
    char *buf = malloc(len + 1);
    ck_assert_int_eq(xseg_stats_prometheus(xs, buf, len + 1, &len), XSEG_OK);
    return buf;
}

static void tmp_path(char *buf, size_t len, const char *name)
{
    snprintf(buf, len, "/tmp/xseg-promparse-%d-%s", (int)getpid(), name);
}

START_TEST(t_library_text)
{
    const char *confs[] = {"backend:host,host_capacity:256MB",
                           "backend:host,host_capacity:256MB,max_mapped:64MB"};
    for (int c = 0; c < 2; c++) {
        xseg_t *xs = NULL;
        ck_assert_int_eq(xseg_create(&xs, 0, confs[c]), XSEG_OK);
        void *p[4];
        for (int i = 0; i < 4; i++)
            ck_assert_int_eq(xseg_alloc(xs, (size_t)(i + 1) * MIB, NULL, &p[i]), XSEG_OK);
        ck_assert_int_eq(xseg_free(xs, p[1]), XSEG_OK);
        xseg_stats s = {.size = sizeof s};
        xseg_get_stats(xs, &s);
        char path[256];
        tmp_path(path, sizeof path, "lib.prom");
        char *text = render(xs);
        write_file(path, text);
        check_promtool(path);
        check_python(path, "xseg_allocated_bytes{device=\"0\"}", s.allocated_bytes.current, 30);
        check_python(path, "xseg_driver_calls_total{device=\"0\",op=\"map\"}",
                     s.driver_calls[XSEG_OP_MAP], 30);
        if (c == 1)
            check_python(path, "xseg_mapped_cap_bytes{device=\"0\"}", 64 * MIB, 30);
        remove_files(path);
        free(text);
        xseg_destroy(xs);
    }
}
END_TEST

START_TEST(t_top_text)
{
    if (access(TOP, X_OK) != 0) {
        fprintf(stderr, "t_top_text: xseg-top not built, not run\n");
        return;
    }
    char dir[128], path[256], cmd[1024];
    snprintf(dir, sizeof dir, "/tmp/xseg-promparse-dir.XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    setenv("XSEG_SHM_DIR", dir, 1);
    xseg_t *a = NULL, *b = NULL;
    ck_assert_int_eq(xseg_create(&a, 0, "backend:host,host_capacity:256MB,stats_shm:on"), XSEG_OK);
    ck_assert_int_eq(xseg_create(&b, 0, "backend:host,host_capacity:256MB,stats_shm:on,"
                                        "max_mapped:128MB"), XSEG_OK);
    void *p;
    ck_assert_int_eq(xseg_alloc(a, 3 * MIB, NULL, &p), XSEG_OK);
    tmp_path(path, sizeof path, "top.prom");
    snprintf(cmd, sizeof cmd, TOP " --prometheus --dir '%s' -o '%s'", dir, path);
    ck_assert_int_eq(run(cmd), 0);
    check_promtool(path);
    char series[256];
    snprintf(series, sizeof series,
             "xseg_allocated_bytes{device=\"0\",pid=\"%d\",process=\"test_monitor_promparse\","
             "slot=\"0\"}", (int)getpid());
    check_python(path, series, 3 * MIB, 15);
    check_python(path, "xseg_top_processes{}", 1, 15);
    remove_files(path);
    xseg_destroy(a);
    xseg_destroy(b);
    rmdir(dir);
}
END_TEST

/* Tags in use, one asleep: the library's and xseg-top's texts parse, with
 * the tag families' samples. */
START_TEST(t_tagged_text)
{
    char dir[128], path[256], cmd[1024], series[256];
    snprintf(dir, sizeof dir, "/tmp/xseg-promparse-dir.XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    setenv("XSEG_SHM_DIR", dir, 1);
    xseg_t *xs = NULL;
    ck_assert_int_eq(xseg_create(&xs, 0, "backend:host,host_capacity:256MB,stats_shm:on"), XSEG_OK);
    int w;
    ck_assert_int_eq(xseg_tag_id("pp_w", &w), XSEG_OK);
    xseg_shm_tag_name(w, "pp_w"); /* what tags.c's registration is to do (tag_fields.h) */
    void *p, *q;
    ck_assert_int_eq(xseg_alloc_tagged(xs, 4 * MIB, NULL, w, &p), XSEG_OK);
    ck_assert_int_eq(xseg_sleep(xs, &w, 1, XSEG_SLEEP_BACKUP), XSEG_OK);
    ck_assert_int_eq(xseg_alloc(xs, MIB, NULL, &q), XSEG_OK); /* publishes the tag rows */
    tmp_path(path, sizeof path, "tags.prom");
    char *text = render(xs);
    write_file(path, text);
    check_promtool(path);
    check_python(path, "xseg_tag_sleeping_bytes{device=\"0\",tag=\"pp_w\"}", 4 * MIB, 40);
    check_python(path, "xseg_tag_asleep{device=\"0\",tag=\"pp_w\"}", 1, 40);
    check_python(path, "xseg_tag_live_bytes{device=\"0\",tag=\"default\"}", MIB, 40);
    remove_files(path);
    free(text);
    if (access(TOP, X_OK) == 0) {
        snprintf(cmd, sizeof cmd, TOP " --prometheus --dir '%s' -o '%s'", dir, path);
        ck_assert_int_eq(run(cmd), 0);
        check_promtool(path);
        snprintf(series, sizeof series,
                 "xseg_tag_backup_bytes{device=\"0\",pid=\"%d\",process=\"test_monitor_promparse\","
                 "slot=\"0\",tag=\"pp_w\"}", (int)getpid());
        check_python(path, series, 4 * MIB, 40);
        remove_files(path);
    }
    xseg_destroy(xs);
    rmdir(dir);
}
END_TEST

/* Parses argv[1] (as UTF-8: a bad byte fails), finds the series of pid
 * argv[2] and checks its process label equals the UTF-8 of hex argv[3],
 * and that both texts have the same families and HELP lines (argv[4], the
 * library's text; xseg-top adds xseg_top_processes). */
static const char *const PY_UTF8 =
    "import sys\n"
    "from prometheus_client.parser import text_string_to_metric_families as parse\n"
    "def fams(path):\n"
    "    return {f.name: (f.type, f.documentation) for f in parse(open(path, encoding='utf-8').read())}\n"
    "top = fams(sys.argv[1])\n"
    "lib = fams(sys.argv[4])\n"
    "assert top.pop('xseg_top_processes')[0] == 'gauge'\n"
    "assert top == lib, (sorted(set(top.items()) ^ set(lib.items())))\n"
    "want = bytes.fromhex(sys.argv[3]).decode('utf-8')\n"
    "seen = 0\n"
    "for f in parse(open(sys.argv[1], encoding='utf-8').read()):\n"
    "    for s in f.samples:\n"
    "        if s.labels.get('pid') == sys.argv[2]:\n"
    "            assert s.labels['process'] == want, (s.labels['process'], want)\n"
    "            seen += 1\n"
    "assert seen >= len(lib), seen\n"
    "print('process label %r in %d series' % (want, seen))\n";

/* A process name that is not UTF-8: xseg-top's text parses, the label
 * holds U+FFFD for each bad byte, and its families and HELP lines are the
 * library's. */
START_TEST(t_top_text_not_utf8)
{
    if (access(TOP, X_OK) != 0 || !g_python) {
        fprintf(stderr, "t_top_text_not_utf8: needs xseg-top and prometheus_client, not run\n");
        return;
    }
    char dir[128], path[256], lib[256], script[300], cmd[2048];
    snprintf(dir, sizeof dir, "/tmp/xseg-promparse-dir.XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    setenv("XSEG_SHM_DIR", dir, 1);
    char name[] = "\xff\xfe" "bad\"name\\";
    char *saved = program_invocation_short_name;
    program_invocation_short_name = name;
    xseg_t *xs = NULL;
    ck_assert_int_eq(xseg_create(&xs, 0, "backend:host,host_capacity:256MB,stats_shm:on"), XSEG_OK);
    program_invocation_short_name = saved;
    tmp_path(path, sizeof path, "utf8.prom");
    tmp_path(lib, sizeof lib, "utf8-lib.prom");
    snprintf(cmd, sizeof cmd, TOP " --prometheus --dir '%s' -o '%s'", dir, path);
    ck_assert_int_eq(run(cmd), 0);
    char *text = render(xs);
    write_file(lib, text);
    free(text);
    check_promtool(path);
    snprintf(script, sizeof script, "%s.py", path);
    write_file(script, PY_UTF8);
    /* U+FFFD U+FFFD then bad"name\ */
    snprintf(cmd, sizeof cmd, "%s '%s' '%s' %d efbfbdefbfbd626164226e616d655c '%s'", g_python,
             script, path, (int)getpid(), lib);
    ck_assert_int_eq(run(cmd), 0);
    remove_files(path);
    unlink(lib);
    xseg_destroy(xs);
    rmdir(dir);
}
END_TEST

static const char *find_python(void)
{
    static const char *const cands[] = {"python3", "/usr/bin/python3"};
    for (size_t i = 0; i < sizeof cands / sizeof cands[0]; i++) {
        char cmd[256];
        snprintf(cmd, sizeof cmd, "%s -c 'import prometheus_client.parser' > /dev/null 2>&1",
                 cands[i]);
        if (run(cmd) == 0)
            return cands[i];
    }
    return NULL;
}

int main(void)
{
    g_promtool = run("command -v promtool > /dev/null 2>&1") == 0;
    g_python = find_python();
    if (!g_promtool && !g_python) {
        printf("SKIP: neither promtool (Debian package prometheus) nor python3's "
               "prometheus_client (python3-prometheus-client) is installed\n");
        return 77;
    }
    printf("parsers: promtool %s, prometheus_client %s\n", g_promtool ? "yes" : "no",
           g_python ? g_python : "no");
    Suite *s = suite_create("monitor_promparse");
    TCase *tc = tcase_create("promparse");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, t_library_text);
    tcase_add_test(tc, t_top_text);
    tcase_add_test(tc, t_top_text_not_utf8);
    tcase_add_test(tc, t_tagged_text);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
