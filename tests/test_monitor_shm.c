/* test_monitor_shm.c: live stats in shared memory (conf key stats_shm,
 * lib/shm.c, lib/shm_format.h) and the xseg-top tool: the file's life,
 * exact values, slots, a bad directory, fork, a replay read live from
 * another process without torn records, removal of dead processes'
 * files, and `xseg-top --prometheus` equal to the library's text (same
 * families, HELP lines and values) and valid UTF-8 whatever the process
 * name; the tag rows (version 5): published once a tag is in use, equal to
 * xseg_tag_stats_get, a sleeping tag shown asleep, and xseg-top's tag
 * table, "tags" and tag families (the library's tag samples). */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "shm_format.h"
#include "xseg.h"
#include "support_common.h"

#define MIB ((size_t)1 << 20)
#define TOP XSEG_BINARY_DIR "/tools/xseg-top/xseg-top"
#define RECORD XSEG_BINARY_DIR "/tools/xseg-record/xseg-record"
#define CONF "backend:host,host_capacity:256MB,stats_shm:on"

static char g_dir[256];

static void setup(void)
{
    snprintf(g_dir, sizeof g_dir, "/tmp/xseg-shm-test.XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(g_dir));
    setenv(XSEG_SHM_DIR_ENV, g_dir, 1);
}

static void teardown(void)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    ck_assert_int_eq(system(cmd), 0);
}

static void file_of(pid_t pid, char *path, size_t len)
{
    snprintf(path, len, "%s/" XSEG_SHM_PREFIX "%d", g_dir, (int)pid);
}

static int exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* A read-only mapping of a process's file, or NULL. */
typedef struct view {
    void *base;
    size_t len;
} view;

static view open_view(pid_t pid)
{
    char path[512];
    struct stat st;
    view v = {NULL, 0};
    file_of(pid, path, sizeof path);
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return v;
    if (fstat(fd, &st) == 0 && st.st_size > 0) {
        void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
        if (p != MAP_FAILED) {
            v.base = p;
            v.len = (size_t)st.st_size;
        }
    }
    close(fd);
    return v;
}

static void close_view(view *v)
{
    if (v->base)
        munmap(v->base, v->len);
    v->base = NULL;
}

/* Fields of slot i; returns xseg_shm_read's result. */
static int read_slot(view *v, uint32_t i, uint64_t out[XSF_COUNT])
{
    const xseg_shm_header *h = v->base;
    return xseg_shm_read(xseg_shm_slot(v->base, h, i), out, 1000);
}

static int used_slots(view *v)
{
    const xseg_shm_header *h = v->base;
    uint64_t f[XSF_COUNT];
    int n = 0;
    for (uint32_t i = 0; i < h->nslots; i++)
        n += read_slot(v, i, f) == 1;
    return n;
}

static xseg_t *make(const char *conf)
{
    xseg_t *xs = NULL;
    ck_assert_msg(xseg_create(&xs, 0, conf) == XSEG_OK, "%s", xseg_last_error());
    return xs;
}

