/* test_replay_json.c: xseg-replay's JSON output end to end: a small trace
 * whose growth must move cached pages reports the bytes moved and the
 * waits (syncs) next to the driver calls.  Skipped when the tool was not
 * built. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "support_common.h"

#define REPLAY XSEG_BINARY_DIR "/tools/xseg-replay/xseg-replay"

/* The number after "key": in the JSON text, or -1. */
static long long json_num(const char *json, const char *key)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(json, pat);
    return p ? atoll(p + strlen(pat)) : -1;
}

/* Run xseg-replay --json with `conf` on a trace holding `text`. */
static void replay_json(const char *text, const char *conf, char *out, size_t cap)
{
    char path[] = "/tmp/xseg-json-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "%s --json --conf %s %s", REPLAY, conf, path);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = '\0';
    ck_assert_int_eq(pclose(p), 0);
    unlink(path);
}

/* 32 MiB freed, 1 MiB live after it, then 40 MiB: over the release
 * threshold (the peak of live bytes), the 16 handles of the freed block
 * move under the new one. */
static const char *MOVING =
    "# xseg-trace v1\n"
    "a,1,33554432,1\n"
    "a,2,1048576,1\n"
    "f,1\n"
    "a,3,41943040,1\n"
    "f,3\n"
    "f,2\n";

START_TEST(reports_moves_and_syncs)
{
    if (access(REPLAY, X_OK) != 0) {
        printf("replay_json: %s not built: skipped\n", REPLAY);
        return;
    }
    static char out[16384];
    replay_json(MOVING, "backend:host", out, sizeof out);
    ck_assert_int_eq(json_num(out, "moved_bytes"), 32ll << 20);
    ck_assert_int_eq(json_num(out, "syncs"), 0);
    ck_assert_int_eq(json_num(out, "peak_mapped_bytes"), 42ll << 20);
    /* without the threshold nothing moves: 32 + 2 + 40 MiB mapped */
    replay_json(MOVING, "backend:host,release_threshold:unlimited", out, sizeof out);
    ck_assert_int_eq(json_num(out, "moved_bytes"), 0);
    ck_assert_int_eq(json_num(out, "peak_mapped_bytes"), 74ll << 20);
}
END_TEST

/* The ring of test_slack as a trace: 64 live blocks of mixed sizes, the
 * oldest freed first, 8 passes over 1024 sizes. */
static char *ring_trace(void)
{
    size_t cap = 64 + 8 * 1024 * 48, n = 0;
    char *t = malloc(cap);
    ck_assert_ptr_nonnull(t);
    n += (size_t)snprintf(t, cap, "# xseg-trace v1\n");
    for (unsigned i = 0; i < 8 * 1024; i++) {
        if (i >= 64)
            n += (size_t)snprintf(t + n, cap - n, "f,%u\n", i - 64);
        n += (size_t)snprintf(t + n, cap - n, "a,%u,%zu,1\n", i, t_ring_size(i % 1024));
    }
    return t;
}

START_TEST(reports_the_slack_governors_grant)
{
    if (access(REPLAY, X_OK) != 0) {
        printf("replay_json: %s not built: skipped\n", REPLAY);
        return;
    }
    static char out[16384];
    char *ring = ring_trace();
    replay_json(ring, "backend:host,host_capacity:4GB", out, sizeof out);
    ck_assert_int_eq(json_num(out, "slack_granted"), 0); /* off by default */
    replay_json(ring, "backend:host,host_capacity:4GB,release_slack_max:0.3", out, sizeof out);
    long long g = json_num(out, "slack_granted"), live = json_num(out, "peak_live_bytes");
    ck_assert_msg(g > live / 10 && g <= live * 3 / 10 + (live >> 7), "granted %lld, live %lld",
                  g, live);
    free(ring);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("replay_json");
    TCase *tc = tcase_create("json");
    tcase_add_test(tc, reports_moves_and_syncs);
    tcase_add_test(tc, reports_the_slack_governors_grant);
    suite_add_tcase(s, tc);
    return t_run(s);
}
