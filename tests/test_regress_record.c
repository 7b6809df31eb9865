/* test_regress_record.c: xseg-record end to end (issue 19, defect 8): the
 * tool reads traces through the project's trace reader, so every malformed
 * line its old parser let through (negative size, trailing junk, a sign, an
 * id that overflowed into the id map's empty marker, a NUL byte, a long line
 * split at the wrong line number) is rejected with exit status 1 naming the
 * file and the right line; bad option values (--pace -5, an overflowing
 * --history-size, --snapshot-at abc, ...) exit 2 naming the option and the
 * value; a replay error is the message printed, not replaced by a later
 * one.  Runs the built binary; skipped when the tools were not built. */
#include <check.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "support_common.h"

#define RECORD XSEG_BINARY_DIR "/tools/xseg-record/xseg-record"

typedef struct outcome {
    int status;      /* exit status, or 128 + signal */
    char err[4096];  /* what it wrote on stderr */
} outcome;

static char dir[64];

static void make_dir(void)
{
    snprintf(dir, sizeof dir, "/tmp/xseg-regress-record-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void remove_dir(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}

/* A path in the test's directory; the last 8 stay valid. */
static const char *path_in(const char *name)
{
    static char path[8][256];
    static int k;
    k = (k + 1) % 8;
    snprintf(path[k], sizeof path[k], "%s/%s", dir, name);
    return path[k];
}

static const char *write_trace(const char *name, const char *text, size_t n)
{
    const char *path = path_in(name);
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(text, 1, n, f), n);
    ck_assert_int_eq(fclose(f), 0);
    return path;
}

static const char *write_text(const char *name, const char *text)
{
    return write_trace(name, text, strlen(text));
}

/* Run xseg-record with argv[1..] = args (NULL-terminated). */
static outcome record(const char *const *args)
{
    outcome o = {0, ""};
    char *argv[32];
    size_t n = 0;
    argv[n++] = RECORD;
    while (args[n - 1] && n < 31) {
        argv[n] = (char *)args[n - 1];
        n++;
    }
    argv[n] = NULL;
    o.status = t_spawn(argv, path_in("stderr"), o.err, sizeof o.err);
    return o;
}

static int have_tool(void)
{
    if (access(RECORD, X_OK) == 0)
        return 1;
    printf("regress_record: %s not built: skipped\n", RECORD);
    return 0;
}

/* ---- malformed traces: rejected, naming file and line ---------------- */

typedef struct bad_trace {
    const char *name;
    const char *text;
    size_t len;        /* 0: strlen */
    int line;          /* the line the message must name */
    const char *what;  /* expected in the message */
} bad_trace;

static const bad_trace bad[] = {
    /* the old parser took "-5" as 2^64 - 5 */
    {"negative size", "a,1,100,0\na,2,-5,0\n", 0, 2, "negative bytes '-5'"},
    {"negative id", "a,-1,100,0\n", 0, 1, "negative id '-1'"},
    /* sscanf stopped at the junk and accepted the line */
    {"trailing junk after stream", "a,1,100,0junk\n", 0, 1, "non-numeric stream '0junk'"},
    {"trailing junk after free", "a,1,100,0\nf,1 x\n", 0, 2, "non-numeric id '1 x'"},
    {"trailing junk after bytes", "a,1,100kB,0\n", 0, 1, "non-numeric bytes '100kB'"},
    /* %llu accepts a sign and leading spaces */
    {"plus sign", "a,1,+100,0\n", 0, 1, "non-numeric bytes '+100'"},
    {"leading space", "a,1, 100,0\n", 0, 1, "non-numeric bytes ' 100'"},
    /* id 2^64 - 1 became key 0, the old map's empty marker */
    {"id 2^64-1", "a,18446744073709551615,100,0\n", 0, 1,
     "id 18446744073709551615 is too large"},
    {"id 2^64-1 twice", "a,1,5,0\na,18446744073709551615,100,0\na,18446744073709551615,7,0\n",
     0, 2, "too large"},
    {"id beyond 64 bits", "a,18446744073709551616,100,0\n", 0, 1, "overflows 64 bits"},
    /* the text after a NUL byte was never looked at */
    {"NUL after the stream", "a,1,100,0\0junk\nf,1\n", 19, 1, "embedded NUL byte at column 10"},
    {"NUL in a free", "a,1,100,0\nf,1\0\n", 15, 2, "embedded NUL byte at column 4"},
};

static void expect_rejected(const bad_trace *b, const char *path)
{
    const char *args[] = {path, "--quiet", NULL};
    outcome o = record(args);
    char want[300];
    ck_assert_msg(o.status == 1, "%s: exit %d (want 1); stderr: %s", b->name, o.status, o.err);
    snprintf(want, sizeof want, "%s:%d: ", path, b->line);
    ck_assert_msg(strstr(o.err, want), "%s: message does not name '%s': %s", b->name, want,
                  o.err);
    ck_assert_msg(strstr(o.err, b->what), "%s: message lacks '%s': %s", b->name, b->what,
                  o.err);
}

START_TEST(malformed_rejected)
{
    if (!have_tool())
        return;
    make_dir();
    const bad_trace *b = &bad[_i];
    const char *path = write_trace("bad.csv", b->text, b->len ? b->len : strlen(b->text));
    expect_rejected(b, path);
    remove_dir();
}
END_TEST

/* Lines longer than the old 4096-byte fgets buffer: a long comment is one
 * line (the old parser read its tail as line 3), a long event line is too
 * long, and the lines after keep their numbers. */
START_TEST(long_lines)
{
    if (!have_tool())
        return;
    make_dir();
    size_t n = 20000;
    char *text = malloc(n + 200);
    ck_assert_ptr_nonnull(text);
    strcpy(text, "a,1,100,0\n#");
    size_t len = strlen(text);
    memset(text + len, 'x', 9000);
    len += 9000;
    strcpy(text + len, "\nf,1\nf,1\n");
    len += strlen(text + len);
    bad_trace comment = {"long comment", NULL, 0, 4, "free of id 1 that is not live"};
    expect_rejected(&comment, write_trace("comment.csv", text, len));

    strcpy(text, "a,1,100,0\nf,1\na,2,");
    len = strlen(text);
    memset(text + len, '1', 5000);
    len += 5000;
    strcpy(text + len, ",0\n");
    len += 3;
    bad_trace event = {"long event line", NULL, 0, 3, "line too long"};
    expect_rejected(&event, write_trace("event.csv", text, len));
    free(text);
    remove_dir();
}
END_TEST

/* ---- options: exit 2 naming the option and the value --------------- */

typedef struct bad_option {
    const char *opt, *value;  /* value NULL: the option is last */
    const char *want;         /* expected in the message besides the option */
} bad_option;

static const bad_option bad_options[] = {
    {"--pace", "-5", "'-5'"},                       /* slept 71 min per 1000 events */
    {"--pace", "1e3", "'1e3'"},
    {"--pace", "", "''"},
    {"--pace", "10000001", "'10000001'"},
    {"--pace", "18446744073709551616", "'18446744073709551616'"},
    {"--history-size", "4294967297", "'4294967297'"},  /* wrapped to 1 */
    {"--history-size", "1000001", "'1000001'"},
    {"--history-size", "0", "'0'"},
    {"--history-size", "12x", "'12x'"},
    {"--snapshot-at", "abc", "'abc'"},              /* was event 0 */
    {"--snapshot-at", "-1", "'-1'"},                /* was "peak" */
    {"--snapshot-at", "3", "beyond the trace"},     /* the trace has 3 events */
    {"--snapshot-at", "99999999999999999999", "'99999999999999999999'"},
    {"--pace", NULL, "needs a value"},
    {"--frob", "1", "unknown option '--frob'"},
};

START_TEST(option_errors)
{
    if (!have_tool())
        return;
    make_dir();
    const bad_option *b = &bad_options[_i];
    const char *trace = write_text("ok.csv", "a,1,100,0\na,2,50,0\nf,1\n");
    const char *snap = path_in("snap.json");
    const char *args[] = {trace, "--snapshot", snap, "--history", path_in("hist.json"),
                          b->opt, b->value, NULL};
    outcome o = record(args);
    ck_assert_msg(o.status == 2, "%s %s: exit %d (want 2); stderr: %s", b->opt,
                  b->value ? b->value : "", o.status, o.err);
    ck_assert_msg(strstr(o.err, b->opt), "%s: message does not name the option: %s", b->opt,
                  o.err);
    ck_assert_msg(strstr(o.err, b->want), "%s: message lacks %s: %s", b->opt, b->want, o.err);
    ck_assert_msg(access(snap, F_OK) != 0, "%s: wrote a snapshot despite the error", b->opt);
    remove_dir();
}
END_TEST

static int nonempty(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && st.st_size > 0;
}

/* The edges of each range are accepted, and the outputs are written. */
START_TEST(options_in_range)
{
    if (!have_tool())
        return;
    make_dir();
    const char *trace = write_text("ok.csv", "a,1,100,0\na,2,50,7\nf,1\n");
    char snap[256], hist[256], stats[256];
    snprintf(snap, sizeof snap, "%s", path_in("snap.json"));
    snprintf(hist, sizeof hist, "%s", path_in("hist.json"));
    snprintf(stats, sizeof stats, "%s", path_in("stats.json"));
    const char *args[] = {trace, "--pace", "0", "--history-size", "1", "--snapshot-at", "2",
                          "--snapshot", snap, "--history", hist, "--stats", stats,
                          "--free-at-end", "--quiet", NULL};
    outcome o = record(args);
    ck_assert_msg(o.status == 0, "exit %d; stderr: %s", o.status, o.err);
    ck_assert(nonempty(snap) && nonempty(hist) && nonempty(stats));
    const char *args2[] = {trace, "--pace", "10000000", "--history-size", "1000000",
                           "--snapshot-at", "end", "--snapshot", snap, "--history", hist,
                           NULL};
    o = record(args2);
    ck_assert_msg(o.status == 0, "exit %d; stderr: %s", o.status, o.err);
    ck_assert_msg(strstr(o.err, "3 events"), "no summary: %s", o.err);
    remove_dir();
}
END_TEST

/* ---- the first error is the one printed ----------------------------- */

/* The allocation of event 0 fails (larger than the virtual range); the
 * snapshot due after event 0 used to run anyway and its own error
 * ("xseg_snapshot_json: N bytes needed") replaced the allocation's. */
START_TEST(first_error_kept)
{
    if (!have_tool())
        return;
    make_dir();
    const char *trace = write_text("huge.csv", "a,1,9223372036854775807,0\nf,1\n");
    char snap[256];
    snprintf(snap, sizeof snap, "%s", path_in("snap.json"));
    const char *args[] = {trace, "--snapshot", snap, "--snapshot-at", "0", NULL};
    outcome o = record(args);
    ck_assert_msg(o.status == 1, "exit %d; stderr: %s", o.status, o.err);
    ck_assert_msg(strstr(o.err, "9223372036854775807"), "the alloc error is lost: %s", o.err);
    ck_assert_msg(!strstr(o.err, "xseg_snapshot_json"), "a later error replaced it: %s", o.err);
    char want[300];
    snprintf(want, sizeof want, "%s:1: ", trace);
    ck_assert_msg(strstr(o.err, want), "the message does not name the line: %s", o.err);

    /* A trace error is reported as the reader words it, once. */
    const char *bad_file = write_text("bad.csv", "a,1,100,0\nf,2\n");
    const char *args2[] = {bad_file, "--conf", "backend:host", NULL};
    o = record(args2);
    ck_assert_int_eq(o.status, 1);
    ck_assert_msg(strstr(o.err, "free of unknown id 2"), "%s", o.err);
    int lines = 0;
    for (const char *p = o.err; (p = strstr(p, "xseg-record: ")) != NULL; p++)
        lines++;
    ck_assert_msg(lines == 1, "%d messages, want 1: %s", lines, o.err);
    remove_dir();
}
END_TEST

int main(void)
{
    Suite *s = suite_create("regress_record");
    TCase *tc = tcase_create("record");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, malformed_rejected, 0, (int)(sizeof bad / sizeof *bad));
    tcase_add_test(tc, long_lines);
    tcase_add_loop_test(tc, option_errors, 0,
                        (int)(sizeof bad_options / sizeof *bad_options));
    tcase_add_test(tc, options_in_range);
    tcase_add_test(tc, first_error_kept);
    suite_add_tcase(s, tc);
    return t_run(s);
}