/* Run a command; its exit status (or -1). */
static int run_cmd(const char *cmd)
{
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static char *slurp_cmd(const char *cmd)
{
    FILE *f = popen(cmd, "r");
    ck_assert_ptr_nonnull(f);
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    size_t got;
    while ((got = fread(buf + n, 1, cap - n - 1, f)) > 0) {
        n += got;
        if (n + 1 == cap)
            buf = realloc(buf, cap *= 2);
    }
    buf[n] = '\0';
    pclose(f);
    return buf;
}

/* ---- the file's life ---- */

START_TEST(t_off_by_default)
{
    char path[512];
    xseg_t *xs = make("backend:host,host_capacity:64MB");
    file_of(getpid(), path, sizeof path);
    ck_assert(!exists(path));
    xseg_destroy(xs);
}
END_TEST

START_TEST(t_file_lifecycle)
{
    char path[512];
    file_of(getpid(), path, sizeof path);
    xseg_t *a = make(CONF);
    ck_assert(exists(path));
    view v = open_view(getpid());
    ck_assert_ptr_nonnull(v.base);
    ck_assert(xseg_shm_valid(v.base, v.len));
    const xseg_shm_header *h = v.base;
    ck_assert_int_eq(h->pid, getpid());
    ck_assert_uint_eq(h->start_ticks, xseg_shm_start_ticks(getpid(), NULL));
    ck_assert_uint_eq(h->nslots, XSEG_SHM_SLOTS);
    ck_assert_int_eq(used_slots(&v), 1);
    xseg_t *b = make(CONF);
    ck_assert_int_eq(used_slots(&v), 2);
    xseg_destroy(a);
    ck_assert_int_eq(used_slots(&v), 1);
    ck_assert(exists(path));
    xseg_destroy(b);
    ck_assert(!exists(path));
    close_view(&v);
    /* made again for the next allocator */
    a = make(CONF);
    ck_assert(exists(path));
    xseg_destroy(a);
    ck_assert(!exists(path));
}
END_TEST

START_TEST(t_values_match_stats)
{
    xseg_t *xs = make(CONF);
    void *p[8];
    for (int i = 0; i < 8; i++)
        ck_assert_int_eq(xseg_alloc(xs, (size_t)(i + 1) * MIB + 100, NULL, &p[i]), XSEG_OK);
    for (int i = 0; i < 8; i += 2)
        ck_assert_int_eq(xseg_free(xs, p[i]), XSEG_OK);
    xseg_stats s = {.size = sizeof s};
    ck_assert_int_eq(xseg_get_stats(xs, &s), XSEG_OK);
    view v = open_view(getpid());
    uint64_t f[XSF_COUNT];
    ck_assert_int_eq(read_slot(&v, 0, f), 1);
    char backend[9] = {0};
    memcpy(backend, &f[XSF_BACKEND], 8);
    ck_assert_str_eq(backend, "host");
    ck_assert_uint_eq(f[XSF_DEVICE], 0);
    ck_assert_uint_eq(f[XSF_GENERATION], 1);
    ck_assert_uint_eq(f[XSF_ALLOCATED], s.allocated_bytes.current);
    ck_assert_uint_eq(f[XSF_ALLOCATED_PEAK], s.allocated_bytes.peak);
    ck_assert_uint_eq(f[XSF_REQUESTED], s.requested_bytes.current);
    ck_assert_uint_eq(f[XSF_ACTIVE], 4);
    ck_assert_uint_eq(f[XSF_MAPPED], s.mapped_bytes.current);
    ck_assert_uint_eq(f[XSF_MAPPED_PEAK], s.mapped_bytes.peak);
    ck_assert_uint_eq(f[XSF_ALLOC_CALLS], 8);
    ck_assert_uint_eq(f[XSF_FREE_CALLS], 4);
    ck_assert_uint_eq(f[XSF_DEVICE_TOTAL], s.device_total);
    ck_assert_uint_eq(f[XSF_PAGE_SIZE], s.page_size);
    ck_assert_uint_eq(f[XSF_CAP], 0);
    ck_assert_uint_eq(f[XSF_HANDLES], s.handles.current);
    for (unsigned k = 0; k < XSEG_OP_COUNT; k++)
        ck_assert_uint_eq(f[XSF_DRV + k], s.driver_calls[k]);
    ck_assert_uint_eq(f[XSF_UPDATES], 1 + 8 + 4);
    /* trim publishes too */
    size_t released = 0;
    ck_assert_int_eq(xseg_trim(xs, 0, &released), XSEG_OK);
    ck_assert_int_eq(read_slot(&v, 0, f), 1);
    ck_assert_uint_eq(f[XSF_TRIMS], 1);
    ck_assert_uint_eq(f[XSF_RELEASED], released);
    xseg_get_stats(xs, &s);
    ck_assert_uint_eq(f[XSF_MAPPED], s.mapped_bytes.current);
    close_view(&v);
    xseg_destroy(xs);
}
END_TEST

START_TEST(t_cap_published)
{
    xseg_t *xs = make("backend:host,host_capacity:256MB,stats_shm:on,max_mapped:32MB");
    view v = open_view(getpid());
    uint64_t f[XSF_COUNT];
    ck_assert_int_eq(read_slot(&v, 0, f), 1);
    ck_assert_uint_eq(f[XSF_CAP], 32 * MIB);
    void *p;
    ck_assert_int_eq(xseg_alloc(xs, 64 * MIB, NULL, &p), XSEG_ERR_OOM);
    ck_assert_int_eq(xseg_alloc(xs, MIB, NULL, &p), XSEG_OK);
    ck_assert_int_eq(read_slot(&v, 0, f), 1);
    ck_assert_uint_eq(f[XSF_OOMS], 1);
    ck_assert_uint_eq(f[XSF_ALLOC_CALLS], 2);
    close_view(&v);
    xseg_destroy(xs);
}
END_TEST

START_TEST(t_bad_dir)
{
    setenv(XSEG_SHM_DIR_ENV, "/nonexistent/xseg-shm-dir", 1);
    xseg_t *xs = NULL;
    ck_assert_int_eq(xseg_create(&xs, 0, CONF), XSEG_ERR_CONFIG);
    ck_assert_ptr_null(xs);
    ck_assert_ptr_nonnull(strstr(xseg_last_error(), "/nonexistent/xseg-shm-dir/xseg."));
    ck_assert_ptr_nonnull(strstr(xseg_last_error(), XSEG_SHM_DIR_ENV));
    /* without stats_shm the directory does not matter */
    xs = make("backend:host,host_capacity:64MB");
    xseg_destroy(xs);
}
END_TEST

START_TEST(t_slots_exhausted)
{
    enum { N = XSEG_SHM_SLOTS + 2 };
    xseg_t *xs[N];
    for (int i = 0; i < N; i++)
        xs[i] = make("backend:host,host_capacity:8MB,va_size:64MB,stats_shm:on");
    view v = open_view(getpid());
    const xseg_shm_header *h = v.base;
    ck_assert_int_eq(used_slots(&v), XSEG_SHM_SLOTS);
    ck_assert_uint_eq(atomic_load(&((xseg_shm_header *)v.base)->dropped), 2);
    (void)h;
    /* the unpublished ones work all the same */
    void *p;
    ck_assert_int_eq(xseg_alloc(xs[N - 1], 4096, NULL, &p), XSEG_OK);
    ck_assert_int_eq(xseg_free(xs[N - 1], p), XSEG_OK);
    /* a freed slot is reused by the next allocator, with a new generation */
    uint64_t f[XSF_COUNT];
    ck_assert_int_eq(read_slot(&v, 3, f), 1);
    uint64_t gen = f[XSF_GENERATION];
    xseg_destroy(xs[3]);
    ck_assert_int_eq(read_slot(&v, 3, f), 0);
    xs[3] = make("backend:host,host_capacity:8MB,va_size:64MB,stats_shm:on");
    ck_assert_int_eq(read_slot(&v, 3, f), 1);
    ck_assert_uint_eq(f[XSF_GENERATION], gen + 1);
    close_view(&v);
    for (int i = 0; i < N; i++)
        xseg_destroy(xs[i]);
}
END_TEST

/* A child after fork() gets a file of its own; the parent's stays. */
START_TEST(t_fork)
{
    char path[512];
    xseg_t *xs = make(CONF);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        xseg_destroy(xs); /* the parent's allocator: must not touch its file */
        xseg_t *c = NULL;
        int ok = xseg_create(&c, 0, CONF) == XSEG_OK;
        file_of(getpid(), path, sizeof path);
        ok = ok && exists(path);
        xseg_destroy(c);
        ok = ok && !exists(path);
        _exit(ok ? 0 : 1);
    }
    int st = 0;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    file_of(getpid(), path, sizeof path);
    ck_assert(exists(path));
    view v = open_view(getpid());
    ck_assert_int_eq(used_slots(&v), 1);
    close_view(&v);
    xseg_destroy(xs);
}
END_TEST

