/* test_fork.c: fork() after the allocator started.  In the child every call
 * on the parent's allocator fails with XSEG_ERR_FORKED and a message, and
 * xseg_destroy frees bookkeeping only: the parent's mappings and data are
 * never disturbed (the host backend's memory is a MAP_SHARED memfd, so a
 * release in the child would punch holes in the parent's data).  A new
 * allocator created in the child works.  Also under concurrent traffic in
 * the parent (locks held at the moment of fork: the allocator's, and every
 * process-wide lock, with threads inside xseg_default, the PyTorch entry
 * points, graph pools and stats_shm), through exit() in the child, and at
 * exit in a fresh process whose exit handler, registered before xseg's
 * first use, still frees and allocates through the default allocator. */
#include <execinfo.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <sys/stat.h>
#include <unistd.h>

#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#endif
#ifndef RUNNING_ON_VALGRIND
#define RUNNING_ON_VALGRIND 0
#endif
#ifndef VALGRIND_CLO_CHANGE
#define VALGRIND_CLO_CHANGE(option) ((void)0)
#endif

#include "driver_host.h"
#include "internal.h"
#include "shm_format.h"
#include "support_common.h"

/* In the child the inherited driver context is abandoned by design (no
 * driver call may touch the parent's memory): its host-side bookkeeping
 * stays allocated until the child exits.  Kept reachable from here, so
 * that leak checkers (LeakSanitizer, valgrind) do not count it. */
static void *g_abandoned[4];

static void abandon(xseg_t *xs)
{
    for (int i = 0; i < 4; i++)
        if (!g_abandoned[i]) {
            g_abandoned[i] = t_host_ctx(xs);
            return;
        }
}

#define BIG (6 * MiB)
#define SMALL 3000

/* ---- in the child: failures are counted and named on stderr ---- */

static int child_bad;

static void child_expect(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "child: %s (last error: %s)\n", what, xseg_last_error());
        child_bad++;
    }
}

static void child_forked(xseg_status st, const char *call)
{
    char what[128];
    snprintf(what, sizeof what, "%s returned %d, not XSEG_ERR_FORKED", call, st);
    child_expect(st == XSEG_ERR_FORKED, what);
    snprintf(what, sizeof what, "%s: message does not mention fork()", call);
    child_expect(strstr(xseg_last_error(), "fork") != NULL, what);
}

/* Every entry point taking the parent's allocator. */
static void child_calls(xseg_t *xs, void *big, void *small)
{
    void *p = NULL;
    size_t r, len;
    char buf[256];
    xseg_stats st = {.size = sizeof st};
    child_forked(xseg_alloc(xs, 4096, NULL, &p), "xseg_alloc");
    child_expect(p == NULL, "xseg_alloc set *out");
    child_forked(xseg_free(xs, big), "xseg_free(big)");
    child_forked(xseg_free(xs, small), "xseg_free(small)");
    child_forked(xseg_record_stream(xs, big, (void *)1), "xseg_record_stream");
    child_forked(xseg_block_size(xs, big, &r, NULL), "xseg_block_size");
    child_forked(xseg_trim(xs, 0, NULL), "xseg_trim");
    child_forked(xseg_get_stats(xs, &st), "xseg_get_stats");
    child_forked(xseg_reset_peak(xs), "xseg_reset_peak");
    child_forked(xseg_stats_json(xs, buf, sizeof buf, &len), "xseg_stats_json");
    child_forked(xseg_stats_prometheus(xs, buf, sizeof buf, &len), "xseg_stats_prometheus");
    child_forked(xseg_snapshot_json(xs, buf, sizeof buf, &len), "xseg_snapshot_json");
    child_forked(xseg_history_json(xs, buf, sizeof buf, &len), "xseg_history_json");
    child_forked(xseg_set_oom_callback(xs, NULL, NULL), "xseg_set_oom_callback");
}

