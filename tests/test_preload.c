/* test_preload.c: libxseg_preload.so under an application that never names
 * xseg (issue 17, docs/preload.md), on the host backend.  The application
 * (tests/preload/preload_app.c) runs against stand-ins for the CUDA runtime
 * and driver (tests/preload/fakecudart.c, fakecuda.c: malloc'd memory,
 * counted calls, a driver table reached through cuGetProcAddress), once
 * plainly and once with the preload library, and reports each call's
 * result, whether the stand-in driver owns each pointer, and the stand-ins'
 * counters.  The suite compares: xseg served the allocations, through every
 * route (runtime, driver, cuGetProcAddress, dlsym, the runtime's table);
 * the others reached the real functions with the same results; the cap
 * shows in the memory info; fork, threads on two devices, a refused conf
 * and the xseg-run wrapper behave; pointer queries of xseg memory are
 * answered from its blocks (interior pointers too), others reach the real
 * functions, and IPC handles of xseg memory are refused (query mode). */
#include <check.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "support_common.h"

#define PRE_DIR XSEG_BINARY_DIR "/tests/preload"
#define APP PRE_DIR "/preload_app"
#define FAKE_DRV PRE_DIR "/libfakecuda.so"
#define PRELOAD XSEG_BINARY_DIR "/tools/preload/libxseg_preload.so"
#define XSEG_RUN XSEG_BINARY_DIR "/tools/preload/xseg-run"
#define CONF "backend:host,max_mapped:256m"
#define OUT_CAP (1 << 16)

typedef struct run {
    int status;
    char out[OUT_CAP];
    char err[OUT_CAP];
} run;

static void slurp(int fd, char *buf)
{
    size_t n = 0;
    ssize_t r;
    while (n + 1 < OUT_CAP && (r = read(fd, buf + n, OUT_CAP - 1 - n)) > 0)
        n += (size_t)r;
    buf[n] = '\0';
}

/* Run argv with the stand-ins' settings, `preload` (NULL: none) in
 * LD_PRELOAD and `env` ("NAME=value" strings, NULL-terminated) set. */
static void spawn(run *r, char *const argv[], const char *preload, const char *const *env)
{
    char errpath[] = "/tmp/xseg_preload_errXXXXXX";
    int efd = mkstemp(errpath);
    int out[2];
    ck_assert_int_ge(efd, 0);
    ck_assert_int_eq(pipe(out), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        dup2(out[1], 1);
        dup2(efd, 2);
        close(out[0]);
        setenv("FAKE_LIBCUDA", FAKE_DRV, 1);
        setenv("XSEG_PRELOAD_LIBCUDA", FAKE_DRV, 1);
        setenv("XSEG_CONF", CONF, 1);
        setenv("ASAN_OPTIONS", "verify_asan_link_order=0", 1); /* sanitizer builds */
        unsetenv("XSEG_PRELOAD_FREE");
        unsetenv("XSEG_PRELOAD_STATS");
        unsetenv("LD_PRELOAD");
        if (preload)
            setenv("LD_PRELOAD", preload, 1);
        for (size_t i = 0; env && env[i]; i++)
            putenv((char *)env[i]);
        execv(argv[0], argv);
        _exit(126);
    }
    close(out[1]);
    slurp(out[0], r->out);
    close(out[0]);
    int st = 0;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    r->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    lseek(efd, 0, SEEK_SET);
    slurp(efd, r->err);
    close(efd);
    unlink(errpath);
}

static void app(run *r, const char *mode, const char *preload, const char *const *env)
{
    char *argv[] = {(char *)APP, (char *)mode, NULL};
    spawn(r, argv, preload, env);
}

/* The line that starts with `head` (followed by a space), or NULL. */
static const char *line(const char *out, const char *head)
{
    size_t n = strlen(head);
    for (const char *p = out; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
        if (strncmp(p, head, n) == 0 && p[n] == ' ')
            return p + n + 1;
    return NULL;
}

/* "op NAME rc=R fake=F": 1 when found. */
static int op(const char *out, const char *name, int *rc, int *fake)
{
    char head[128];
    snprintf(head, sizeof head, "op %s", name);
    const char *l = line(out, head);
    return l && sscanf(l, "rc=%d fake=%d", rc, fake) == 2;
}

static long count(const char *out, const char *name)
{
    char head[128];
    long v = -1;
    snprintf(head, sizeof head, "count %s", name);
    const char *l = line(out, head);
    return l && sscanf(l, "%ld", &v) == 1 ? v : -1;
}

static void meminfo(const char *out, const char *which, size_t *free_b, size_t *total)
{
    char head[64];
    int rc = -1;
    snprintf(head, sizeof head, "meminfo %s", which);
    const char *l = line(out, head);
    ck_assert_msg(l && sscanf(l, "rc=%d free=%zu total=%zu", &rc, free_b, total) == 3,
                  "no meminfo %s line in:\n%s", which, out);
    ck_assert_int_eq(rc, 0);
}

static void assert_clean(const run *r, const char *what)
{
    ck_assert_msg(r->status == 0 && !strstr(r->out, " FAIL"),
                  "%s: exit %d\n--- stdout\n%s\n--- stderr\n%s", what, r->status, r->out, r->err);
}

static void assert_op(const run *r, const char *name, int rc, int fake)
{
    int got_rc = -9, got_fake = -9;
    ck_assert_msg(op(r->out, name, &got_rc, &got_fake), "no op %s in:\n%s", name, r->out);
    ck_assert_msg(got_rc == rc && got_fake == fake, "op %s: rc=%d fake=%d, expected rc=%d fake=%d",
                  name, got_rc, got_fake, rc, fake);
}

static run g_base, g_pre;

static void basic_runs(void)
{
    app(&g_base, "basic", NULL, NULL);
    app(&g_pre, "basic", PRELOAD, NULL);
    assert_clean(&g_base, "without preload");
    assert_clean(&g_pre, "with preload");
}

/* Every call gives the same result with and without xseg; every
 * allocation the stand-in served without it, xseg serves with it. */
START_TEST(same_results_xseg_serves)
{
    basic_runs();
    int n = 0, served = 0;
    for (const char *p = g_base.out; (p = strstr(p, "op ")) != NULL; p += 3) {
        char name[64];
        int rc, fake, rc2, fake2;
        if (sscanf(p, "op %63s rc=%d fake=%d", name, &rc, &fake) != 3)
            continue;
        ck_assert_msg(op(g_pre.out, name, &rc2, &fake2), "op %s missing with preload", name);
        ck_assert_msg(rc == rc2, "op %s: rc %d without xseg, %d with it", name, rc, rc2);
        n++;
        if (strncmp(name, "alloc_", 6) == 0 && strcmp(name, "alloc_rt_zero") != 0) {
            ck_assert_msg(fake == 1 && fake2 == 0, "op %s: stand-in owns it %d / %d", name, fake,
                          fake2);
            served++;
        }
    }
    ck_assert_int_ge(n, 30);
    ck_assert_int_ge(served, 15);
}
END_TEST

/* The stand-ins saw only what xseg passes through: the zero-size
 * cudaMalloc, the foreign, garbage and NULL frees. */
START_TEST(stand_ins_see_only_pass_through)
{
    basic_runs();
    ck_assert_int_gt(count(g_base.out, "fake.cuMemAlloc_v2"), 10);
    ck_assert_int_eq(count(g_pre.out, "fake.cuMemAlloc_v2"), 0);
    ck_assert_int_eq(count(g_pre.out, "fake.cuMemAllocAsync"), 0);
    ck_assert_int_eq(count(g_pre.out, "fake.cuMemAllocAsync_ptsz"), 0);
    ck_assert_int_eq(count(g_pre.out, "fake.alloc_dev0"), 0);
    ck_assert_int_eq(count(g_pre.out, "fakert.cudaMalloc"), 1);      /* size 0 */
    ck_assert_int_eq(count(g_pre.out, "fakert.cudaMallocAsync"), 0);
    ck_assert_int_eq(count(g_pre.out, "fakert.cudaFree"), 3);        /* foreign, garbage, NULL */
    ck_assert_int_eq(count(g_pre.out, "fake.cuMemFree_v2"), 5);      /* 2 foreign, 2 garbage, 0 */
    ck_assert_int_eq(count(g_pre.out, "fake.cuMemFreeAsync"), 0);
    assert_op(&g_pre, "free_foreign_rt", 0, -1);  /* reached the real free, which knew it */
    assert_op(&g_pre, "free_garbage_rt", 1, -1);  /* and its error */
    assert_op(&g_pre, "free_null_rt", 0, -1);
}
END_TEST

/* Pointers from cuGetProcAddress (both versions), from dlsym on a handle
 * and the runtime's own driver table reach xseg; the 32-bit cuMemAlloc
 * asked with an old ABI version is left alone. */
START_TEST(get_proc_address_routing)
{
    basic_runs();
    static const char *const routes[] = {"alloc_getproc_v2", "alloc_getproc_v1", "alloc_dlsym",
                                         "alloc_table", "alloc_drv_async_ptsz"};
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
        assert_op(&g_base, routes[i], 0, 1);
        assert_op(&g_pre, routes[i], 0, 0);
    }
    ck_assert_ptr_nonnull(strstr(g_pre.out, "check getproc_32bit_untouched ok"));
    ck_assert_ptr_nonnull(strstr(g_pre.out, "check alloc_ctor ok"));
    assert_op(&g_pre, "alloc_ctor", 0, 0); /* before main */
}
END_TEST

