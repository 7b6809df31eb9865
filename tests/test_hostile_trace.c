/* test_hostile_trace.c: malformed trace files through the xseg-replay tool,
 * end to end: hand-written bad files (each must fail with exit status 1 and
 * a message naming the file and line) and random byte mutations of a valid
 * trace (exit status 0 or 1, never a signal, a message when 1).  Skipped
 * when the tool was not built.  Prints how many files were tried. */
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

#define REPLAY XSEG_BINARY_DIR "/tools/xseg-replay/xseg-replay"

typedef struct outcome {
    int status;       /* exit status, or 128 + signal */
    char err[2048];   /* what it wrote on stderr */
} outcome;

static char dir[64];

static void make_dir(void)
{
    snprintf(dir, sizeof dir, "/tmp/xseg-hostile-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void write_file(const char *path, const char *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(data, 1, n, f), n);
    fclose(f);
}

/* Run xseg-replay on one trace file. */
static outcome replay(const char *trace)
{
    outcome o = {0, ""};
    char errpath[300];
    snprintf(errpath, sizeof errpath, "%s/stderr", dir);
    char *argv[] = {REPLAY, "--conf", "backend:host,host_capacity:1GB", "--verify",
                    (char *)trace, NULL};
    o.status = t_spawn(argv, errpath, o.err, sizeof o.err);
    return o;
}

static int have_tool(void)
{
    if (access(REPLAY, X_OK) == 0)
        return 1;
    printf("hostile_trace: %s not built: skipped\n", REPLAY);
    return 0;
}

/* ---- hand-written malformed traces: (content, line of the error) ---- */

typedef struct bad_trace {
    const char *text;
    size_t len;       /* 0: strlen */
    int line;         /* line named in the message, 0: any */
} bad_trace;

static const bad_trace bad[] = {
    {"a,1,100,0\nf,2\n", 0, 2},          {"a,1,100,0\na,1,5,0\n", 0, 2},
    {"f,1\n", 0, 1},                     {"a,1\n", 0, 1},
    {"a,1,100\n", 0, 1},                 {"a,1,100,0,5\n", 0, 1},
    {"a,,100,0\n", 0, 1},                {"a,1,,0\n", 0, 1},
    {"a,1,100,\n", 0, 1},                {"a,-1,100,0\n", 0, 1},
    {"a,1,-100,0\n", 0, 1},              {"a,1,0x10,0\n", 0, 1},
    {"a,1,1e3,0\n", 0, 1},               {"A,1,100,0\n", 0, 1},
    {"a;1;100;0\n", 0, 1},               {"x\n", 0, 1},
    {",\n", 0, 1},                       {"a,1,100,0\nf,1\nf,1\n", 0, 3},
    {"a,99999999999999999999,1,0\n", 0, 1},
    {"a,1,9223372036854775808,0\n", 0, 1},
    {"a,1,100,9223372036854775808\n", 0, 1},
    {"a,1,100,0\n\0f,1\n", 14, 2},       {"# ok\na,1,100,0\nf 1\n", 0, 3},
    {"a,1, 100,0\n", 0, 1},              {"a,1,100,0\rf,1\n", 0, 1},
    {"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03garbage", 18, 0},
    {"\x1f\x8b", 2, 0},                  {"\xff\xfe\x00\x01\x02", 5, 1},
};

static void expect_clear_failure(const char *path, const bad_trace *b, size_t i)
{
    outcome o = replay(path);
    ck_assert_msg(o.status == 1, "bad trace %zu: exit %d (want 1); stderr: %s", i, o.status,
                  o.err);
    ck_assert_msg(strstr(o.err, path) || strstr(o.err, strrchr(path, '/') + 1),
                  "bad trace %zu: message does not name the file: %s", i, o.err);
    if (b->line) {
        char want[32];
        snprintf(want, sizeof want, ":%d:", b->line);
        ck_assert_msg(strstr(o.err, want), "bad trace %zu: message does not name line %d: %s",
                      i, b->line, o.err);
    }
}

START_TEST(malformed_files)
{
    if (!have_tool())
        return;
    make_dir();
    char path[300];
    size_t n = sizeof bad / sizeof bad[0];
    for (size_t i = 0; i < n; i++) {
        snprintf(path, sizeof path, "%s/bad%zu.txt", dir, i);
        write_file(path, bad[i].text, bad[i].len ? bad[i].len : strlen(bad[i].text));
        expect_clear_failure(path, &bad[i], i);
        unlink(path);
    }
    /* A line longer than the reader's limit; a missing file; a directory. */
    size_t big = 10000;
    char *line = malloc(big);
    memset(line, '9', big);
    memcpy(line, "a,1,", 4);
    snprintf(path, sizeof path, "%s/long.txt", dir);
    write_file(path, line, big);
    free(line);
    bad_trace any = {"", 0, 1};
    expect_clear_failure(path, &any, n);
    unlink(path);
    snprintf(path, sizeof path, "%s/missing.txt", dir);
    ck_assert_int_eq(replay(path).status, 1);
    ck_assert_int_eq(replay(dir).status, 1);
    char errpath[300];
    snprintf(errpath, sizeof errpath, "%s/stderr", dir);
    unlink(errpath);
    rmdir(dir);
    printf("hostile_trace: %zu malformed trace files rejected with file and line\n", n + 3);
}
END_TEST

/* ---- random mutations of a valid trace ---- */

static size_t base_trace(char *buf, size_t cap)
{
    size_t pos = 0;
    pos += (size_t)snprintf(buf + pos, cap - pos, "# xseg-trace v1\n");
    for (int i = 0; i < 40; i++)
        pos += (size_t)snprintf(buf + pos, cap - pos, "a,%d,%d,%d\n", i, 1000 * (i + 1) * (i % 7 + 1), i % 3);
    for (int i = 0; i < 40; i += 2)
        pos += (size_t)snprintf(buf + pos, cap - pos, "f,%d\n", i);
    return pos;
}

static size_t mutate(char *buf, size_t n, size_t cap, unsigned *seed)
{
    int edits = 1 + rand_r(seed) % 5;
    static const char pool[] = "af,#0123456789-+ \r\n\t:x\xff";
    for (int e = 0; e < edits && n > 1; e++) {
        size_t at = (size_t)rand_r(seed) % n;
        char c = pool[rand_r(seed) % (int)(sizeof pool - 1)];
        switch (rand_r(seed) % 3) {
        case 0: buf[at] = c; break;
        case 1: memmove(buf + at, buf + at + 1, n - at - 1); n--; break;
        default:
            if (n + 1 < cap) {
                memmove(buf + at + 1, buf + at, n - at);
                buf[at] = c;
                n++;
            }
        }
    }
    return n;
}

START_TEST(mutated_files)
{
    if (!have_tool())
        return;
    make_dir();
    char base[4096], buf[4200], path[300];
    size_t bn = base_trace(base, sizeof base);
    const char *s = getenv("XSEG_HOSTILE_TRACES");
    int runs = s && *s ? atoi(s) : 300, failed = 0;
    unsigned seed = 4242;
    snprintf(path, sizeof path, "%s/mut.txt", dir);
    for (int i = 0; i < runs; i++) {
        memcpy(buf, base, bn);
        size_t n = mutate(buf, bn, sizeof buf, &seed);
        write_file(path, buf, n);
        outcome o = replay(path);
        ck_assert_msg(o.status == 0 || o.status == 1, "mutation %d: exit %d; stderr: %s", i,
                      o.status, o.err);
        if (o.status == 1) {
            ck_assert_msg(strstr(o.err, "mut.txt"), "mutation %d: no message: %s", i, o.err);
            failed++;
        }
    }
    unlink(path);
    snprintf(path, sizeof path, "%s/stderr", dir);
    unlink(path);
    rmdir(dir);
    printf("hostile_trace: %d mutated traces replayed: %d rejected with a message, %d valid\n",
           runs, failed, runs - failed);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("hostile_trace");
    TCase *tc = tcase_create("replay");
    tcase_set_timeout(tc, 0);
    tcase_add_test(tc, malformed_files);
    tcase_add_test(tc, mutated_files);
    suite_add_tcase(s, tc);
    return t_run(s);
}