/* ---- another process reads live ---- */

static void wait_byte(int fd)
{
    char c;
    ck_assert_int_eq(read(fd, &c, 1), 1);
}

static void send_byte(int fd)
{
    ck_assert_int_eq(write(fd, "x", 1), 1);
}

/* The child: checkpoints with known numbers, then a free-running phase of
 * 1 MiB alloc/free pairs until told to stop. */
static void child_workload(int rd, int wr)
{
    xseg_t *xs = NULL;
    if (xseg_create(&xs, 0, CONF) != XSEG_OK)
        _exit(2);
    void *p[16];
    for (int i = 0; i < 10; i++)
        xseg_alloc(xs, 3 * MIB, NULL, &p[i]);
    send_byte(wr); /* checkpoint 1: 10 x 3 MiB live */
    wait_byte(rd);
    for (int i = 0; i < 10; i++)
        xseg_free(xs, p[i]);
    send_byte(wr); /* checkpoint 2: nothing live */
    wait_byte(rd);
    int flags = fcntl(rd, F_GETFL);
    fcntl(rd, F_SETFL, flags | O_NONBLOCK);
    char c;
    for (unsigned long n = 0; read(rd, &c, 1) != 1; n++) {
        int k = (int)(n % 16);
        if (n >= 16)
            xseg_free(xs, p[k]);
        xseg_alloc(xs, MIB, (void *)(uintptr_t)(n % 3), &p[k]);
    }
    xseg_destroy(xs);
    _exit(0);
}

static int find_slot(view *v, uint64_t f[XSF_COUNT])
{
    const xseg_shm_header *h = v->base;
    for (uint32_t i = 0; i < h->nslots; i++)
        if (read_slot(v, i, f) == 1)
            return (int)i;
    return -1;
}

/* Torn records would break these identities, which hold at every
 * publication of the free-running phase. */
static void check_consistent(const uint64_t f[XSF_COUNT], uint64_t base_calls)
{
    ck_assert_uint_eq(f[XSF_ALLOCATED], f[XSF_ACTIVE] * MIB);
    ck_assert_uint_eq(f[XSF_REQUESTED], f[XSF_ACTIVE] * MIB);
    ck_assert_uint_eq(f[XSF_ALLOC_CALLS] - f[XSF_FREE_CALLS], f[XSF_ACTIVE]);
    ck_assert_uint_eq(f[XSF_UPDATES], 1 + f[XSF_ALLOC_CALLS] + f[XSF_FREE_CALLS] - base_calls);
    ck_assert_uint_ge(f[XSF_MAPPED], f[XSF_ALLOCATED]);
}

static long elapsed_ns(struct timespec a, struct timespec b)
{
    return (b.tv_sec - a.tv_sec) * 1000000000L + (b.tv_nsec - a.tv_nsec);
}