/* cudaMemGetInfo / cuMemGetInfo report the cap (256 MiB, 32 MiB live);
 * without a cap the real figures. */
START_TEST(mem_info_reports_cap)
{
    basic_runs();
    size_t f, t;
    meminfo(g_base.out, "rt", &f, &t);
    ck_assert_uint_eq(t, 80ull << 30);
    for (int i = 0; i < 2; i++) {
        meminfo(g_pre.out, i ? "drv" : "rt", &f, &t);
        ck_assert_uint_eq(t, 256 * MiB);
        ck_assert_uint_le(f, 224 * MiB);
        ck_assert_uint_ge(f, 200 * MiB);
    }
    run r;
    const char *env[] = {"XSEG_CONF=backend:host", NULL};
    app(&r, "basic", PRELOAD, env);
    assert_clean(&r, "no cap");
    meminfo(r.out, "rt", &f, &t);
    ck_assert_uint_eq(t, 80ull << 30);
}
END_TEST

/* XSEG_PRELOAD_FREE=sync: every cudaFree of xseg memory waits for the
 * device (cuCtxSynchronize); =stream: none does; the default quarantine
 * syncs less than sync does. */
START_TEST(free_modes)
{
    basic_runs();
    ck_assert_int_eq(count(g_base.out, "fake.cuCtxSynchronize"), 0);
    run r;
    const char *sync_env[] = {"XSEG_PRELOAD_FREE=sync", NULL};
    app(&r, "basic", PRELOAD, sync_env);
    assert_clean(&r, "sync frees");
    long per_free = count(r.out, "fake.cuCtxSynchronize");
    ck_assert_int_ge(per_free, 10);
    ck_assert_int_lt(count(g_pre.out, "fake.cuCtxSynchronize"), per_free);
    const char *stream_env[] = {"XSEG_PRELOAD_FREE=stream", NULL};
    app(&r, "basic", PRELOAD, stream_env);
    assert_clean(&r, "stream frees");
    ck_assert_int_eq(count(r.out, "fake.cuCtxSynchronize"), 0);
    ck_assert_int_eq(count(r.out, "fake.cuMemAlloc_v2"), 0);
    const char *zero_env[] = {"XSEG_PRELOAD_QUARANTINE=0", NULL}; /* no quarantine: sync */
    app(&r, "basic", PRELOAD, zero_env);
    assert_clean(&r, "quarantine 0");
    ck_assert_int_eq(count(r.out, "fake.cuCtxSynchronize"), per_free);
}
END_TEST

/* ---- the quarantine (churn mode of the application) ---- */

typedef struct churn_line {
    long frees, syncs;
    int reused, errors;
} churn_line;

static churn_line churn_of(const run *r)
{
    churn_line c = {-1, -1, -1, -1};
    const char *l = line(r->out, "churn");
    ck_assert_msg(l && sscanf(l, "frees=%ld syncs=%ld reused_unsynced=%d errors=%d", &c.frees,
                              &c.syncs, &c.reused, &c.errors) == 4,
                  "no churn line in:\n%s\n--- stderr\n%s", r->out, r->err);
    return c;
}

/* Run `mode` (churn, churnloop) with `extra` and `extra2` set (NULL:
 * none) and the stats at exit in `stats` (cap OUT_CAP). */
static void churn_run3(run *r, const char *mode, const char *extra, const char *extra2,
                       const char *extra3, char *stats)
{
    char dir[] = "/tmp/xseg_preload_churnXXXXXX", env0[128], cmd[160];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(env0, sizeof env0, "XSEG_PRELOAD_STATS=%s/s", dir);
    const char *env[] = {env0, extra, extra ? extra2 : NULL, extra && extra2 ? extra3 : NULL,
                         NULL};
    app(r, mode, PRELOAD, env);
    snprintf(cmd, sizeof cmd, "cat %s/s 2>/dev/null; rm -rf %s", dir, dir);
    FILE *f = popen(cmd, "r");
    size_t n = f ? fread(stats, 1, OUT_CAP - 1, f) : 0;
    stats[n] = '\0';
    if (f)
        pclose(f);
}

static void churn_run2(run *r, const char *mode, const char *extra, const char *extra2,
                       char *stats)
{
    churn_run3(r, mode, extra, extra2, NULL, stats);
}

static void churn_run(run *r, const char *mode, const char *extra, char *stats)
{
    churn_run2(r, mode, extra, NULL, stats);
}

/* The number after "key": in the stats line, a counter's current value or
 * (peak) its peak; -1: none. */
