/* support_common.c: helpers shared by the Check suites (see the header). */
#include "support_common.h"

#include <fcntl.h>
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <spawn.h>
#include <sys/wait.h>

#include "internal.h"

size_t t_ring_size(unsigned i)
{
    uint64_t x = (uint64_t)(i + 1) * 6364136223846793005ull + 1442695040888963407ull;
    x ^= x >> 29;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 32;
    double u = (double)(x >> 11) / (double)(1ull << 53);
    return (size_t)exp(log(512.0) + u * (log(32.0 * MiB) - log(512.0)));
}

xseg_t *t_host(const char *extra)
{
    char conf[512];
    snprintf(conf, sizeof conf, "backend:host%s%s", extra && *extra ? "," : "", extra ? extra : "");
    xseg_t *xs = NULL;
    xseg_status st = xseg_create(&xs, 0, conf);
    ck_assert_msg(st == XSEG_OK, "xseg_create(%s): %s", conf, xseg_last_error());
    return xs;
}

void t_check_ok(xseg_t *xs)
{
    ck_assert_msg(xseg_check(xs) == XSEG_OK, "%s", xseg_last_error());
}

xseg_stats t_stats(xseg_t *xs)
{
    xseg_stats s = {.size = sizeof s};
    ck_assert_int_eq(xseg_get_stats(xs, &s), XSEG_OK);
    return s;
}

void *t_host_ctx(xseg_t *xs)
{
    return xs->dctx;
}

static inline uint64_t word_of(uint32_t seed, size_t off)
{
    uint64_t x = ((uint64_t)seed << 32) ^ (off * 0x9E3779B97F4A7C15ull);
    x ^= x >> 29;
    return x * 0xBF58476D1CE4E5B9ull;
}

#define T_STEP (64u << 10)

static void put(unsigned char *p, size_t n, size_t off, uint32_t seed)
{
    uint64_t w = word_of(seed, off);
    size_t k = n - off < 8 ? n - off : 8;
    memcpy(p + off, &w, k);
}

static int ok_at(const unsigned char *p, size_t n, size_t off, uint32_t seed)
{
    uint64_t w = word_of(seed, off);
    size_t k = n - off < 8 ? n - off : 8;
    return memcmp(p + off, &w, k) == 0;
}

/* Grid points every 64 KiB, then the last 8 bytes, never overlapping. */
static size_t grid_end(size_t n)
{
    return n > 16 ? n - 16 : 1;
}

void t_fill(void *p, size_t n, uint32_t seed)
{
    for (size_t off = 0; off < grid_end(n); off += T_STEP)
        put(p, n, off, seed);
    if (n > 16)
        put(p, n, n - 8, seed);
}

int t_check(const void *p, size_t n, uint32_t seed)
{
    for (size_t off = 0; off < grid_end(n); off += T_STEP)
        if (!ok_at(p, n, off, seed))
            return 0;
    return n <= 16 || ok_at(p, n, n - 8, seed);
}

static sigjmp_buf probe_env;

static void on_fault(int sig)
{
    siglongjmp(probe_env, sig);
}

int t_faults(const void *p)
{
    struct sigaction sa, old_segv, old_bus;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_fault;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &old_segv);
    sigaction(SIGBUS, &sa, &old_bus);
    int faulted = 0;
    if (sigsetjmp(probe_env, 1) == 0) {
        volatile unsigned char c = *(volatile const unsigned char *)p;
        (void)c;
    } else {
        faulted = 1;
    }
    sigaction(SIGSEGV, &old_segv, NULL);
    sigaction(SIGBUS, &old_bus, NULL);
    return faulted;
}

void t_fill_words(uintptr_t va, size_t size, unsigned seed)
{
    uint32_t *p = (uint32_t *)va;
    for (size_t i = 0; i < size / 4; i += 1024)
        p[i] = seed * 2654435761u + (uint32_t)i;
}

int t_check_words(uintptr_t va, size_t size, unsigned seed)
{
    const uint32_t *p = (const uint32_t *)va;
    for (size_t i = 0; i < size / 4; i += 1024)
        if (p[i] != seed * 2654435761u + (uint32_t)i)
            return 0;
    return 1;
}

int t_all_zero(uintptr_t va, size_t size)
{
    const uint64_t *p = (const uint64_t *)va;
    for (size_t i = 0; i < size / 8; i++)
        if (p[i])
            return 0;
    return 1;
}

extern char **environ;

int t_spawn(char *const argv[], const char *errpath, char *err, size_t errcap)
{
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, errpath, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    pid_t pid;
    ck_assert_int_eq(posix_spawn(&pid, argv[0], &fa, NULL, argv, environ), 0);
    posix_spawn_file_actions_destroy(&fa);
    int st = 0;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    FILE *f = fopen(errpath, "rb");
    size_t n = f ? fread(err, 1, errcap - 1, f) : 0;
    err[n] = '\0';
    if (f)
        fclose(f);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

int t_run(Suite *s)
{
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