/* A fresh allocator in the child works. */
static void child_new_allocator(void)
{
    xseg_t *mine = NULL;
    void *p = NULL;
    child_expect(xseg_create(&mine, 0, "backend:host") == XSEG_OK, "xseg_create in the child");
    if (!mine)
        return;
    child_expect(xseg_alloc(mine, 5 * MiB, NULL, &p) == XSEG_OK, "alloc on the child's allocator");
    if (p) {
        t_fill(p, 5 * MiB, 77);
        child_expect(t_check(p, 5 * MiB, 77), "child's own data");
        child_expect(xseg_free(mine, p) == XSEG_OK, "free on the child's allocator");
    }
    child_expect(xseg_trim(mine, 0, NULL) == XSEG_OK, "trim on the child's allocator");
    child_expect(xseg_destroy(mine) == XSEG_OK, "destroy of the child's allocator");
}

/* A hung child prints where it is (its one thread) before it dies: the
 * function names come from the symbols the test exports (ENABLE_EXPORTS). */
static void child_hung(int sig)
{
    static const char head[] = "child: hung for 20 s; its stack:\n";
    void *frames[64];
    int n = backtrace(frames, 64);
    if (write(2, head, sizeof head - 1) < 0)
        n = 0;
    backtrace_symbols_fd(frames, n, 2);
    signal(sig, SIG_DFL);
    raise(sig);
}

/* Run fn in a child (a hang becomes SIGALRM); its exit status. */
static int in_child(void (*fn)(void *), void *arg)
{
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        void *warm[1];
        backtrace(warm, 1); /* loads the unwinder now, not in the handler */
        signal(SIGALRM, child_hung); /* not Check's handler, which kills the group */
        alarm(20);
        child_bad = 0;
        fn(arg);
        _exit(child_bad > 100 ? 100 : child_bad);
    }
    int st = 0;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert_msg(WIFEXITED(st), "child killed by signal %d%s", WTERMSIG(st),
                  WTERMSIG(st) == SIGALRM ? " (hung: a lock held at fork time?)" : "");
    return WEXITSTATUS(st);
}

/* ---- the parent's side ---- */

typedef struct parent {
    xseg_t *xs;
    void *big, *small;
    xseg_host_counts before;
} parent;

static parent parent_setup(const char *conf)
{
    parent P = {.xs = t_host(conf)};
    ck_assert_int_eq(xseg_alloc(P.xs, BIG, NULL, &P.big), XSEG_OK);
    ck_assert_int_eq(xseg_alloc(P.xs, SMALL, (void *)2, &P.small), XSEG_OK);
    t_fill(P.big, BIG, 1);
    t_fill(P.small, SMALL, 2);
    void *cached;
    ck_assert_int_eq(xseg_alloc(P.xs, 3 * MiB, NULL, &cached), XSEG_OK);
    ck_assert_int_eq(xseg_free(P.xs, cached), XSEG_OK); /* some cache to trim */
    xseg_host_counts_of(t_host_ctx(P.xs), &P.before);
    return P;
}

/* Nothing the child did reached the parent's memory or books. */
static void parent_intact(parent *P)
{
    xseg_host_counts now;
    xseg_host_counts_of(t_host_ctx(P->xs), &now);
    ck_assert_uint_eq(now.mappings, P->before.mappings);
    ck_assert_uint_eq(now.mapped_bytes, P->before.mapped_bytes);
    ck_assert_uint_eq(now.handles, P->before.handles);
    ck_assert_uint_eq(now.reservations, P->before.reservations);
    ck_assert(xseg_host_is_accessible(t_host_ctx(P->xs), (uintptr_t)P->big));
    ck_assert(t_check(P->big, BIG, 1));
    ck_assert(t_check(P->small, SMALL, 2));
    void *p;
    ck_assert_int_eq(xseg_alloc(P->xs, 2 * MiB, NULL, &p), XSEG_OK);
    t_fill(p, 2 * MiB, 3);
    ck_assert(t_check(p, 2 * MiB, 3));
    ck_assert_int_eq(xseg_free(P->xs, p), XSEG_OK);
    ck_assert_int_eq(xseg_free(P->xs, P->big), XSEG_OK);
    ck_assert_int_eq(xseg_free(P->xs, P->small), XSEG_OK);
    ck_assert_int_eq(xseg_trim(P->xs, 0, NULL), XSEG_OK);
    ck_assert_uint_eq(t_stats(P->xs).mapped_bytes.current, 0);
    ck_assert_int_eq(xseg_destroy(P->xs), XSEG_OK);
}