START_TEST(t_cross_process)
{
    int to_child[2], to_parent[2];
    ck_assert_int_eq(pipe(to_child), 0);
    ck_assert_int_eq(pipe(to_parent), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0)
        child_workload(to_child[0], to_parent[1]);
    uint64_t f[XSF_COUNT];
    wait_byte(to_parent[0]);
    view v = open_view(pid);
    ck_assert_ptr_nonnull(v.base);
    ck_assert(xseg_shm_valid(v.base, v.len));
    ck_assert_int_eq(((const xseg_shm_header *)v.base)->pid, pid);
    int slot = find_slot(&v, f);
    ck_assert_int_ge(slot, 0);
    ck_assert_uint_eq(f[XSF_ALLOCATED], 30 * MIB);
    ck_assert_uint_eq(f[XSF_ACTIVE], 10);
    ck_assert_uint_ge(f[XSF_MAPPED], 30 * MIB);
    ck_assert_uint_eq(f[XSF_ALLOC_CALLS], 10);
    send_byte(to_child[1]);
    wait_byte(to_parent[0]);
    ck_assert_int_eq(read_slot(&v, (uint32_t)slot, f), 1);
    ck_assert_uint_eq(f[XSF_ALLOCATED], 0);
    ck_assert_uint_eq(f[XSF_FREE_CALLS], 10);
    ck_assert_uint_eq(f[XSF_ALLOCATED_PEAK], 30 * MIB);
    send_byte(to_child[1]);
    /* free-running: read as fast as possible for half a second, and on
     * until 1001 consistent reads (up to 20 s), since under TSan on a loaded
     * 2-core machine the writer can keep the record busy for long.  The
     * clock is read on every pass, busy ones too (a busy first read used to
     * leave t unset for the loop test: seen once in CI as 0 reads). */
    unsigned long reads = 0, busy = 0;
    uint64_t last_updates = 0;
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do {
        int rc = read_slot(&v, (uint32_t)slot, f);
        clock_gettime(CLOCK_MONOTONIC, &t);
        ck_assert_int_ne(rc, 0);
        if (rc < 0) {
            busy++;
            continue;
        }
        reads++;
        check_consistent(f, 0);
        ck_assert_uint_ge(f[XSF_UPDATES], last_updates);
        last_updates = f[XSF_UPDATES];
    } while (elapsed_ns(t0, t) < 500000000L || (reads <= 1000 && elapsed_ns(t0, t) < 20000000000L));
    send_byte(to_child[1]);
    int st = 0;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    ck_assert_uint_gt(reads, 1000);
    ck_assert_uint_gt(last_updates, 1000); /* the writer ran while we read */
    fprintf(stderr, "t_cross_process: %lu consistent reads, %lu busy, %llu updates seen\n",
            reads, busy, (unsigned long long)last_updates);
    close_view(&v);
    char path[512];
    file_of(pid, path, sizeof path);
    ck_assert(!exists(path)); /* removed at the child's destroy */
}
END_TEST

/* A small trace, written as text: growing, churning, shrinking. */
static void write_trace(const char *path, int n)
{
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "# xseg-trace v1: test\n");
    for (int i = 0; i < n; i++) {
        fprintf(f, "a,%d,%d,%d\n", i, (i % 7 + 1) * 300000 + i % 1000, i % 2);
        if (i >= 64)
            fprintf(f, "f,%d\n", i - 64);
    }
    for (int i = n - 64; i < n; i++)
        fprintf(f, "f,%d\n", i);
    fclose(f);
}

START_TEST(t_replay_read_live)
{
    if (access(RECORD, X_OK) != 0 || access(TOP, X_OK) != 0) {
        fprintf(stderr, "t_replay_read_live: tools not built, not run\n");
        return;
    }
    char trace[512], cmd[2048];
    snprintf(trace, sizeof trace, "%s/trace.txt", g_dir);
    write_trace(trace, 20000);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        execl(RECORD, RECORD, trace, "--conf", CONF, "--pace", "100000", "--quiet", (char *)NULL);
        _exit(127);
    }
    view v = {NULL, 0};
    for (int i = 0; i < 500 && !v.base; i++) {
        usleep(10000);
        v = open_view(pid);
    }
    ck_assert_ptr_nonnull(v.base);
    uint64_t f[XSF_COUNT], first = 0, seen_live = 0;
    int slot = -1;
    for (int i = 0; i < 500 && slot < 0; i++, usleep(1000))
        slot = find_slot(&v, f);
    ck_assert_int_ge(slot, 0);
    first = f[XSF_UPDATES];
    for (int i = 0; i < 20; i++) {
        usleep(20000);
        if (read_slot(&v, (uint32_t)slot, f) == 1 && f[XSF_ALLOCATED] > seen_live)
            seen_live = f[XSF_ALLOCATED];
    }
    ck_assert_uint_gt(f[XSF_UPDATES], first); /* progress seen from outside */
    ck_assert_uint_gt(seen_live, 0);
    /* and through the tool */
    snprintf(cmd, sizeof cmd, TOP " --once --json --interval 0.1 --dir '%s'", g_dir);
    char *out = slurp_cmd(cmd);
    char want[64];
    snprintf(want, sizeof want, "{\"pid\":%d,", (int)pid);
    ck_assert_msg(strstr(out, want) != NULL, "xseg-top output: %s", out);
    ck_assert_ptr_nonnull(strstr(out, "\"alloc_per_s\":"));
    ck_assert_ptr_nonnull(strstr(out, "\"backend\":\"host\""));
    free(out);
    snprintf(cmd, sizeof cmd, TOP " --once --dir '%s'", g_dir);
    out = slurp_cmd(cmd);
    ck_assert_msg(strstr(out, "1 process, 1 allocator") != NULL, "xseg-top output: %s", out);
    free(out);
    close_view(&v);
    kill(pid, SIGKILL); /* dies without cleaning up: xseg-top must */
    int st;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    char path[512];
    file_of(pid, path, sizeof path);
    ck_assert(exists(path));
    snprintf(cmd, sizeof cmd, TOP " --once --dir '%s'", g_dir);
    out = slurp_cmd(cmd);
    ck_assert_msg(strstr(out, "removed 1 file") != NULL, "xseg-top output: %s", out);
    free(out);
    ck_assert(!exists(path));
}
END_TEST