static long long stat_in(const char *stats, const char *key, int peak)
{
    char pat[96];
    long long v = -1;
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(stats, pat);
    if (!p)
        return -1;
    p += strlen(pat);
    if (strncmp(p, "{\"current\":", 11) == 0) {
        p += 11;
        if (peak && (p = strstr(p, "\"peak\":")) != NULL)
            p += 7;
    }
    return p && sscanf(p, "%lld", &v) == 1 ? v : -1;
}

static long long stat_of(const char *stats, const char *key)
{
    return stat_in(stats, key, 0);
}

/* 3000 frees (bound 64 MiB) cost far fewer device syncs; no block comes
 * back before a sync; a double free of a quarantined block is refused as
 * the real free refuses it; a block freed under the cap is given back for
 * a larger one; nothing is left at exit. */
START_TEST(quarantine_few_syncs_no_early_reuse)
{
    static char stats[OUT_CAP];
    run r;
    churn_run(&r, "churn", "XSEG_PRELOAD_QUARANTINE=64m", stats);
    assert_clean(&r, "churn");
    churn_line c = churn_of(&r);
    ck_assert_int_eq(c.errors, 0);
    ck_assert_int_eq(c.reused, 0);
    ck_assert_int_eq(c.frees, 3000);
    ck_assert_msg(c.syncs * 20 < c.frees, "%ld syncs for %ld frees", c.syncs, c.frees);
    ck_assert_int_gt(c.syncs, 0);
    assert_op(&r, "free_fresh", 0, -1);
    assert_op(&r, "free_fresh_double", 1, -1);
    assert_op(&r, "alloc_big", 0, 0);
    assert_op(&r, "alloc_bigger", 0, 0); /* 150 + 200 MiB > the cap: the first came back */
    ck_assert_msg(stat_of(stats, "allocated_bytes") == 0 && stat_of(stats, "live_bytes") == 0,
                  "left at exit: %s", stats);
    ck_assert_int_ge(stat_of(stats, "quarantined"), 3000);
    ck_assert_int_eq(stat_of(stats, "quarantine_free_errors"), 0);
    ck_assert_int_eq(stat_of(stats, "quarantine_held_bytes"), 0);
    ck_assert_int_ge(stat_of(stats, "drains_growth") + stat_of(stats, "drains_oom"), 1);
    ck_assert_int_eq(stat_of(stats, "quarantine_bound_bytes"), 64 << 20);
}
END_TEST

/* A second free of a block the drain thread is syncing for is refused
 * (the real cudaFree refuses a double free too), and the drain frees the
 * block once: no free error, nothing left at exit. */
START_TEST(double_free_while_in_flight_is_refused)
{
    static char stats[OUT_CAP];
    run r;
    churn_run3(&r, "doublefree", "XSEG_PRELOAD_QUARANTINE=64m,4", "FAKE_SYNC_DELAY_US=300000",
               "XSEG_PRELOAD_DRAIN=thread", stats);
    assert_clean(&r, "doublefree");
    assert_op(&r, "df_again", 1, -1);
    assert_op(&r, "df_alloc_after", 0, 0);
    assert_op(&r, "df_free_after", 0, -1);
    ck_assert_int_eq(stat_of(stats, "quarantine_free_errors"), 0);
    ck_assert_int_ge(stat_of(stats, "drains_thread"), 1);
    ck_assert_msg(stat_of(stats, "allocated_bytes") == 0, "left at exit: %s", stats);
}
END_TEST

/* The default bound (0.5% of the peak live bytes, at least 2 MiB) still
 * saves most syncs, made on the freeing thread (the default drain); the
 * memory stays within a few MiB of what a sync per free maps; the
 * quarantine stays within one bound plus one block (nothing in flight). */
START_TEST(quarantine_default_memory)
{
    static char stats[OUT_CAP], sync_stats[OUT_CAP];
    run r;
    churn_run(&r, "churnloop", NULL, stats);
    assert_clean(&r, "churn default");
    churn_line c = churn_of(&r);
    ck_assert_int_eq(c.reused, 0);
    ck_assert_msg(c.syncs * 3 < c.frees, "%ld syncs for %ld frees", c.syncs, c.frees);
    churn_run(&r, "churnloop", "XSEG_PRELOAD_FREE=sync", sync_stats);
    long long q = stat_in(stats, "mapped_bytes", 1), s = stat_in(sync_stats, "mapped_bytes", 1);
    ck_assert_msg(q > 0 && s > 0 && q <= s + (4 << 20), "mapped peak %lld (quarantine) vs %lld "
                  "(sync per free)", q, s);
    ck_assert_int_eq(stat_of(stats, "quarantine_bound_bytes"), 2 << 20);
    ck_assert_int_le(stat_of(stats, "quarantine_peak_bytes"), (2 << 20) + (4 << 20) + 4096);
    ck_assert_int_eq(stat_of(stats, "drains_thread"), 0);
}
END_TEST

/* XSEG_PRELOAD_QUARANTINE=1m,16 bounds what is held: a sync at least every
 * 16 frees, never more than 1 MiB plus one block in quarantine and as much
 * in flight on the drain thread; with XSEG_PRELOAD_DRAIN=inline, nothing
 * in flight and no drain on the thread. */
START_TEST(quarantine_bounded)
{
    static char stats[OUT_CAP];
    run r;
    churn_run2(&r, "churnloop", "XSEG_PRELOAD_QUARANTINE=1m,16", "XSEG_PRELOAD_DRAIN=thread",
               stats);
    assert_clean(&r, "churn 1m,16");
    churn_line c = churn_of(&r);
    ck_assert_int_eq(c.reused, 0);
    ck_assert_int_ge(c.syncs, c.frees / 16);
    ck_assert_int_gt(stat_of(stats, "drains_thread"), 0);
    long long peak = stat_of(stats, "quarantine_peak_bytes");
    ck_assert_msg(peak > 0 && peak <= 2 * ((1 << 20) + (4 << 20) + 4096),
                  "quarantine peak %lld bytes: %s", peak, stats);
    ck_assert_int_eq(stat_of(stats, "quarantine_bound_bytes"), 1 << 20);
    churn_run2(&r, "churnloop", "XSEG_PRELOAD_QUARANTINE=1m,16", "XSEG_PRELOAD_DRAIN=inline",
               stats);
    assert_clean(&r, "churn 1m,16 inline");
    c = churn_of(&r);
    ck_assert_int_eq(c.reused, 0);
    ck_assert_int_ge(c.syncs, c.frees / 16);
    ck_assert_int_eq(stat_of(stats, "drains_thread"), 0);
    ck_assert_int_le(stat_of(stats, "quarantine_peak_bytes"), (1 << 20) + (4 << 20) + 4096);
}
END_TEST

/* The check for early reuse can fail: without the quarantine's sync
 * (XSEG_PRELOAD_FREE=stream) xseg hands freed blocks out again at once;
 * with =sync every free syncs. */