static void calls_then_destroy(void *arg)
{
    parent *P = arg;
    child_calls(P->xs, P->big, P->small);
    abandon(P->xs);
    child_expect(xseg_destroy(P->xs) == XSEG_OK, "xseg_destroy in the child");
    child_new_allocator();
}

START_TEST(child_calls_fail_and_destroy_is_harmless)
{
    parent P = parent_setup("history:16");
    ck_assert_int_eq(in_child(calls_then_destroy, &P), 0);
    parent_intact(&P);
}
END_TEST

static void only_new_allocator(void *arg)
{
    (void)arg;
    child_new_allocator();
}

START_TEST(child_leaves_without_destroy)
{
    parent P = parent_setup(NULL);
    ck_assert_int_eq(in_child(only_new_allocator, &P), 0);
    parent_intact(&P);
}
END_TEST

/* exit() in the child: the inherited default allocator fails with
 * XSEG_ERR_FORKED, and nothing of xseg is torn down at exit. */
static void child_exit_with_defaults(void *arg)
{
    (void)arg;
    xseg_t *d = NULL;
    void *p = NULL;
    child_expect(xseg_default(0, &d) == XSEG_OK && d, "xseg_default in the child");
    if (d)
        abandon(d);
    if (d)
        child_forked(xseg_alloc(d, 1000, NULL, &p), "xseg_alloc on the inherited default");
    child_expect(xseg_torch_alloc(1000, 0, NULL) == NULL, "xseg_torch_alloc in the child");
    exit(child_bad > 100 ? 100 : child_bad);
}

START_TEST(child_exit_runs_default_teardown)
{
    xseg_t *d = NULL;
    void *p;
    ck_assert_int_eq(xseg_default(0, &d), XSEG_OK);
    ck_assert_str_eq(xseg_backend_name(d), "host");
    ck_assert_int_eq(xseg_alloc(d, BIG, NULL, &p), XSEG_OK);
    t_fill(p, BIG, 5);
    xseg_host_counts before, now;
    xseg_host_counts_of(t_host_ctx(d), &before);
    ck_assert_int_eq(in_child(child_exit_with_defaults, NULL), 0);
    xseg_host_counts_of(t_host_ctx(d), &now);
    ck_assert_uint_eq(now.mapped_bytes, before.mapped_bytes);
    ck_assert_uint_eq(now.handles, before.handles);
    ck_assert(t_check(p, BIG, 5));
    /* a default allocator lives until the process ends: destroy refuses it */
    ck_assert_int_eq(xseg_destroy(d), XSEG_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(xseg_last_error(), "default allocator of device 0"));
    ck_assert_int_eq(xseg_free(d, p), XSEG_OK);
}
END_TEST

/* ---- fork while other threads are inside the allocator ---- */

typedef struct traffic {
    xseg_t *xs;
    atomic_int stop;
    atomic_long ops;
} traffic;

static void *traffic_run(void *arg)
{
    traffic *t = arg;
    unsigned seed = 99;
    void *p[16] = {0};
    while (!atomic_load(&t->stop)) {
        int i = rand_r(&seed) % 16;
        if (p[i]) {
            xseg_free(t->xs, p[i]);
            p[i] = NULL;
        } else if (xseg_alloc(t->xs, 1 + (size_t)rand_r(&seed) % (3 * MiB), NULL, &p[i]) != XSEG_OK) {
            p[i] = NULL;
        }
        if (rand_r(&seed) % 64 == 0)
            xseg_trim(t->xs, 0, NULL);
        if (rand_r(&seed) % 16 == 0) {
            xseg_stats st = {.size = sizeof st};
            xseg_get_stats(t->xs, &st);
        }
        atomic_fetch_add(&t->ops, 1);
    }
    for (int i = 0; i < 16; i++)
        if (p[i])
            xseg_free(t->xs, p[i]);
    return NULL;
}

static void busy_child(void *arg)
{
    traffic *t = arg;
    void *p = NULL;
    char buf[64];
    size_t len;
    child_forked(xseg_alloc(t->xs, 4096, NULL, &p), "xseg_alloc");
    child_forked(xseg_snapshot_json(t->xs, buf, sizeof buf, &len), "xseg_snapshot_json");
    abandon(t->xs);
    child_expect(xseg_destroy(t->xs) == XSEG_OK, "xseg_destroy in the child");
    child_new_allocator();
}