/* Files of dead processes (exited without destroy, or whose pid now
 * names another process) are removed; live ones and foreign files stay. */
START_TEST(t_stale_cleanup)
{
    if (access(TOP, X_OK) != 0) {
        fprintf(stderr, "t_stale_cleanup: xseg-top not built, not run\n");
        return;
    }
    char dead[512], reused[512], other[512], cmd[1600];
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        xseg_t *xs = NULL;
        xseg_create(&xs, 0, CONF);
        _exit(0); /* no destroy, no destructors: the file stays */
    }
    int st;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    file_of(pid, dead, sizeof dead);
    ck_assert(exists(dead));
    /* our own pid with another start time: a reused pid */
    xseg_t *xs = make(CONF);
    view v = open_view(getpid());
    file_of(getpid(), reused, sizeof reused);
    snprintf(other, sizeof other, "%s/unrelated.txt", g_dir);
    snprintf(cmd, sizeof cmd, "cp '%s' '%s.copy' && echo hi > '%s'", reused, reused, other);
    ck_assert_int_eq(run_cmd(cmd), 0);
    close_view(&v);
    xseg_destroy(xs);
    snprintf(cmd, sizeof cmd, "mv '%s.copy' '%s'", reused, reused);
    ck_assert_int_eq(run_cmd(cmd), 0);
    int fd = open(reused, O_RDWR);
    ck_assert_int_ge(fd, 0);
    uint64_t bogus = 12345;
    ck_assert_int_eq(pwrite(fd, &bogus, sizeof bogus, offsetof(xseg_shm_header, start_ticks)), 8);
    close(fd);
    /* --no-clean leaves them */
    snprintf(cmd, sizeof cmd, TOP " --once --no-clean --dir '%s' > /dev/null", g_dir);
    ck_assert_int_eq(run_cmd(cmd), 0);
    ck_assert(exists(dead) && exists(reused));
    snprintf(cmd, sizeof cmd, TOP " --once --json --dir '%s'", g_dir);
    char *out = slurp_cmd(cmd);
    ck_assert_msg(strstr(out, "\"stale_removed\":2") != NULL, "xseg-top output: %s", out);
    free(out);
    ck_assert(!exists(dead));
    ck_assert(!exists(reused));
    ck_assert(exists(other));
}
END_TEST

/* ---- xseg-top --prometheus is the library's text (issue 19) ---- */

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int strnstr_(const char *l, const char *w, size_t len)
{
    size_t n = strlen(w);
    for (size_t i = 0; i + n <= len; i++)
        if (memcmp(l + i, w, n) == 0)
            return 1;
    return 0;
}

/* The lines of text that start with prefix (or, with prefix NULL, the
 * sample lines) but xseg-top's own xseg_top_processes, each with `strip` removed where it follows the first '{'
 * (when it does), sorted.  Returns the count. */
static int lines_of(const char *text, const char *prefix, const char *strip, char ***out)
{
    int n = 0, cap = 64;
    char **v = malloc(sizeof *v * (size_t)cap);
    for (const char *l = text; *l;) {
        const char *e = strchr(l, '\n');
        size_t len = e ? (size_t)(e - l) : strlen(l);
        int take = prefix ? strncmp(l, prefix, strlen(prefix)) == 0 : l[0] != '#' && len > 0;
        if (take && !strnstr_(l, "xseg_top_processes", len)) {
            char *c = strndup(l, len);
            char *b = strchr(c, '{');
            if (strip && b && strncmp(b + 1, strip, strlen(strip)) == 0)
                memmove(b + 1, b + 1 + strlen(strip), strlen(b + 1 + strlen(strip)) + 1);
            if (n == cap)
                v = realloc(v, sizeof *v * (size_t)(cap *= 2));
            v[n++] = c;
        }
        l += len + (e != NULL);
    }
    qsort(v, (size_t)n, sizeof *v, cmp_str);
    *out = v;
    return n;
}