START_TEST(early_reuse_is_seen_without_quarantine)
{
    static char stats[OUT_CAP];
    run r;
    churn_run(&r, "churnloop", "XSEG_PRELOAD_FREE=stream", stats);
    churn_line c = churn_of(&r);
    ck_assert_int_gt(c.reused, 100);
    ck_assert_int_eq(c.syncs, 0);
    churn_run(&r, "churnloop", "XSEG_PRELOAD_FREE=sync", stats);
    c = churn_of(&r);
    ck_assert_int_eq(c.reused, 0);
    ck_assert_int_ge(c.syncs, c.frees);
    churn_run(&r, "churnloop", "XSEG_PRELOAD_DRAIN=thread", stats); /* the default is inline */
    c = churn_of(&r);
    ck_assert_int_eq(c.reused, 0);
    ck_assert_int_gt(stat_of(stats, "drains_thread"), 0);
}
END_TEST

/* A sync a stream capture refuses (the stand-in refuses the first five on
 * threads not in relaxed capture mode, as during another thread's global
 * capture): those blocks are never given back (counted as leaked), none
 * comes back early.  The drain thread is in relaxed mode: never refused. */
START_TEST(capture_refused_sync_keeps_blocks)
{
    static char stats[OUT_CAP];
    run r;
    churn_run(&r, "churnloop", "FAKE_SYNC_CAPTURE=5", stats); /* inline, the default */
    assert_clean(&r, "refused syncs, inline");
    churn_line c = churn_of(&r);
    ck_assert_int_eq(c.reused, 0);
    long long leaked = stat_of(stats, "quarantine_leaked_bytes");
    ck_assert_int_ge(stat_of(stats, "quarantine_leaked_blocks"), 5);
    ck_assert_int_gt(leaked, 0);
    ck_assert_int_eq(stat_of(stats, "allocated_bytes"), leaked); /* still xseg's live blocks */
    churn_run2(&r, "churnloop", "FAKE_SYNC_CAPTURE=1000000", "XSEG_PRELOAD_DRAIN=thread", stats);
    assert_clean(&r, "refused syncs, thread");
    c = churn_of(&r);
    ck_assert_int_eq(c.reused, 0);
    ck_assert_int_gt(stat_of(stats, "drains_thread"), 100); /* relaxed: its syncs went through */
}
END_TEST

/* A bad XSEG_PRELOAD_QUARANTINE is said on stderr; the default is used. */
START_TEST(quarantine_bad_value)
{
    static char stats[OUT_CAP];
    run r;
    churn_run(&r, "churnloop", "XSEG_PRELOAD_QUARANTINE=12x", stats);
    assert_clean(&r, "bad quarantine value");
    ck_assert_ptr_nonnull(strstr(r.err, "XSEG_PRELOAD_QUARANTINE=12x"));
    ck_assert_ptr_nonnull(strstr(stats, "\"quarantine_bound\":\"0.5%\""));
}
END_TEST

/* A fork child passes through (its inherited allocator refuses); the
 * parent goes on with xseg. */
START_TEST(fork_child_passes_through)
{
    run r;
    app(&r, "fork", PRELOAD, NULL);
    assert_clean(&r, "fork");
    assert_op(&r, "alloc_parent", 0, 0);
    assert_op(&r, "alloc_child", 0, 1);
    assert_op(&r, "free_child", 0, -1);
    assert_op(&r, "free_child_parents", 1, -1); /* not the child's: the real free says so */
    assert_op(&r, "free_parent", 0, -1);
    assert_op(&r, "alloc_parent_after", 0, 0);
    ck_assert_ptr_nonnull(strstr(r.out, "check child_exit ok"));
}
END_TEST

/* Eight threads, four on device 0 (xseg) and four on device 1, which the
 * host backend does not have: those pass through to the stand-in. */
START_TEST(threads_on_two_devices)
{
    run r;
    app(&r, "threads", PRELOAD, NULL);
    assert_clean(&r, "threads");
    for (int i = 0; i < 8; i++) {
        char head[32];
        int dev, fake, of, errors;
        snprintf(head, sizeof head, "thread %d", i);
        const char *l = line(r.out, head);
        ck_assert_msg(l && sscanf(l, "dev %d fake=%d of=%d errors=%d", &dev, &fake, &of,
                                  &errors) == 4, "no %s line in:\n%s", head, r.out);
        ck_assert_int_eq(errors, 0);
        ck_assert_int_eq(of, 400);
        ck_assert_int_eq(fake, dev == 0 ? 0 : of);
    }
    ck_assert_int_eq(count(r.out, "fake.alloc_dev0"), 0);
    ck_assert_int_eq(count(r.out, "fake.alloc_dev1"), 4 * 400);
}
END_TEST

/* A conf xseg refuses: said on stderr, every call passes through. */
START_TEST(refused_conf_passes_through)
{
    run r;
    const char *env[] = {"XSEG_CONF=backend:host,no_such_key:1", NULL};
    app(&r, "basic", PRELOAD, env);
    assert_clean(&r, "refused conf");
    ck_assert_ptr_nonnull(strstr(r.err, "refused"));
    assert_op(&r, "alloc_rt_4096", 0, 1);
    assert_op(&r, "alloc_getproc_v2", 0, 1);
}
END_TEST

/* XSEG_PRELOAD_STATS: xseg's stats of each device at exit, %p the pid. */
START_TEST(stats_at_exit)
{
    char dir[] = "/tmp/xseg_preload_statsXXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char env0[128], path[160];
    snprintf(env0, sizeof env0, "XSEG_PRELOAD_STATS=%s/s.%%p", dir);
    const char *env[] = {env0, NULL};
    run r;
    app(&r, "basic", PRELOAD, env);
    assert_clean(&r, "stats");
    snprintf(path, sizeof path, "%s/s.", dir);
    char cmd[256], text[OUT_CAP] = "";
    snprintf(cmd, sizeof cmd, "cat %s/s.* 2>/dev/null", dir);
    FILE *f = popen(cmd, "r");
    size_t n = f ? fread(text, 1, sizeof text - 1, f) : 0;
    text[n] = '\0';
    if (f)
        pclose(f);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
    ck_assert_msg(strstr(text, "\"device\":0") && strstr(text, "\"alloc_calls\""),
                  "stats file under %s: %s", path, text);
}
END_TEST

/* What `cmd` prints (popen) into buf of cap bytes, NUL-terminated: the length. */
static size_t read_cmd(const char *cmd, char *buf, size_t cap)
{
    FILE *f = popen(cmd, "r");
    size_t n = f ? fread(buf, 1, cap - 1, f) : 0;
    buf[n] = '\0';
    if (f)
        pclose(f);
    return n;
}

/* The app's cudachurn mode (600 iterations) under the preload library with
 * `extra` set ("NAME=value"): its line in `out` (cap OUT_CAP), the stats in
 * `stats` (cap OUT_CAP) and, when `peak` is not NULL, the lines of
 * XSEG_PRELOAD_PEAK_SNAPSHOT in `peak` (cap peak_cap). */