START_TEST(fork_during_traffic)
{
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
    /* The sanitizers' allocators are not fork-safe in GCC 12's runtimes: a
     * child forked while another thread is inside malloc may hang in their
     * locks, not ours.  This runs in the plain build and under valgrind. */
    printf("fork: fork during traffic skipped under a sanitizer\n");
    return;
#endif
    traffic t = {.xs = t_host("history:16")};
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&th[i], NULL, traffic_run, &t);
    int forks = 40, bad = 0;
    for (int k = 0; k < forks; k++) {
        usleep(2000);
        bad += in_child(busy_child, &t) != 0;
    }
    atomic_store(&t.stop, 1);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    ck_assert_int_eq(bad, 0);
    ck_assert_int_eq(xseg_trim(t.xs, 0, NULL), XSEG_OK);
    ck_assert_uint_eq(t_stats(t.xs).mapped_bytes.current, 0);
    ck_assert_int_eq(xseg_destroy(t.xs), XSEG_OK);
    printf("fork: %d children forked during %ld operations of 2 threads\n", forks,
           atomic_load(&t.ops));
}
END_TEST

/* ---- fork while other threads hold the process-wide locks ----
 * Threads sit in xseg_default (device 1 fails to open, retried under the
 * defaults lock each time), in the PyTorch entry points, in graph pools
 * (whose lock is held across a pool's creation) and in stats_shm allocators
 * (the file lock, around creation and destroy), and in the out-of-memory
 * handler table (its lock, which destroy takes).  Before these locks were
 * held across fork(), a child hung on one of them nearly every time. */

typedef struct hammer {
    atomic_int stop;
    atomic_long ops;
} hammer;

static void *hammer_default(void *arg)
{
    hammer *h = arg;
    while (!atomic_load(&h->stop)) {
        xseg_t *x = NULL;
        xseg_default(1, &x);
        atomic_fetch_add(&h->ops, 1);
    }
    return NULL;
}

static void *hammer_torch(void *arg)
{
    hammer *h = arg;
    unsigned seed = 7;
    while (!atomic_load(&h->stop)) {
        size_t size = 1 + (size_t)rand_r(&seed) % MiB;
        void *p = xseg_torch_alloc(size, 0, NULL);
        if (p)
            xseg_torch_free(p, size, 0, NULL);
        atomic_fetch_add(&h->ops, 1);
    }
    return NULL;
}

static void *hammer_pools(void *arg)
{
    hammer *h = arg;
    for (uint64_t k = 0; !atomic_load(&h->stop); k++) {
        xseg_torch_pool_id id = {0x9001, k};
        xseg_torch_begin_pool(0, id, NULL);
        void *p = xseg_torch_alloc(4096, 0, NULL);
        xseg_torch_end_pool(0, id);
        if (p)
            xseg_torch_free(p, 4096, 0, NULL);
        xseg_torch_release_pool(0, id);
        xseg_torch_reset();
        atomic_fetch_add(&h->ops, 1);
    }
    return NULL;
}

#define SHM_CONF "backend:host,host_capacity:64MB,stats_shm:on"

static int no_oom(xseg_t *xs, size_t size, void *user)
{
    (void)xs, (void)size, (void)user;
    return 0;
}

/* Sets and removes an out-of-memory handler (the handler table's lock,
 * which xseg_destroy takes too). */
static void *hammer_oom(void *arg)
{
    hammer *h = arg;
    xseg_t *x = t_host(NULL);
    while (!atomic_load(&h->stop)) {
        xseg_set_oom_handler(x, no_oom, NULL);
        xseg_set_oom_handler(x, NULL, NULL);
        atomic_fetch_add(&h->ops, 1);
    }
    xseg_destroy(x);
    return NULL;
}

static void *hammer_shm(void *arg)
{
    hammer *h = arg;
    while (!atomic_load(&h->stop)) {
        xseg_t *x = NULL;
        void *p = NULL;
        if (xseg_create(&x, 0, SHM_CONF) == XSEG_OK) {
            xseg_alloc(x, 10000, NULL, &p);
            if (p)
                xseg_free(x, p);
            xseg_destroy(x);
        }
        atomic_fetch_add(&h->ops, 1);
    }
    return NULL;
}