static void free_lines(char **v, int n)
{
    for (int i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

/* Equal sets of lines, except those containing `skip` (may be NULL). */
static void same_lines(char **a, int na, char **b, int nb, const char *what, const char *skip)
{
    int i = 0, k = 0;
    while (i < na || k < nb) {
        if (i < na && skip && strstr(a[i], skip)) {
            i++;
            continue;
        }
        if (k < nb && skip && strstr(b[k], skip)) {
            k++;
            continue;
        }
        ck_assert_msg(i < na && k < nb && strcmp(a[i], b[k]) == 0,
                      "%s differ: library '%s', xseg-top '%s'", what, i < na ? a[i] : "(none)",
                      k < nb ? b[k] : "(none)");
        i++;
        k++;
    }
}

static char *library_text(xseg_t *xs)
{
    size_t len = 0;
    xseg_stats_prometheus(xs, NULL, 0, &len);
    char *buf = malloc(len + 1);
    ck_assert_int_eq(xseg_stats_prometheus(xs, buf, len + 1, &len), XSEG_OK);
    return buf;
}

/* The families, HELP lines and every sample of `xseg-top --prometheus`
 * equal the library's for the same allocator, less pid/process/slot. */
static void compare_with_top(xseg_t *xs, const char *skip)
{
    char cmd[512], strip[256];
    snprintf(cmd, sizeof cmd, TOP " --prometheus --dir '%s'", g_dir);
    char *top = slurp_cmd(cmd);
    char *lib = library_text(xs);
    snprintf(strip, sizeof strip, "pid=\"%d\",process=\"%s\",slot=\"0\",", (int)getpid(),
             program_invocation_short_name);
    ck_assert_msg(strstr(top, "# HELP xseg_top_processes Processes publishing xseg stats.\n"
                              "# TYPE xseg_top_processes gauge\nxseg_top_processes 1\n"),
                  "xseg-top: %.300s", top);
    char **la, **ta;
    int nl = lines_of(lib, "# HELP ", NULL, &la), nt = lines_of(top, "# HELP ", NULL, &ta);
    ck_assert_int_ge(nl, 30);
    same_lines(la, nl, ta, nt, "HELP lines", NULL);
    free_lines(la, nl);
    free_lines(ta, nt);
    nl = lines_of(lib, "# TYPE ", NULL, &la);
    nt = lines_of(top, "# TYPE ", NULL, &ta);
    same_lines(la, nl, ta, nt, "TYPE lines", NULL);
    free_lines(la, nl);
    free_lines(ta, nt);
    nl = lines_of(lib, NULL, NULL, &la);
    nt = lines_of(top, NULL, strip, &ta);
    same_lines(la, nl, ta, nt, "samples", skip);
    free_lines(la, nl);
    free_lines(ta, nt);
    free(lib);
    free(top);
}

START_TEST(t_prom_same_as_library)
{
    if (access(TOP, X_OK) != 0)
        return;
    xseg_t *xs = make(CONF ",max_mapped:128MB");
    void *p[8];
    for (int i = 0; i < 8; i++)
        ck_assert_int_eq(xseg_alloc(xs, i % 2 ? 512 : (size_t)(i + 1) * MIB, NULL, &p[i]), XSEG_OK);
    for (int i = 0; i < 8; i += 3)
        ck_assert_int_eq(xseg_free(xs, p[i]), XSEG_OK);
    ck_assert_int_eq(xseg_trim(xs, 0, NULL), XSEG_OK);
    ck_assert_int_eq(xseg_alloc(xs, 5 * MIB, NULL, &p[0]), XSEG_OK);
    /* an alloc publishes the hot fields only: all but largest_free match */
    compare_with_top(xs, "xseg_largest_free_block_bytes");
    /* a trim publishes everything */
    ck_assert_int_eq(xseg_trim(xs, SIZE_MAX, NULL), XSEG_OK);
    compare_with_top(xs, NULL);
    /* the record holds every number of xseg_stats */
    view v = open_view(getpid());
    ck_assert_ptr_nonnull(v.base);
    uint64_t f[XSF_COUNT];
    ck_assert_int_eq(read_slot(&v, 0, f), 1);
    xseg_stats a, b = {.size = sizeof b};
    xseg_shm_to_stats(f, &a);
    ck_assert_int_eq(xseg_get_stats(xs, &b), XSEG_OK);
    ck_assert_int_eq(memcmp(&a, &b, sizeof a), 0);
    char ver[17];
    ck_assert_str_eq(xseg_shm_text(&f[XSF_LIB_VERSION], 2, ver), xseg_version());
    close_view(&v);
    xseg_destroy(xs);
}
END_TEST

/* 1 when s[0..n) is valid UTF-8 (RFC 3629). */
static int valid_utf8(const unsigned char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        unsigned c = s[i], len = c < 0x80 ? 1 : c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3
                                               : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
        if (!len || i + len > n)
            return 0;
        unsigned cp = len == 1 ? c : c & (0x7f >> len);
        for (unsigned k = 1; k < len; k++) {
            if ((s[i + k] & 0xc0) != 0x80)
                return 0;
            cp = cp << 6 | (s[i + k] & 0x3f);
        }
        static const unsigned min[] = {0, 0, 0x80, 0x800, 0x10000};
        if (cp < min[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return 0;
        i += len;
    }
    return 1;
}

/* A process name that is not UTF-8 (and holds a quote, a backslash, a
 * newline, and a two-byte character cut by the header's 64-byte field):
 * the text stays valid UTF-8 with the label value escaped. */
START_TEST(t_prom_label_not_utf8)
{
    if (access(TOP, X_OK) != 0)
        return;
    char name[128] = "\xff\xfex\"y\\z\n";
    for (int i = 0; i < 40; i++)
        strcat(name, "\xc3\xa9"); /* e acute */
    char *saved = program_invocation_short_name;
    program_invocation_short_name = name;
    xseg_t *xs = make(CONF);
    program_invocation_short_name = saved;
    char cmd[512];
    snprintf(cmd, sizeof cmd, TOP " --prometheus --dir '%s'", g_dir);
    char *top = slurp_cmd(cmd);
    ck_assert_msg(valid_utf8((const unsigned char *)top, strlen(top)),
                  "xseg-top --prometheus is not UTF-8: %.300s", top);
    char want[256] = "process=\"\xef\xbf\xbd\xef\xbf\xbdx\\\"y\\\\z\\n";
    for (int i = 0; i < 27; i++) /* 63 bytes kept: 8 + 27 * 2 + half of the 28th */
        strcat(want, "\xc3\xa9");
    strcat(want, "\xef\xbf\xbd\",");
    ck_assert_msg(strstr(top, want) != NULL, "no %s in %.300s", want, top);
    free(top);
    xseg_destroy(xs);
}
END_TEST

/* ---- tag rows (format version 5) ---- */

static size_t read_tags(view *v, xseg_tag_stats out[XSEG_SHM_TAGS])
{
    const xseg_shm_header *h = v->base;
    unsigned busy = 0;
    size_t n = xseg_shm_read_tags(xseg_shm_slot(v->base, h, 0), out, 1000, &busy);
    ck_assert_uint_eq(busy, 0);
    return n;
}

/* A row holds what xseg_tag_stats_get gives for its tag. */
static void same_as_library(xseg_t *xs, const xseg_tag_stats *row)
{
    xseg_tag_stats t = {.size = sizeof t};
    ck_assert_int_eq(xseg_tag_stats_get(xs, row->tag, &t), XSEG_OK);
    ck_assert_str_eq(row->name, t.name);
    ck_assert_int_eq(row->asleep, t.asleep);
    ck_assert_int_eq(row->mode, t.mode);
    ck_assert_uint_eq(row->live_bytes.current, t.live_bytes.current);
    ck_assert_uint_eq(row->mapped_bytes.current, t.mapped_bytes.current);
    ck_assert_uint_eq(row->sleeping_bytes, t.sleeping_bytes);
    ck_assert_uint_eq(row->backup_bytes, t.backup_bytes);
    ck_assert_msg(memcmp(row, &t, sizeof t) == 0, "tag %d (%s): the row differs from "
                  "xseg_tag_stats_get", row->tag, t.name);
}

static int named_tag(const char *name)
{
    int t;
    ck_assert_int_eq(xseg_tag_id(name, &t), XSEG_OK);
    xseg_shm_tag_name(t, name); /* what tags.c's registration is to do (tag_fields.h) */
    return t;
}

/* xseg-top --prometheus's tag families (HELP, TYPE and samples) equal the
 * library's, less pid/process/slot. */
static void compare_tags_with_top(xseg_t *xs)
{
    char cmd[512], strip[256];
    snprintf(cmd, sizeof cmd, TOP " --prometheus --dir '%s'", g_dir);
    char *top = slurp_cmd(cmd), *lib = library_text(xs);
    snprintf(strip, sizeof strip, "pid=\"%d\",process=\"%s\",slot=\"0\",", (int)getpid(),
             program_invocation_short_name);
    static const char *const prefix[] = {"# HELP xseg_tag_", "# TYPE xseg_tag_", "xseg_tag_"};
    for (int i = 0; i < 3; i++) {
        char **la, **ta;
        int nl = lines_of(lib, prefix[i], NULL, &la), nt = lines_of(top, prefix[i], strip, &ta);
        ck_assert_int_ge(nl, 11);
        same_lines(la, nl, ta, nt, prefix[i], NULL);
        free_lines(la, nl);
        free_lines(ta, nt);
    }
    free(lib);
    free(top);
}

START_TEST(t_tag_rows)
{
    xseg_t *xs = make(CONF);
    int w = named_tag("shm_w"), kv = named_tag("shm_kv");
    view v = open_view(getpid());
    xseg_tag_stats rows[XSEG_SHM_TAGS];
    void *d, *e, *a, *b;
    ck_assert_int_eq(xseg_alloc(xs, MIB, NULL, &d), XSEG_OK);
    ck_assert_uint_eq(read_tags(&v, rows), 0); /* no tag in use: no rows */
    ck_assert_int_eq(xseg_alloc_tagged(xs, 5 * MIB, NULL, w, &a), XSEG_OK);
    ck_assert_int_eq(xseg_alloc_tagged(xs, 3 * MIB, NULL, kv, &b), XSEG_OK);
    ck_assert_int_eq(xseg_alloc(xs, 3 * MIB, NULL, &e), XSEG_OK); /* the parent publishes */
    ck_assert_uint_eq(read_tags(&v, rows), 3);
    ck_assert_int_eq(rows[0].tag, 0);
    ck_assert_str_eq(rows[0].name, "default");
    ck_assert_int_eq(rows[1].tag, w);
    ck_assert_int_eq(rows[2].tag, kv);
    ck_assert_uint_eq(rows[0].live_bytes.current, 4 * MIB);
    ck_assert_uint_eq(rows[1].live_bytes.current, 5 * MIB);
    ck_assert_uint_eq(rows[2].live_bytes.current, 3 * MIB);
    for (int i = 0; i < 3; i++)
        same_as_library(xs, &rows[i]);
    /* w sleeps; the parent's next update (the family's mapped bytes fell)
     * copies the rows */
    ck_assert_int_eq(xseg_sleep(xs, &w, 1, XSEG_SLEEP_BACKUP), XSEG_OK);
    ck_assert_int_eq(xseg_free(xs, e), XSEG_OK);
    ck_assert_uint_eq(read_tags(&v, rows), 3);
    ck_assert_int_eq(rows[1].asleep, 1);
    ck_assert_int_eq(rows[1].mode, XSEG_SLEEP_BACKUP);
    ck_assert_uint_eq(rows[1].sleeping_bytes, 5 * MIB);
    ck_assert_uint_eq(rows[1].backup_bytes, 5 * MIB);
    ck_assert_uint_eq(rows[1].mapped_bytes.current, 0);
    ck_assert_uint_eq(rows[1].sleeps, 1);
    ck_assert_int_eq(rows[2].asleep, 0);
    ck_assert_uint_eq(rows[0].live_bytes.current, MIB); /* tag 0's row: every update */
    for (int i = 0; i < 3; i++)
        same_as_library(xs, &rows[i]);
    if (access(TOP, X_OK) == 0) {
        char cmd[512];
        snprintf(cmd, sizeof cmd, TOP " --once --dir '%s'", g_dir);
        char *out = slurp_cmd(cmd);
        ck_assert_msg(strstr(out, "shm_w") && strstr(out, "asleep (backup)") &&
                          strstr(out, "shm_kv") && strstr(out, "awake"),
                      "xseg-top: %s", out);
        ck_assert_msg(strstr(out, "live 9.00M"), "the summary counts every tag: %s", out);
        free(out);
        snprintf(cmd, sizeof cmd, TOP " --once --json --dir '%s'", g_dir);
        out = slurp_cmd(cmd);
        ck_assert_msg(strstr(out, ",\"tags\":[{\"id\":0,\"name\":\"default\",\"asleep\":0,") &&
                          strstr(out, "\"name\":\"shm_w\",\"asleep\":1,\"mode\":\"backup\","),
                      "xseg-top --json: %s", out);
        free(out);
        compare_tags_with_top(xs);
    }
    /* awake again */
    ck_assert_int_eq(xseg_wake(xs, &w, 1), XSEG_OK);
    ck_assert_int_eq(xseg_alloc(xs, MIB, NULL, &e), XSEG_OK);
    ck_assert_uint_eq(read_tags(&v, rows), 3);
    ck_assert_int_eq(rows[1].asleep, 0);
    ck_assert_uint_eq(rows[1].wakes, 1);
    ck_assert_uint_eq(rows[1].sleeping_bytes, 0);
    ck_assert_uint_eq(rows[1].mapped_bytes.current, 6 * MIB);
    same_as_library(xs, &rows[1]);
    xseg_destroy(xs);
    /* a new allocator in the same slot starts without rows */
    xs = make(CONF);
    close_view(&v);
    v = open_view(getpid());
    ck_assert_uint_eq(read_tags(&v, rows), 0);
    close_view(&v);
    xseg_destroy(xs);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("monitor_shm");
    TCase *tc = tcase_create("shm");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, t_off_by_default);
    tcase_add_test(tc, t_file_lifecycle);
    tcase_add_test(tc, t_values_match_stats);
    tcase_add_test(tc, t_cap_published);
    tcase_add_test(tc, t_bad_dir);
    tcase_add_test(tc, t_slots_exhausted);
    tcase_add_test(tc, t_fork);
    tcase_add_test(tc, t_cross_process);
    tcase_add_test(tc, t_replay_read_live);
    tcase_add_test(tc, t_stale_cleanup);
    tcase_add_test(tc, t_prom_same_as_library);
    tcase_add_test(tc, t_prom_label_not_utf8);
    tcase_add_test(tc, t_tag_rows);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return t_run(suite());
}