static void cudachurn_in(run *r, const char *extra, char *stats, char *peak, size_t peak_cap)
{
    char *argv[] = {(char *)APP, (char *)"cudachurn", (char *)"600", NULL};
    char dir[] = "/tmp/xseg_preload_ccXXXXXX", env0[128], env1[128], cmd[160];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(env0, sizeof env0, "XSEG_PRELOAD_STATS=%s/s", dir);
    snprintf(env1, sizeof env1, "XSEG_PRELOAD_PEAK_SNAPSHOT=%s/peak.%%p", dir);
    const char *env[5] = {env0, "XSEG_CONF=backend:host", NULL, NULL, NULL}, **e = env + 2;
    if (extra)
        *e++ = extra;
    if (peak)
        *e = env1;
    spawn(r, argv, PRELOAD, env);
    snprintf(cmd, sizeof cmd, "cat %s/s 2>/dev/null", dir);
    read_cmd(cmd, stats, OUT_CAP);
    if (peak) {
        snprintf(cmd, sizeof cmd, "cat %s/peak.* 2>/dev/null", dir);
        read_cmd(cmd, peak, peak_cap);
    }
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
}

static void cudachurn_run(run *r, const char *async, char *stats)
{
    char env[64];
    snprintf(env, sizeof env, "XSEG_PRELOAD_ASYNC=%s", async);
    cudachurn_in(r, env, stats, NULL, 0);
}

/* The number under `name` in the object `object` ("driver_calls": xseg's
 * driver ops; "calls": what the application called of the interposed
 * functions) of a stats line; -1: none. */
static long long count_in(const char *stats, const char *object, const char *name)
{
    char pat[64];
    long long v = -1;
    snprintf(pat, sizeof pat, "\"%s\":{", object);
    const char *p = strstr(stats, pat);
    snprintf(pat, sizeof pat, "\"%s\":", name);
    p = p ? strstr(p, pat) : NULL;
    return p && sscanf(p + strlen(pat), "%lld", &v) == 1 ? v : -1;
}

static long long op_calls(const char *stats, const char *name)
{
    return count_in(stats, "driver_calls", name);
}

static long long app_calls(const char *stats, const char *name)
{
    return count_in(stats, "calls", name);
}

/* cuda_churn's sequence (the app's cudachurn mode, which
 * tools/preload/host_churn.py runs for the host figures of docs/preload.md):
 * the same line without xseg and with both XSEG_PRELOAD_ASYNC modes, every
 * allocation served by xseg, xseg's mapped peak at least the live peak;
 * with one pool (the default) the async frees record their stream (more
 * event records) than with a pool per stream. */
START_TEST(cuda_churn_sequence)
{
    static char pool[OUT_CAP], per_stream[OUT_CAP];
    char *argv[] = {(char *)APP, (char *)"cudachurn", (char *)"600", NULL};
    const char *plain_env[] = {"XSEG_CONF=backend:host", NULL};
    run plain, r, rs;
    spawn(&plain, argv, NULL, plain_env);
    cudachurn_run(&r, "pool", pool);
    cudachurn_run(&rs, "stream", per_stream);
    const char *a = line(plain.out, "cudachurn"), *b = line(r.out, "cudachurn"),
               *c = line(rs.out, "cudachurn");
    ck_assert_msg(plain.status == 0 && r.status == 0 && rs.status == 0 && a && b && c,
                  "rc %d / %d / %d\n%s\n%s\n%s", plain.status, r.status, rs.status, plain.out,
                  r.out, r.err);
    size_t len = strcspn(a, "\n");
    ck_assert_msg(strncmp(a, "iters=600 allocs=600 frees=600 errors=0", 39) == 0 &&
                      strcspn(b, "\n") == len && strncmp(a, b, len) == 0 &&
                      strcspn(c, "\n") == len && strncmp(a, c, len) == 0,
                  "without xseg: %.200s\npool: %.200s\nstream: %.200s", a, b, c);
    long long live_peak = stat_in(pool, "live_peak_bytes", 0);
    long long mapped_peak = stat_in(pool, "mapped_bytes", 1);
    long long allocs = stat_of(pool, "alloc_calls");
    ck_assert_msg(allocs >= 600 && live_peak > (64ll << 20) && mapped_peak >= live_peak &&
                      strstr(pool, "\"async\":\"pool\"") &&
                      strstr(per_stream, "\"async\":\"stream\""),
                  "alloc_calls %lld, live peak %lld, mapped peak %lld: %s", allocs, live_peak,
                  mapped_peak, pool);
    /* The calls the app made, counted at the interposed entry points: its
     * 600 allocations and frees plus the one of its static constructor. */
    long long mallocs = app_calls(pool, "cudaMalloc"), amallocs = app_calls(pool, "cudaMallocAsync");
    long long frees = app_calls(pool, "cudaFree"), afrees = app_calls(pool, "cudaFreeAsync");
    ck_assert_msg(mallocs > 0 && amallocs > 0 && mallocs + amallocs == 601 && afrees > 0 &&
                      frees + afrees == 601 && app_calls(pool, "cuMemAlloc_v2") == 0 &&
                      app_calls(pool, "dlsym") >= 0,
                  "calls: cudaMalloc %lld, cudaMallocAsync %lld, cudaFree %lld, cudaFreeAsync "
                  "%lld: %s", mallocs, amallocs, frees, afrees, pool);
    long long ev_pool = op_calls(pool, "event_record"), ev_str = op_calls(per_stream, "event_record");
    long long sa_pool = op_calls(pool, "set_access"), sa_str = op_calls(per_stream, "set_access");
    /* (The page moves, seen in set-access calls, are fewer with one pool in
     * most runs, but they depend on when the quarantine's drain thread runs:
     * 708 against 540 once in CI.  Only the event records are asserted.) */
    ck_assert_msg(ev_pool > ev_str && ev_str >= 0 && sa_pool >= 0 && sa_str >= 0,
                  "event records pool %lld / stream %lld, set-access calls pool %lld / stream "
                  "%lld", ev_pool, ev_str, sa_pool, sa_str);
}
END_TEST

/* The number after "key": in text, -1: none. */
static long long num_after(const char *text, const char *key)
{
    char pat[64];
    long long v = -1;
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(text, pat);
    return p && sscanf(p + strlen(pat), "%lld", &v) == 1 ? v : -1;
}

/* XSEG_PRELOAD_PEAK_SNAPSHOT: one line per device at exit, taken when the
 * mapped bytes were at their peak (the stats' own mapped peak, the same at
 * exit), the application's live bytes then (at most their peak), and the
 * allocator's snapshot of that moment (its mapped bytes the same). */