/* In the child: every path through a process-wide lock completes. */
static void locks_child(void *arg)
{
    (void)arg;
    /* What the parent's threads had just allocated is referred to only from
     * their stacks, which the child does not have: valgrind would count it
     * as lost at the child's exit (its exit status 99). */
    if (RUNNING_ON_VALGRIND)
        VALGRIND_CLO_CHANGE("--leak-check=no");
    xseg_t *x = NULL;
    child_expect(xseg_default(1, &x) == XSEG_ERR_NO_DEVICE, "xseg_default(1) in the child");
    child_expect(xseg_default(0, &x) == XSEG_OK && x, "xseg_default(0) in the child");
    if (x)
        abandon(x); /* the parent's (XSEG_ERR_FORKED here), or one made here */
    xseg_torch_pool_id id = {0xc41d, (uint64_t)getpid()};
    xseg_torch_begin_pool(0, id, NULL);
    child_expect(xseg_last_error()[0] == '\0', "xseg_torch_begin_pool in the child");
    void *p = xseg_torch_alloc(4096, 0, NULL);
    child_expect(p != NULL, "xseg_torch_alloc into the child's own graph pool");
    xseg_torch_end_pool(0, id);
    if (p) {
        t_fill(p, 4096, 9);
        child_expect(t_check(p, 4096, 9), "data in the child's pool");
        xseg_torch_free(p, 4096, 0, NULL);
        child_expect(xseg_last_error()[0] == '\0', "xseg_torch_free in the child");
    }
    xseg_torch_release_pool(0, id);
    xseg_torch_reset();
    xseg_t *mine = NULL;
    void *q = NULL;
    child_expect(xseg_create(&mine, 0, SHM_CONF) == XSEG_OK, "xseg_create with stats_shm in the child");
    if (mine) {
        child_expect(xseg_alloc(mine, 10000, NULL, &q) == XSEG_OK, "alloc in the child");
        child_expect(!q || xseg_free(mine, q) == XSEG_OK, "free in the child");
        child_expect(xseg_destroy(mine) == XSEG_OK, "destroy in the child");
    }
}

START_TEST(fork_while_threads_hold_process_locks)
{
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
    printf("fork: fork while threads hold process locks skipped under a sanitizer\n");
    return; /* as fork_during_traffic: the sanitizers' allocators are not fork-safe */
#endif
    char dir[] = "/tmp/xseg-fork-shm.XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    setenv(XSEG_SHM_DIR_ENV, dir, 1); /* before the threads start */
    hammer h = {0};
    void *(*fns[5])(void *) = {hammer_default, hammer_torch, hammer_pools, hammer_shm,
                               hammer_oom};
    enum { HAMMERS = sizeof fns / sizeof *fns };
    pthread_t th[HAMMERS];
    for (int i = 0; i < HAMMERS; i++)
        ck_assert_int_eq(pthread_create(&th[i], NULL, fns[i], &h), 0);
    int forks = RUNNING_ON_VALGRIND ? 10 : 50, bad = 0;
    for (int k = 0; k < forks; k++) {
        usleep(1000);
        bad += in_child(locks_child, NULL) != 0; /* a hang fails in in_child */
    }
    atomic_store(&h.stop, 1);
    for (int i = 0; i < HAMMERS; i++)
        pthread_join(th[i], NULL);
    xseg_torch_reset();
    xseg_torch_pools_info info;
    ck_assert_int_eq(xseg_torch_pools(-1, &info), XSEG_OK);
    ck_assert_uint_eq(info.pools, 0);
    unsetenv(XSEG_SHM_DIR_ENV);
    ck_assert_msg(rmdir(dir) == 0, "%s not empty: a stats_shm file was left behind", dir);
    ck_assert_int_eq(bad, 0);
    printf("fork: %d children forked during %ld operations of %d threads\n", forks,
           atomic_load(&h.ops), (int)HAMMERS);
}
END_TEST