START_TEST(peak_snapshot_at_exit)
{
    static char stats[OUT_CAP], snap[1 << 20];
    run r;
    cudachurn_in(&r, NULL, stats, snap, sizeof snap);
    size_t n = strlen(snap);
    ck_assert_msg(r.status == 0 && n > 0 && snap[n - 1] == '\n' && strchr(snap, '\n') == snap + n - 1,
                  "rc %d, %zu bytes, not one line: %.300s\n%s", r.status, n, snap, r.err);
    long long mapped = num_after(snap, "mapped"), at_exit = num_after(snap, "mapped_peak_at_exit");
    long long live = num_after(snap, "app_live"), highs = num_after(snap, "highs");
    long long stats_peak = stat_in(stats, "mapped_bytes", 1);
    long long live_peak = stat_of(stats, "live_peak_bytes");
    const char *inner = strstr(snap, "\"snapshot\":{");
    long long snap_mapped = inner ? num_after(inner, "mapped") : -1;
    ck_assert_msg(mapped > 0 && mapped == stats_peak && at_exit == mapped &&
                      snap_mapped == mapped && live > 0 && live <= live_peak &&
                      live <= mapped && highs >= 1 && strstr(snap, "\"segments\":[") &&
                      strstr(snap, "\"stats\":{\"version\""),
                  "peak line: mapped %lld (stats' peak %lld, at exit %lld, snapshot's %lld), "
                  "app live %lld (peak %lld), highs %lld: %.300s",
                  mapped, stats_peak, at_exit, snap_mapped, live, live_peak, highs, snap);
}
END_TEST

/* With one pool (the default), a block freed by cudaFreeAsync on the
 * legacy stream does not come back on another stream before a device
 * sync; with XSEG_PRELOAD_FREE=stream it does at once (the check can
 * fail). */
START_TEST(async_legacy_free_not_reused_early)
{
    const char *modes[][2] = {{"XSEG_PRELOAD_ASYNC=pool", NULL},
                              {"XSEG_PRELOAD_ASYNC=pool", "XSEG_PRELOAD_FREE=stream"}};
    int early[2] = {-1, -1};
    for (int m = 0; m < 2; m++) {
        run r;
        const char *env[] = {modes[m][0], modes[m][1], NULL};
        app(&r, "asyncreuse", PRELOAD, env);
        const char *l = line(r.out, "asyncreuse");
        int errors = -1;
        ck_assert_msg(r.status == 0 && l && sscanf(l, "early=%d errors=%d", &early[m],
                                                   &errors) == 2 && errors == 0,
                      "%s: rc %d\n%s\n%s", modes[m][1] ? modes[m][1] : modes[m][0], r.status,
                      r.out, r.err);
    }
    ck_assert_msg(early[0] == 0 && early[1] > 0,
                  "early reuse with one pool %d (want 0), with FREE=stream %d (want > 0)",
                  early[0], early[1]);
}
END_TEST

/* xseg-run sets LD_PRELOAD (keeping what was there), XSEG_CONF and the
 * free mode. */
START_TEST(xseg_run_wrapper)
{
    run r;
    char *help[] = {(char *)XSEG_RUN, (char *)"--help", NULL};
    spawn(&r, help, NULL, NULL);
    ck_assert_int_eq(r.status, 0);
    ck_assert_ptr_nonnull(strstr(r.out, "usage: xseg-run"));
    char *argv[] = {(char *)XSEG_RUN, (char *)"--conf", (char *)CONF, (char *)"--",
                    (char *)APP, (char *)"basic", NULL};
    spawn(&r, argv, FAKE_DRV, NULL); /* an LD_PRELOAD already set: kept */
    assert_clean(&r, "xseg-run");
    assert_op(&r, "alloc_rt_4096", 0, 0);
    size_t f, t;
    meminfo(r.out, "rt", &f, &t);
    ck_assert_uint_eq(t, 256 * MiB);
    char *none[] = {(char *)XSEG_RUN, NULL};
    spawn(&r, none, NULL, NULL);
    ck_assert_int_eq(r.status, 2);
    char *modes[] = {(char *)XSEG_RUN, (char *)"--conf", (char *)CONF, (char *)"--free",
                     (char *)"sync", (char *)"--quarantine", (char *)"64m", (char *)"--",
                     (char *)APP, (char *)"basic", NULL};
    spawn(&r, modes, NULL, NULL); /* --free sync: a sync per free, whatever the bound */
    assert_clean(&r, "xseg-run --free sync");
    ck_assert_int_ge(count(r.out, "fake.cuCtxSynchronize"), 10);
    char peak[] = "/tmp/xseg_run_peakXXXXXX", text[OUT_CAP], cmd[96];
    int fd = mkstemp(peak);
    ck_assert_int_ge(fd, 0);
    close(fd);
    char *snap[] = {(char *)XSEG_RUN, (char *)"--conf", (char *)CONF, (char *)"--peak-snapshot",
                    peak, (char *)"--", (char *)APP, (char *)"basic", NULL};
    spawn(&r, snap, NULL, NULL);
    assert_clean(&r, "xseg-run --peak-snapshot");
    snprintf(cmd, sizeof cmd, "cat %s", peak);
    read_cmd(cmd, text, sizeof text);
    unlink(peak);
    ck_assert_msg(strstr(text, "\"mapped\":") && strstr(text, "\"snapshot\":{"),
                  "--peak-snapshot wrote: %.300s", text);
    char *bad[] = {(char *)XSEG_RUN, (char *)"--peak-snapshot", NULL};
    spawn(&r, bad, NULL, NULL);
    ck_assert_int_eq(r.status, 2);
}
END_TEST

/* ---- pointer queries and IPC handles (the application's query mode) ---- */

/* The value of `key` on the line "q NAME ..." (asserts both are there). */
static long long qv(const run *r, const char *name, const char *key)
{
    char head[96], pat[48];
    snprintf(head, sizeof head, "q %s", name);
    const char *l = line(r->out, head);
    ck_assert_msg(l, "no line %s in:\n%s\n--- stderr\n%s", head, r->out, r->err);
    size_t len = strcspn(l, "\n");
    snprintf(pat, sizeof pat, "%s=", key);
    for (const char *p = l; p < l + len; p = strchr(p, ' ') ? strchr(p, ' ') + 1 : l + len)
        if (strncmp(p, pat, strlen(pat)) == 0)
            return strtoll(p + strlen(pat), NULL, 0);
    ck_abort_msg("no %s on line %s: %.*s", key, head, (int)len, l);
    return 0;
}

static void query_run(run *r, const char *preload, const char *const *env)
{
    app(r, "query", preload, env);
    assert_clean(r, preload ? "query with preload" : "query without preload");
}

/* A range answer: rc 0, the allocation's start, `size`. */
static void range_ok(const run *r, const char *name, long long size)
{
    ck_assert_msg(qv(r, name, "rc") == 0 && qv(r, name, "base") == qv(r, name, "want") &&
                      qv(r, name, "size") == size,
                  "%s: rc %lld base %llx want %llx size %lld (expected %lld)", name,
                  qv(r, name, "rc"), qv(r, name, "base"), qv(r, name, "want"),
                  qv(r, name, "size"), size);
}

/* The xseg block `tag` of `n` bytes: every query answered from the block
 * (xseg's device 0, its rounded size); returns that size. */
static long long block_answered(const run *r, const char *tag, long long n)
{
    char name[64];
    snprintf(name, sizeof name, "%s_start", tag);
    long long size = qv(r, name, "size");
    ck_assert_msg(size >= n && size < n + 512 && size % 512 == 0, "%s: size %lld for %lld bytes",
                  tag, size, n); /* xseg's rounding, not the stand-in's 256 */
    static const char *const at[] = {"start", "interior", "last", "end", "attr_range"};
    for (size_t i = 0; i < sizeof at / sizeof at[0]; i++) {
        snprintf(name, sizeof name, "%s_%s", tag, at[i]);
        range_ok(r, name, size);
    }
    snprintf(name, sizeof name, "%s_past", tag);
    ck_assert(qv(r, name, "rc") != 0 || qv(r, name, "base") != qv(r, name, "want"));
    snprintf(name, sizeof name, "%s_attr", tag);
    ck_assert_int_eq(qv(r, name, "rc"), 0);
    ck_assert_int_eq(qv(r, name, "type"), 2);
    ck_assert_int_eq(qv(r, name, "devptr"), qv(r, name, "wantptr"));
    ck_assert_int_eq(qv(r, name, "ordinal"), 0);
    ck_assert_int_eq(qv(r, name, "managed"), 0);
    ck_assert_int_eq(qv(r, name, "mapped"), 1);
    ck_assert_int_eq(qv(r, name, "ipccap"), 0);
    ck_assert_int_eq(qv(r, name, "buffer_rc"), 0); /* passed through: the driver's answer */
    ck_assert_int_eq(qv(r, name, "buffer"), 0x5eed);
    snprintf(name, sizeof name, "%s_attrs", tag);
    range_ok(r, name, size);
    ck_assert_int_eq(qv(r, name, "type"), 2);
    ck_assert_int_eq(qv(r, name, "ordinal"), 0);
    ck_assert_int_eq(qv(r, name, "mapped"), 1);
    ck_assert_int_eq(qv(r, name, "buffer"), 0x5eed);
    snprintf(name, sizeof name, "%s_rt", tag);
    ck_assert_int_eq(qv(r, name, "rc"), 0);
    ck_assert_int_eq(qv(r, name, "type"), 2);
    ck_assert_int_eq(qv(r, name, "device"), 0);
    ck_assert_int_eq(qv(r, name, "devptr"), qv(r, name, "wantptr"));
    ck_assert_int_eq(qv(r, name, "host"), 0);
    ck_assert_int_eq(qv(r, name, "reserved_intact"), 1);
    return size;
}

/* Interior pointers of a block and of a small slot: cuMemGetAddressRange,
 * RANGE_START_ADDR / RANGE_SIZE (agreeing), the other attributes and
 * cudaPointerGetAttributes answer from xseg's block; without xseg the
 * stand-in answers the same queries with its own values (device 5). */
START_TEST(pointer_queries_answered)
{
    run r, base;
    query_run(&r, PRELOAD, NULL);
    block_answered(&r, "big", (3 << 20) + 5);
    ck_assert_int_eq(block_answered(&r, "small", 1000), 1024);
    query_run(&base, NULL, NULL);
    ck_assert_int_eq(qv(&base, "big_attr", "ordinal"), 5);
    ck_assert_int_eq(qv(&base, "big_start", "size"), (3 << 20) + 256);
}
END_TEST

/* Foreign and garbage pointers reach the stand-in and get its answers, as
 * without xseg; xseg's own pointers never reach it except for the
 * attributes xseg leaves to the driver (BUFFER_ID) and the plural call,
 * which the driver fills first. */
START_TEST(pointer_queries_pass_through)
{
    run r, base;
    query_run(&r, PRELOAD, NULL);
    query_run(&base, NULL, NULL);
    static const char *const names[] = {"foreign_start", "foreign_interior", "foreign_last",
                                        "foreign_attr_range", "foreign_attrs"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        range_ok(&r, names[i], 4096);
        range_ok(&base, names[i], 4096);
    }
    ck_assert_int_eq(qv(&r, "foreign_past", "rc"), 500);
    ck_assert_int_eq(qv(&r, "garbage_range", "rc"), 500);
    ck_assert_int_eq(qv(&r, "foreign_attr", "ordinal"), 5);
    ck_assert_int_eq(qv(&r, "foreign_attr", "ipccap"), 1);
    ck_assert_int_eq(qv(&r, "foreign_attrs", "ordinal"), 5);
    ck_assert_int_eq(qv(&r, "foreign_rt", "device"), 5);
    ck_assert_int_eq(qv(&r, "foreign_rt", "type"), 2);
    /* foreign: start, size, interior, last, end, past; garbage: 1 */
    ck_assert_int_eq(count(r.out, "fake.cuMemGetAddressRange_v2"), 7);
    /* foreign: 2 (range) + 7 (each); big and small: BUFFER_ID only */
    ck_assert_int_eq(count(r.out, "fake.cuPointerGetAttribute"), 11);
    ck_assert_int_eq(count(r.out, "fakert.cudaPointerGetAttributes"), 1); /* foreign */
    ck_assert_int_gt(count(base.out, "fake.cuMemGetAddressRange_v2"), 20);
}
END_TEST

/* A block freed just before (quarantined by default, given back to xseg
 * with XSEG_PRELOAD_FREE=stream) is no allocation: CUDA_ERROR_NOT_FOUND,
 * CUDA_ERROR_INVALID_VALUE, NULL defaults, unregistered memory. */
START_TEST(pointer_queries_freed_block)
{
    const char *stream_env[] = {"XSEG_PRELOAD_FREE=stream", NULL};
    const char *const *envs[] = {NULL, stream_env};
    for (int i = 0; i < 2; i++) {
        run r;
        query_run(&r, PRELOAD, envs[i]);
        ck_assert_int_eq(qv(&r, "freed_range", "rc"), 500);
        ck_assert_int_eq(qv(&r, "freed_attr", "rc"), 1);
        ck_assert_int_eq(qv(&r, "freed_attrs", "rc"), 0);
        ck_assert_int_eq(qv(&r, "freed_attrs", "type"), 0);
        ck_assert_int_eq(qv(&r, "freed_attrs", "ordinal"), -2);
        ck_assert_int_eq(qv(&r, "freed_attrs", "base"), 0);
        ck_assert_int_eq(qv(&r, "freed_attrs", "size"), 0);
        ck_assert_int_eq(qv(&r, "freed_attrs", "mapped"), 0);
        ck_assert_int_eq(qv(&r, "freed_rt", "rc"), 0);
        ck_assert_int_eq(qv(&r, "freed_rt", "type"), 0);
        ck_assert_int_eq(qv(&r, "freed_rt", "device"), -2);
        ck_assert_int_eq(qv(&r, "freed_rt", "devptr"), 0);
        ck_assert_int_eq(qv(&r, "freed_rt", "host"), qv(&r, "freed_rt", "wantptr"));
        ck_assert_int_eq(count(r.out, "fake.cuMemGetAddressRange_v2"), 7); /* none of them */
    }
}
END_TEST