/* ---- exit handlers that run after xseg's own ----
 * A fresh process (this program run again with EXIT_CHILD) registers an
 * exit handler before its first use of xseg, so that any handler xseg
 * registers runs before it.  The handler frees what it got from
 * xseg_torch_alloc and from the default allocator, and allocates again.
 * Before, xseg destroyed the default allocators at exit and this reached
 * freed memory through the PyTorch entry points' device cache (ASan:
 * heap-use-after-free; without ASan, the free was refused as "not
 * allocated by xseg"). */

#define EXIT_CHILD "--exit-handler-child"

static const char *g_argv0;
static int g_late_bad;
static void *g_late_torch, *g_late_own;
static xseg_t *g_late_def;

static void late_expect(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "exit handler: %s (last error: %s)\n", what, xseg_last_error());
        g_late_bad++;
    }
}

static void late_exit_handler(void)
{
    xseg_torch_free(g_late_torch, 4096, 0, NULL);
    late_expect(xseg_last_error()[0] == '\0', "xseg_torch_free at exit");
    late_expect(xseg_free(g_late_def, g_late_own) == XSEG_OK, "xseg_free on the default at exit");
    xseg_t *d = NULL;
    late_expect(xseg_default(0, &d) == XSEG_OK && d == g_late_def,
                "xseg_default at exit gives the same allocator");
    void *p = xseg_torch_alloc(8192, 0, NULL);
    late_expect(p != NULL, "xseg_torch_alloc at exit");
    if (p) {
        t_fill(p, 8192, 4);
        late_expect(t_check(p, 8192, 4), "data allocated at exit");
    }
    xseg_torch_free(p, 8192, 0, NULL);
    late_expect(xseg_last_error()[0] == '\0', "xseg_torch_free of it at exit");
    xseg_stats st = {.size = sizeof st};
    late_expect(d && xseg_get_stats(d, &st) == XSEG_OK && st.active_blocks.current == 0,
                "nothing live left at exit");
    if (g_late_bad)
        _exit(3);
}

static int exit_child_main(void)
{
    alarm(20);
    atexit(late_exit_handler); /* before xseg's first use */
    g_late_torch = xseg_torch_alloc(4096, 0, NULL);
    if (!g_late_torch || xseg_default(0, &g_late_def) != XSEG_OK ||
        xseg_alloc(g_late_def, 5000, NULL, &g_late_own) != XSEG_OK) {
        fprintf(stderr, "exit child: setup failed: %s\n", xseg_last_error());
        _exit(2);
    }
    return 0; /* exit(): xseg's handlers (if any) run first, then late_exit_handler */
}

START_TEST(exit_handler_after_xseg_uses_defaults)
{
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n > 0)
        self[n] = '\0';
    else
        snprintf(self, sizeof self, "%s", g_argv0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        execl(self, self, EXIT_CHILD, (char *)NULL);
        _exit(127);
    }
    int st = 0;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert_msg(WIFEXITED(st), "exit child killed by signal %d", WTERMSIG(st));
    ck_assert_msg(WEXITSTATUS(st) == 0,
                  "exit child exited %d (3: the exit handler failed, see stderr; 1: ASan)",
                  WEXITSTATUS(st));
}
END_TEST

int main(int argc, char **argv)
{
    /* The default allocators of these tests are host ones, on any machine
     * (a GPU cannot be used in a forked child at all).  A child inherits
     * every reservation of the parent (its default allocator, the hammers'
     * graph pools and allocators: 4 x host_capacity of address space
     * each), and valgrind gives the client 64 GB: with the default 4 GB
     * capacity of the valgrind build, a child's own graph pool failed to
     * reserve its 16 GB when the fork came while two pools were open. */
    setenv("XSEG_CONF", "backend:host,host_capacity:1GB", 1);
    g_argv0 = argv[0];
    if (argc > 1 && strcmp(argv[1], EXIT_CHILD) == 0)
        return exit_child_main();
    Suite *s = suite_create("fork");
    TCase *tc = tcase_create("fork");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, child_calls_fail_and_destroy_is_harmless);
    tcase_add_test(tc, child_leaves_without_destroy);
    tcase_add_test(tc, child_exit_runs_default_teardown);
    tcase_add_test(tc, fork_during_traffic);
    tcase_add_test(tc, fork_while_threads_hold_process_locks);
    tcase_add_test(tc, exit_handler_after_xseg_uses_defaults);
    suite_add_tcase(s, tc);
    return t_run(s);
}