/* cudaIpcGetMemHandle / cuIpcGetMemHandle of xseg memory: refused with
 * cudaErrorInvalidValue / CUDA_ERROR_INVALID_VALUE, said with
 * XSEG_PRELOAD_VERBOSE=1 (naming the pointer and xseg's export); a foreign
 * pointer gets the stand-in's handle.  Without xseg every one succeeds. */
START_TEST(ipc_handle_refused_on_xseg_memory)
{
    run r, base, quiet;
    const char *env[] = {"XSEG_PRELOAD_VERBOSE=1", NULL};
    query_run(&r, PRELOAD, env);
    static const char *const xs[] = {"ipc_xseg_rt", "ipc_xseg_drv", "freed_ipc_rt"};
    for (size_t i = 0; i < sizeof xs / sizeof xs[0]; i++) {
        ck_assert_int_eq(qv(&r, xs[i], "rc"), 1);
        ck_assert_int_eq(qv(&r, xs[i], "fake"), 0);
    }
    ck_assert_int_eq(qv(&r, "ipc_foreign_rt", "rc"), 0);
    ck_assert_int_eq(qv(&r, "ipc_foreign_rt", "fake"), 1);
    ck_assert_int_eq(qv(&r, "ipc_foreign_drv", "rc"), 0);
    ck_assert_int_eq(qv(&r, "ipc_foreign_drv", "fake"), 1);
    ck_assert_int_eq(count(r.out, "fake.cuIpcGetMemHandle"), 3); /* the foreign ones */
    char said[160];
    snprintf(said, sizeof said, "cudaIpcGetMemHandle(%p) refused with cudaErrorInvalidValue",
             (void *)(uintptr_t)qv(&r, "ipc_xseg_rt", "ptr"));
    ck_assert_msg(strstr(r.err, said) && strstr(r.err, "xseg_export") &&
                      strstr(r.err, "docs/sharing.md") &&
                      strstr(r.err, "cuIpcGetMemHandle(") &&
                      strstr(r.err, "CUDA_ERROR_INVALID_VALUE"),
                  "stderr lacks \"%s\":\n%s", said, r.err);
    query_run(&quiet, PRELOAD, NULL);
    ck_assert_ptr_null(strstr(quiet.err, "refused"));
    query_run(&base, NULL, NULL);
    ck_assert_int_eq(qv(&base, "ipc_xseg_rt", "rc"), 0);
    ck_assert_int_eq(qv(&base, "ipc_xseg_rt", "fake"), 1);
}
END_TEST

/* The queries reach the preload versions through cuGetProcAddress (both
 * versions), dlsym on the driver's and the runtime's handles and the
 * runtime's table; cuMemGetAddressRange of an old ABI is left alone. */
START_TEST(pointer_queries_routing)
{
    run r, base;
    query_run(&r, PRELOAD, NULL);
    long long size = qv(&r, "big_start", "size");
    static const char *const ranges[] = {"route_getproc_range", "route_dlsym_range",
                                         "route_getproc_attr", "route_dlsym_attr",
                                         "route_getproc_attrs", "route_dlsym_attrs",
                                         "route_table_attrs"};
    for (size_t i = 0; i < sizeof ranges / sizeof ranges[0]; i++)
        range_ok(&r, ranges[i], size);
    ck_assert_int_eq(qv(&r, "route_getproc_attrs", "ordinal"), 0);
    ck_assert_int_eq(qv(&r, "route_dlsym_attrs", "ordinal"), 0);
    ck_assert_int_eq(qv(&r, "route_table_attrs", "ordinal"), 0);
    ck_assert_int_eq(qv(&r, "route_dlsym_rt_attrs", "device"), 0);
    ck_assert_int_eq(qv(&r, "route_dlsym_rt_attrs", "type"), 2);
    static const char *const ipcs[] = {"route_getproc_ipc", "route_dlsym_ipc",
                                       "route_dlsym_rt_ipc"};
    for (size_t i = 0; i < sizeof ipcs / sizeof ipcs[0]; i++)
        ck_assert_int_eq(qv(&r, ipcs[i], "rc"), 1);
    ck_assert_int_eq(qv(&r, "route_getproc_ipc_foreign", "rc"), 0);
    ck_assert_int_eq(qv(&r, "route_getproc_ipc_foreign", "fake"), 1);
    ck_assert_ptr_nonnull(strstr(r.out, "check getproc_range_32bit_untouched ok"));
    query_run(&base, NULL, NULL); /* the stand-in's answers: its device, its rounding */
    ck_assert_int_eq(qv(&base, "route_table_attrs", "ordinal"), 5);
    ck_assert_int_eq(qv(&base, "route_getproc_range", "size"), (3 << 20) + 256);
    ck_assert_int_eq(qv(&base, "route_dlsym_ipc", "rc"), 0);
}
END_TEST

int main(void)
{
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    /* The sanitizer runtime, loaded with the instrumented preload library,
     * looks up the functions it intercepts with dlsym before it is
     * initialised, and that dlsym is the preload library's, which needs
     * dlopen (intercepted, not yet set up): the process faults at start. */
    fprintf(stderr, "test_preload: the preload library cannot be loaded under ASan/TSan "
                    "(docs/preload.md, Tests): skipped\n");
    return 77;
#endif
    struct stat st;
    if (stat(PRELOAD, &st) != 0 || stat(APP, &st) != 0) {
        fprintf(stderr, "test_preload: %s or %s not built (XSEG_BUILD_TOOLS off?): skipped\n",
                PRELOAD, APP);
        return 77;
    }
    Suite *s = suite_create("preload");
    TCase *tc = tcase_create("preload");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, same_results_xseg_serves);
    tcase_add_test(tc, stand_ins_see_only_pass_through);
    tcase_add_test(tc, get_proc_address_routing);
    tcase_add_test(tc, mem_info_reports_cap);
    tcase_add_test(tc, free_modes);
    tcase_add_test(tc, quarantine_few_syncs_no_early_reuse);
    tcase_add_test(tc, quarantine_default_memory);
    tcase_add_test(tc, quarantine_bounded);
    tcase_add_test(tc, quarantine_bad_value);
    tcase_add_test(tc, capture_refused_sync_keeps_blocks);
    tcase_add_test(tc, early_reuse_is_seen_without_quarantine);
    tcase_add_test(tc, fork_child_passes_through);
    tcase_add_test(tc, threads_on_two_devices);
    tcase_add_test(tc, refused_conf_passes_through);
    tcase_add_test(tc, stats_at_exit);
    tcase_add_test(tc, peak_snapshot_at_exit);
    tcase_add_test(tc, xseg_run_wrapper);
    tcase_add_test(tc, cuda_churn_sequence);
    tcase_add_test(tc, async_legacy_free_not_reused_early);
    tcase_add_test(tc, pointer_queries_answered);
    tcase_add_test(tc, pointer_queries_pass_through);
    tcase_add_test(tc, pointer_queries_freed_block);
    tcase_add_test(tc, double_free_while_in_flight_is_refused);
    tcase_add_test(tc, ipc_handle_refused_on_xseg_memory);
    tcase_add_test(tc, pointer_queries_routing);
    suite_add_tcase(s, tc);
    return t_run(s);
}
