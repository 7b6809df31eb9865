/* test_share.c: sharing on the host backend (docs/sharing.md): dedicated
 * blocks (one shareable handle of whole granules, registrable_min), export
 * and import between processes over a socketpair (patterns written both
 * ways), the exporter's free while an importer maps (the pages are never
 * reused), an importer killed with SIGKILL (the exporter loses nothing), a
 * dead exporter (its memory stays), every bad description refused with
 * nothing mapped or leaked, peer access recorded per mapping, and every
 * driver call of the share paths failing in turn. */
#include <check.h>
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "driver_host.h"
#include "internal.h"
#include "support_common.h"
#include "support_fault.h"

#define OK(call) ck_assert_msg((call) == XSEG_OK, "%s: %s", #call, xseg_last_error())

/* ---- helpers ---- */

static int open_fds(void)
{
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    ck_assert_ptr_nonnull(d);
    while (readdir(d))
        n++;
    closedir(d);
    return n;
}

static xseg_share_stats share_stats(xseg_t *xs)
{
    xseg_share_stats s = {.size = sizeof s};
    OK(xseg_share_stats_get(xs, &s));
    return s;
}

static xseg_host_counts counts(xseg_t *xs)
{
    xseg_host_counts c;
    xseg_host_counts_of(t_host_ctx(xs), &c);
    return c;
}

static void same_counts(xseg_host_counts a, xseg_host_counts b, const char *when)
{
    ck_assert_msg(a.reservations == b.reservations && a.handles == b.handles &&
                      a.mappings == b.mappings && a.imported == b.imported &&
                      a.shared == b.shared,
                  "%s: reservations %zu -> %zu, handles %zu -> %zu, mappings %zu -> %zu, "
                  "imported %zu -> %zu", when, a.reservations, b.reservations, a.handles,
                  b.handles, a.mappings, b.mappings, a.imported, b.imported);
}

/* The description's checksum as xseg computes it (docs/sharing.md):
 * FNV-1a 64 over the struct with the descriptors and the checksum zeroed. */
static uint64_t checksum(const xseg_export_desc *d)
{
    xseg_export_desc c = *d;
    c.check = 0;
    c.token_fd = 0;
    for (int i = 0; i < XSEG_EXPORT_MAX_PIECES; i++)
        c.pieces[i].fd = 0;
    uint64_t h = 0xcbf29ce484222325ull;
    const unsigned char *p = (const unsigned char *)&c;
    for (size_t i = 0; i < sizeof c; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

/* A forked child ends with _exit while its copy of the parent's allocator
 * is no longer referenced from its stack: kept here, valgrind counts it as
 * reachable in the child, not lost (tools/ci/valgrind). */
static xseg_t *volatile g_forked_from[2];

static pid_t fork_keeping(xseg_t *a, xseg_t *b)
{
    g_forked_from[0] = a;
    g_forked_from[1] = b;
    return fork();
}

static void wait_ok(pid_t pid, const char *what)
{
    int status = 0;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  "%s: child ended with status 0x%x (exit %d)", what, status,
                  WIFEXITED(status) ? WEXITSTATUS(status) : -1);
}

static void send_byte(int s, char c)
{
    ck_assert_int_eq(write(s, &c, 1), 1);
}

static char recv_byte(int s)
{
    char c = 0;
    ck_assert_int_eq(read(s, &c, 1), 1);
    return c;
}

/* In a child: a failed expectation is exit code `code`. */
#define CHILD_EXPECT(cond, code) \
    do {                         \
        if (!(cond))             \
            _exit(code);         \
    } while (0)

/* ---- conf ---- */

START_TEST(conf_keys_parse_and_refuse)
{
    static const char *const bad[] = {"shareable:maybe", "peer_access:x", "peer_access:1+",
                                      "peer_access:63", "peer_access:+1", "registrable_min:lots",
                                      "peer_access:9"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char conf[96];
        xseg_t *xs = NULL;
        snprintf(conf, sizeof conf, "backend:host,host_capacity:256MB,%s", bad[i]);
        xseg_status st = xseg_create(&xs, 0, conf);
        ck_assert_msg(st == XSEG_ERR_CONFIG && !xs, "%s accepted (%d)", conf, st);
        ck_assert_msg(strstr(xseg_last_error(), "peer_access") || strstr(xseg_last_error(), "shareable") ||
                          strstr(xseg_last_error(), "registrable_min"),
                      "%s: message names no key: %s", conf, xseg_last_error());
    }
    xseg_t *xs = t_host("host_capacity:256MB,shareable:off,peer_access:1+3,registrable_min:8MB");
    xseg_share_stats s = share_stats(xs);
    ck_assert_uint_eq(s.handle_types, 0);
    ck_assert_uint_eq(s.peers, 2 | 8);
    ck_assert_ptr_nonnull(strstr(s.why, "shareable:off"));
    OK(xseg_destroy(xs));
    xs = t_host("host_capacity:256MB,shareable:fabric");
    s = share_stats(xs);
    ck_assert_uint_eq(s.handle_types, 1); /* the host takes fd only: fell back */
    ck_assert_ptr_nonnull(strstr(s.why, "fell back"));
    OK(xseg_destroy(xs));
}
END_TEST

/* ---- dedicated blocks ---- */

START_TEST(dedicated_blocks_have_one_handle_of_whole_granules)
{
    xseg_t *xs = t_host("host_capacity:256MB,registrable_min:16MB");
    xseg_host_counts c0 = counts(xs);
    void *a = NULL, *b = NULL, *o = NULL;
    OK(xseg_alloc_registrable(xs, 3 * MiB, NULL, &a));
    size_t r = 0, q = 0;
    OK(xseg_block_size(xs, a, &r, &q));
    ck_assert_uint_eq(r, 4 * MiB);
    ck_assert_uint_eq(q, 3 * MiB);
    ck_assert_uint_eq((uintptr_t)a % (2 * MiB), 0);
    xseg_host_counts c1 = counts(xs);
    ck_assert_uint_eq(c1.shared, c0.shared + 1);
    ck_assert_uint_eq(c1.handles, c0.handles + 1);
    ck_assert_uint_eq(c1.reservations, c0.reservations + 1);
    /* registrable_min: a large xseg_alloc is dedicated, a small one is not */
    OK(xseg_alloc(xs, 17 * MiB, NULL, &b));
    OK(xseg_alloc(xs, 1 * MiB, NULL, &o));
    ck_assert_uint_eq(counts(xs).shared, c0.shared + 2);
    xseg_share_stats s = share_stats(xs);
    ck_assert_uint_eq(s.dedicated_blocks.current, 2);
    ck_assert_uint_eq(s.dedicated_bytes.current, 4 * MiB + 18 * MiB);
    t_fill(a, 3 * MiB, 11);
    t_fill(b, 17 * MiB, 12);
    ck_assert(t_check(a, 3 * MiB, 11) && t_check(b, 17 * MiB, 12));
    OK(xseg_record_stream(xs, a, (void *)(uintptr_t)0x77));
    T_CHECK(xs);
    uint64_t syncs = xseg_host_sync_count(t_host_ctx(xs));
    OK(xseg_free(xs, a));
    ck_assert_uint_ge(xseg_host_sync_count(t_host_ctx(xs)), syncs + 2); /* both streams */
    ck_assert_int_eq(xseg_free(xs, a), XSEG_ERR_INVALID_POINTER);
    OK(xseg_free(xs, b));
    OK(xseg_free(xs, o));
    s = share_stats(xs);
    ck_assert_uint_eq(s.dedicated_blocks.current, 0);
    ck_assert_uint_eq(s.dedicated_blocks.total, 2);
    ck_assert_uint_eq(counts(xs).shared, c0.shared);
    T_CHECK(xs);
    OK(xseg_destroy(xs));
}
END_TEST

START_TEST(the_cap_counts_dedicated_blocks)
{
    xseg_t *xs = t_host("host_capacity:256MB,max_mapped:16MB");
    void *a = NULL, *b = NULL;
    OK(xseg_alloc_registrable(xs, 12 * MiB, NULL, &a));
    ck_assert_int_eq(xseg_alloc_registrable(xs, 8 * MiB, NULL, &b), XSEG_ERR_OOM);
    ck_assert_ptr_null(b);
    ck_assert_ptr_nonnull(strstr(xseg_last_error(), "cap"));
    ck_assert_int_eq(xseg_alloc(xs, 8 * MiB, NULL, &b), XSEG_ERR_OOM);
    OK(xseg_free(xs, a));
    OK(xseg_alloc(xs, 8 * MiB, NULL, &b));
    OK(xseg_free(xs, b));
    OK(xseg_destroy(xs));
}
END_TEST

/* ---- two processes ---- */

/* Child: receive a description, import, check `seed_in`, write `seed_out`
 * over the second half, say 'w'; then export a block of its own filled
 * with seed_own and send it; wait for 'q'. */
static void child_both_ways(int s)
{
    xseg_t *xs = NULL;
    xseg_export_desc d, mine;
    void *p = NULL, *own = NULL;
    CHILD_EXPECT(xseg_create(&xs, 0, "backend:host,host_capacity:256MB") == XSEG_OK, 10);
    CHILD_EXPECT(xseg_recv_export(s, &d) == XSEG_OK, 11);
    CHILD_EXPECT(xseg_import(xs, &d, &p) == XSEG_OK, 12);
    xseg_export_close(&d);
    CHILD_EXPECT(t_check(p, 4 * MiB, 21), 13);
    t_fill((char *)p + 4 * MiB, 4 * MiB, 22);
    CHILD_EXPECT(write(s, "w", 1) == 1, 14);
    CHILD_EXPECT(xseg_alloc_registrable(xs, 6 * MiB, NULL, &own) == XSEG_OK, 15);
    t_fill(own, 6 * MiB, 23);
    CHILD_EXPECT(xseg_export(xs, own, &mine) == XSEG_OK, 16);
    CHILD_EXPECT(xseg_send_export(s, &mine) == XSEG_OK, 17);
    xseg_export_close(&mine);
    char c = 0;
    CHILD_EXPECT(read(s, &c, 1) == 1 && c == 'q', 18);
    CHILD_EXPECT(t_check(own, 6 * MiB, 24), 19); /* the parent wrote it */
    CHILD_EXPECT(xseg_unimport(xs, p) == XSEG_OK, 20);
    CHILD_EXPECT(xseg_free(xs, own) == XSEG_OK, 21);
    CHILD_EXPECT(xseg_destroy(xs) == XSEG_OK, 22);
    _exit(0);
}

START_TEST(two_processes_share_blocks_both_ways)
{
    int sv[2];
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    xseg_t *xs = t_host("host_capacity:256MB");
    void *a = NULL, *theirs = NULL;
    OK(xseg_alloc_registrable(xs, 8 * MiB, NULL, &a));
    t_fill(a, 4 * MiB, 21);
    pid_t pid = fork_keeping(xs, NULL);
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        close(sv[0]);
        child_both_ways(sv[1]);
    }
    close(sv[1]);
    xseg_export_desc d;
    OK(xseg_export(xs, a, &d));
    ck_assert_uint_eq(d.npieces, 1);
    ck_assert_uint_eq(d.size, 8 * MiB);
    ck_assert_int_eq(d.pid, getpid());
    OK(xseg_send_export(sv[0], &d));
    xseg_export_close(&d);
    ck_assert_int_eq(recv_byte(sv[0]), 'w');
    ck_assert(t_check((char *)a + 4 * MiB, 4 * MiB, 22)); /* the child's writes */
    OK(xseg_recv_export(sv[0], &d));
    OK(xseg_import(xs, &d, &theirs));
    xseg_export_close(&d);
    ck_assert(t_check(theirs, 6 * MiB, 23));
    t_fill(theirs, 6 * MiB, 24);
    send_byte(sv[0], 'q');
    wait_ok(pid, "importer/exporter child");
    ck_assert(t_check(theirs, 6 * MiB, 24)); /* its exporter is gone: the memory stays */
    xseg_share_stats s = share_stats(xs);
    ck_assert_uint_eq(s.exports, 1);
    ck_assert_uint_eq(s.imported_blocks.current, 1);
    OK(xseg_unimport(xs, theirs));
    OK(xseg_free(xs, a));
    T_CHECK(xs);
    OK(xseg_destroy(xs));
    close(sv[0]);
}
END_TEST

/* Child: import, say 'i', wait for 'c' (the exporter freed and reused
 * memory meanwhile), check the pattern and write over it, say 'k'. */
static void child_outlives_free(int s)
{
    xseg_t *xs = NULL;
    xseg_export_desc d;
    void *p = NULL;
    char c = 0;
    CHILD_EXPECT(xseg_create(&xs, 0, "backend:host,host_capacity:256MB") == XSEG_OK, 10);
    CHILD_EXPECT(xseg_recv_export(s, &d) == XSEG_OK, 11);
    CHILD_EXPECT(xseg_import(xs, &d, &p) == XSEG_OK, 12);
    xseg_export_close(&d);
    CHILD_EXPECT(write(s, "i", 1) == 1, 13);
    CHILD_EXPECT(read(s, &c, 1) == 1 && c == 'c', 14);
    CHILD_EXPECT(t_check(p, 8 * MiB, 31), 15);
    t_fill(p, 8 * MiB, 32);
    CHILD_EXPECT(t_check(p, 8 * MiB, 32), 16);
    CHILD_EXPECT(xseg_unimport(xs, p) == XSEG_OK, 17);
    CHILD_EXPECT(write(s, "k", 1) == 1, 18);
    _exit(0);
}

START_TEST(the_exporters_free_never_reuses_imported_pages)
{
    int sv[2];
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    xseg_t *xs = t_host("host_capacity:256MB");
    void *a = NULL, *more[6] = {0};
    OK(xseg_alloc_registrable(xs, 8 * MiB, NULL, &a));
    t_fill(a, 8 * MiB, 31);
    pid_t pid = fork_keeping(xs, NULL);
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        close(sv[0]);
        child_outlives_free(sv[1]);
    }
    close(sv[1]);
    xseg_export_desc d, kept;
    OK(xseg_export(xs, a, &d));
    OK(xseg_send_export(sv[0], &d));
    ck_assert_int_eq(recv_byte(sv[0]), 'i');
    kept = d; /* its descriptors stay open: a stale description */
    OK(xseg_free(xs, a));
    ck_assert_uint_eq(share_stats(xs).exported_live, 0);
    for (int i = 0; i < 6; i++) { /* memory freed now: reused anywhere but there */
        if (i % 2)
            OK(xseg_alloc_registrable(xs, 8 * MiB, NULL, &more[i]));
        else
            OK(xseg_alloc(xs, 8 * MiB, NULL, &more[i]));
        t_fill(more[i], 8 * MiB, 40 + (unsigned)i);
    }
    void *p = NULL;
    ck_assert_int_eq(xseg_import(xs, &kept, &p), XSEG_ERR_STATE); /* freed: refused */
    ck_assert_ptr_nonnull(strstr(xseg_last_error(), "freed"));
    ck_assert_ptr_null(p);
    xseg_export_close(&kept);
    send_byte(sv[0], 'c');
    ck_assert_int_eq(recv_byte(sv[0]), 'k');
    wait_ok(pid, "importer child");
    for (int i = 0; i < 6; i++) {
        ck_assert_msg(t_check(more[i], 8 * MiB, 40 + (unsigned)i),
                      "block %d was written by the importer", i);
        OK(xseg_free(xs, more[i]));
    }
    T_CHECK(xs);
    OK(xseg_destroy(xs));
    close(sv[0]);
}
END_TEST

START_TEST(an_importer_killed_costs_the_exporter_nothing)
{
    int sv[2];
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    xseg_host_counts g0;
    xseg_host_counts_global(&g0);
    xseg_t *xs = t_host("host_capacity:256MB");
    void *a = NULL, *o = NULL;
    OK(xseg_alloc_registrable(xs, 8 * MiB, NULL, &a));
    OK(xseg_alloc(xs, 5 * MiB, NULL, &o));
    t_fill(a, 4 * MiB, 50);
    t_fill((char *)a + 4 * MiB, 4 * MiB, 51);
    pid_t pid = fork_keeping(xs, NULL);
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        xseg_t *c = NULL;
        xseg_export_desc d;
        void *p = NULL;
        close(sv[0]);
        CHILD_EXPECT(xseg_create(&c, 0, "backend:host,host_capacity:256MB") == XSEG_OK, 10);
        CHILD_EXPECT(xseg_recv_export(sv[1], &d) == XSEG_OK, 11);
        CHILD_EXPECT(xseg_import(c, &d, &p) == XSEG_OK, 12);
        t_fill(p, 4 * MiB, 52);
        CHILD_EXPECT(write(sv[1], "i", 1) == 1, 13);
        for (;;)
            pause();
    }
    close(sv[1]);
    xseg_export_desc d;
    OK(xseg_export(xs, a, &d));
    OK(xseg_send_export(sv[0], &d));
    xseg_export_close(&d);
    ck_assert_int_eq(recv_byte(sv[0]), 'i');
    xseg_stats s0 = t_stats(xs);
    xseg_share_stats h0 = share_stats(xs);
    xseg_host_counts c0 = counts(xs);
    ck_assert_int_eq(kill(pid, SIGKILL), 0);
    int status = 0;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    xseg_stats s1 = t_stats(xs);
    xseg_share_stats h1 = share_stats(xs);
    ck_assert_uint_eq(s1.mapped_bytes.current, s0.mapped_bytes.current);
    ck_assert_uint_eq(s1.allocated_bytes.current, s0.allocated_bytes.current);
    ck_assert_uint_eq(h1.dedicated_bytes.current, h0.dedicated_bytes.current);
    ck_assert_uint_eq(h1.exported_live, 1);
    same_counts(c0, counts(xs), "after the importer's SIGKILL");
    OK(xseg_check(xs));
    ck_assert(t_check(a, 4 * MiB, 52));                 /* its writes before it died */
    ck_assert(t_check((char *)a + 4 * MiB, 4 * MiB, 51)); /* the rest untouched */
    OK(xseg_free(xs, a));
    OK(xseg_free(xs, o));
    OK(xseg_check(xs));
    OK(xseg_destroy(xs));
    xseg_host_counts g1;
    xseg_host_counts_global(&g1);
    ck_assert_uint_eq(g1.handles, g0.handles);
    ck_assert_uint_eq(g1.mappings, g0.mappings);
    ck_assert_uint_eq(g1.reservations, g0.reservations);
    close(sv[0]);
}
END_TEST

START_TEST(a_dead_exporters_memory_stays)
{
    int sv[2];
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        xseg_t *c = NULL;
        xseg_export_desc d;
        void *p = NULL;
        close(sv[0]);
        CHILD_EXPECT(xseg_create(&c, 0, "backend:host,host_capacity:256MB") == XSEG_OK, 10);
        CHILD_EXPECT(xseg_alloc_registrable(c, 10 * MiB, NULL, &p) == XSEG_OK, 11);
        t_fill(p, 10 * MiB, 61);
        CHILD_EXPECT(xseg_export(c, p, &d) == XSEG_OK, 12);
        CHILD_EXPECT(xseg_send_export(sv[1], &d) == XSEG_OK, 13);
        _exit(0); /* dies without freeing */
    }
    close(sv[1]);
    wait_ok(pid, "exporter child");
    xseg_t *xs = t_host("host_capacity:256MB");
    xseg_export_desc d;
    void *p = NULL;
    OK(xseg_recv_export(sv[0], &d));
    ck_assert_int_eq(d.pid, pid);
    OK(xseg_import(xs, &d, &p));
    xseg_export_close(&d);
    ck_assert_uint_eq(share_stats(xs).imported_bytes.current, 10 * MiB);
    ck_assert(t_check(p, 10 * MiB, 61));
    OK(xseg_unimport(xs, p));
    ck_assert_uint_eq(counts(xs).imported, 0);
    OK(xseg_destroy(xs));
    close(sv[0]);
}
END_TEST

/* ---- bad input ---- */

/* Import must fail with `want`, naming `word`, mapping and leaking nothing. */
static void refused(xseg_t *xs, const xseg_export_desc *d, xseg_status want, const char *word)
{
    xseg_host_counts c0 = counts(xs);
    int fds = open_fds();
    void *p = (void *)1;
    xseg_status st = xseg_import(xs, d, &p);
    ck_assert_msg(st == want, "import gave %d (%s), expected %d", st, xseg_last_error(), want);
    ck_assert_ptr_null(p);
    ck_assert_msg(strstr(xseg_last_error(), word), "message without \"%s\": %s", word,
                  xseg_last_error());
    same_counts(c0, counts(xs), xseg_last_error());
    ck_assert_int_eq(open_fds(), fds);
}

START_TEST(bad_descriptions_are_refused_with_nothing_mapped)
{
    xseg_t *xs = t_host("host_capacity:256MB");
    xseg_t *other = t_host("host_capacity:256MB");
    void *a = NULL, *o = NULL, *p = NULL;
    OK(xseg_alloc_registrable(xs, 4 * MiB, NULL, &a));
    t_fill(a, 4 * MiB, 71);
    xseg_export_desc d, f;
    OK(xseg_export(xs, a, &d));
    ck_assert_uint_eq(d.check, checksum(&d));
    uint64_t refused0 = share_stats(other).refused_imports;

    f = d;
    f.magic ^= 1;
    refused(other, &f, XSEG_ERR_INVALID_ARG, "magic");
    f = d;
    f.version = 2;
    f.check = checksum(&f);
    refused(other, &f, XSEG_ERR_INVALID_ARG, "version");
    f = d;
    f.size *= 2; /* checksum not redone: damaged */
    refused(other, &f, XSEG_ERR_INVALID_ARG, "checksum");
    f = d;
    f.size = f.pieces[0].size = 6 * MiB; /* forged: bigger than the memfd */
    f.check = checksum(&f);
    refused(other, &f, XSEG_ERR_DRIVER, "import");
    f = d;
    f.pieces[0].size = 1 * MiB; /* not whole granules */
    f.check = checksum(&f);
    refused(other, &f, XSEG_ERR_INVALID_ARG, "piece 0");
    f = d;
    f.npieces = XSEG_EXPORT_MAX_PIECES + 1;
    f.check = checksum(&f);
    refused(other, &f, XSEG_ERR_INVALID_ARG, "pieces");
    f = d;
    f.nonce ^= 0x5a5a; /* a guessed nonce */
    f.check = checksum(&f);
    refused(other, &f, XSEG_ERR_STATE, "freed");
    f = d;
    f.uuid[0] ^= 0xff; /* another device */
    f.check = checksum(&f);
    refused(other, &f, XSEG_ERR_NO_DEVICE, "device");
    int pp[2];
    ck_assert_int_eq(pipe(pp), 0);
    f = d;
    f.pieces[0].fd = pp[0]; /* not a memfd */
    refused(other, &f, XSEG_ERR_DRIVER, "import");
    f = d;
    f.token_fd = pp[0];
    refused(other, &f, XSEG_ERR_INVALID_ARG, "token");
    int small = memfd_create("small", MFD_CLOEXEC);
    ck_assert_int_ge(small, 0);
    ck_assert_int_eq(ftruncate(small, (off_t)(2 * MiB)), 0);
    f = d;
    f.pieces[0].fd = small; /* a memfd too small */
    refused(other, &f, XSEG_ERR_DRIVER, "import");
    close(small);
    close(pp[0]);
    close(pp[1]);
    ck_assert_uint_eq(share_stats(other).refused_imports, refused0 + 11);
    ck_assert_int_eq(xseg_import(other, NULL, &p), XSEG_ERR_INVALID_ARG);
    ck_assert_int_eq(xseg_import(other, &d, NULL), XSEG_ERR_INVALID_ARG);

    /* twice: refused until unimported; the pages are the exporter's */
    OK(xseg_import(other, &d, &p));
    ck_assert_ptr_ne(p, a);
    ck_assert(t_check(p, 4 * MiB, 71));
    void *q = NULL;
    ck_assert_int_eq(xseg_import(other, &d, &q), XSEG_ERR_STATE);
    ck_assert_ptr_nonnull(strstr(xseg_last_error(), "already imported"));
    ck_assert_int_eq(xseg_unimport(other, a), XSEG_ERR_INVALID_POINTER);
    OK(xseg_unimport(other, p));
    ck_assert_int_eq(xseg_unimport(other, p), XSEG_ERR_INVALID_POINTER);
    OK(xseg_import(other, &d, &q));
    OK(xseg_unimport(other, q));

    /* exports that make no sense */
    OK(xseg_alloc(xs, 8 * MiB, NULL, &o));
    ck_assert_int_eq(xseg_export(xs, o, &f), XSEG_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(xseg_last_error(), "ordinary"));
    ck_assert_int_eq(xseg_export(xs, (char *)a + 4096, &f), XSEG_ERR_INVALID_POINTER);
    ck_assert_int_eq(xseg_export(xs, &f, &f), XSEG_ERR_INVALID_POINTER);
    OK(xseg_import(other, &d, &p));
    ck_assert_int_eq(xseg_export(other, p, &f), XSEG_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(xseg_last_error(), "imported"));
    OK(xseg_unimport(other, p));
    OK(xseg_free(xs, o));

    /* freed: refused in the same process too */
    OK(xseg_free(xs, a));
    refused(other, &d, XSEG_ERR_STATE, "freed");
    xseg_export_close(&d);
    ck_assert_int_eq(d.token_fd, -1);

    /* shareable:off: registrable, not exportable */
    xseg_t *off = t_host("host_capacity:256MB,shareable:off");
    OK(xseg_alloc_registrable(off, 2 * MiB, NULL, &a));
    ck_assert_int_eq(xseg_export(off, a, &f), XSEG_ERR_STATE);
    ck_assert_ptr_nonnull(strstr(xseg_last_error(), "shareable:off"));
    OK(xseg_free(off, a));
    OK(xseg_destroy(off));
    T_CHECK(xs);
    OK(xseg_destroy(xs));
    OK(xseg_destroy(other));
}
END_TEST

START_TEST(send_and_receive_refuse_what_is_not_a_description)
{
    int sv[2];
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    xseg_export_desc d;
    memset(&d, 0, sizeof d);
    ck_assert_int_eq(xseg_send_export(sv[0], &d), XSEG_ERR_INVALID_ARG);
    ck_assert_int_eq(xseg_send_export(sv[0], NULL), XSEG_ERR_INVALID_ARG);
    ck_assert_int_eq(write(sv[0], "garbage", 7), 7);
    close(sv[0]); /* a short message, no descriptors */
    int fds = open_fds();
    ck_assert_int_eq(xseg_recv_export(sv[1], &d), XSEG_ERR_INVALID_ARG);
    ck_assert_int_eq(open_fds(), fds);
    ck_assert_int_eq(xseg_recv_export(sv[1], NULL), XSEG_ERR_INVALID_ARG);
    close(sv[1]);
}
END_TEST

/* ---- peers ---- */

START_TEST(peer_access_is_given_to_every_mapping)
{
    xseg_t *xs = t_host("host_capacity:256MB,peer_access:2+5");
    void *ctx = t_host_ctx(xs);
    void *a = NULL, *r = NULL, *t = NULL, *n = NULL;
    OK(xseg_alloc(xs, 4 * MiB, NULL, &a));
    OK(xseg_alloc_registrable(xs, 2 * MiB, NULL, &r));
    ck_assert_uint_eq(xseg_host_access_mask(ctx, (uintptr_t)a), 1 | 4 | 32);
    ck_assert_uint_eq(xseg_host_access_mask(ctx, (uintptr_t)r), 1 | 4 | 32);
    int tag = 0;
    OK(xseg_tag_id("share_peers", &tag));
    OK(xseg_alloc_tagged(xs, 2 * MiB, NULL, tag, &t));
    ck_assert_uint_eq(xseg_host_access_mask(ctx, (uintptr_t)t), 1 | 4 | 32);
    OK(xseg_enable_peer(xs, 3)); /* everything mapped gets it, tags' memory too */
    uint64_t want = 1 | 4 | 8 | 32;
    ck_assert_uint_eq(xseg_host_access_mask(ctx, (uintptr_t)a), want);
    ck_assert_uint_eq(xseg_host_access_mask(ctx, (uintptr_t)r), want);
    ck_assert_uint_eq(xseg_host_access_mask(ctx, (uintptr_t)t), want);
    OK(xseg_alloc(xs, 64 * MiB, NULL, &n)); /* and new mappings */
    ck_assert_uint_eq(xseg_host_access_mask(ctx, (uintptr_t)n + 32 * MiB), want);
    ck_assert_uint_eq(share_stats(xs).peers, want & ~(uint64_t)1);
    ck_assert_int_eq(xseg_enable_peer(xs, 0), XSEG_ERR_NO_DEVICE); /* its own */
    ck_assert_int_eq(xseg_enable_peer(xs, 8), XSEG_ERR_NO_DEVICE); /* the host has 8 */
    ck_assert_int_eq(xseg_enable_peer(xs, -1), XSEG_ERR_NO_DEVICE);
    ck_assert_uint_eq(share_stats(xs).peers, want & ~(uint64_t)1);
    OK(xseg_free(xs, a));
    OK(xseg_free(xs, r));
    OK(xseg_free(xs, t));
    OK(xseg_free(xs, n));
    T_CHECK(xs);
    OK(xseg_destroy(xs));

    xs = t_host("host_capacity:256MB,peer_access:all");
    OK(xseg_alloc(xs, 2 * MiB, NULL, &a));
    ck_assert_uint_eq(xseg_host_access_mask(t_host_ctx(xs), (uintptr_t)a), 0xff);
    OK(xseg_free(xs, a));
    OK(xseg_destroy(xs));
    xs = t_host("host_capacity:256MB");
    OK(xseg_alloc(xs, 2 * MiB, NULL, &a));
    ck_assert_uint_eq(xseg_host_access_mask(t_host_ctx(xs), (uintptr_t)a), 1);
    OK(xseg_free(xs, a));
    OK(xseg_destroy(xs));
}
END_TEST

/* ---- the sharing state's lifetime (lifecycle.c) ---- */

/* Child: the process default allocator of device 0 with peer_access gives
 * the peers access to its first, ordinary, mapping (no sharing call
 * before it).  Exit codes name the failed step. */
static void child_default_has_peers(void)
{
    xseg_t *xs = NULL;
    void *a = NULL;
    CHILD_EXPECT(xseg_set_default_conf("backend:host,host_capacity:256MB,peer_access:1+6") ==
                     XSEG_OK, 10);
    CHILD_EXPECT(xseg_default(0, &xs) == XSEG_OK, 11);
    CHILD_EXPECT(xseg_alloc(xs, 2 * MiB, NULL, &a) == XSEG_OK, 12);
    CHILD_EXPECT(xseg_host_access_mask(t_host_ctx(xs), (uintptr_t)a) == (1 | 2 | 64), 13);
    xseg_share_stats s = {.size = sizeof s};
    CHILD_EXPECT(xseg_share_stats_get(xs, &s) == XSEG_OK && s.peers == (2 | 64), 14);
    CHILD_EXPECT(s.handle_types == 1, 15); /* resolved at create too */
    CHILD_EXPECT(xseg_free(xs, a) == XSEG_OK, 16);
    _exit(0);
}

START_TEST(default_allocators_apply_peer_access_from_creation)
{
    pid_t pid = fork(); /* a default allocator lives until its process ends */
    ck_assert_int_ge(pid, 0);
    if (pid == 0)
        child_default_has_peers();
    wait_ok(pid, "default allocator child");
    /* xseg_create: the same */
    xseg_t *xs = t_host("host_capacity:256MB,peer_access:4");
    void *a = NULL;
    OK(xseg_alloc(xs, 2 * MiB, NULL, &a));
    ck_assert_uint_eq(xseg_host_access_mask(t_host_ctx(xs), (uintptr_t)a), 1 | 16);
    OK(xseg_free(xs, a));
    OK(xseg_destroy(xs));
}
END_TEST

/* A tag's allocator has no sharing state of its own: its dedicated blocks
 * are the family's (the parent's stats, export, free). */
START_TEST(a_tags_dedicated_blocks_are_the_familys)
{
    xseg_t *xs = t_host("host_capacity:256MB,registrable_min:8MB");
    int tag = 0;
    void *t = NULL, *small = NULL;
    OK(xseg_tag_id("share_family", &tag));
    OK(xseg_alloc_tagged(xs, 9 * MiB, NULL, tag, &t));
    OK(xseg_alloc_tagged(xs, 1 * MiB, NULL, tag, &small));
    xseg_share_stats s = share_stats(xs);
    ck_assert_uint_eq(s.dedicated_blocks.current, 1);
    ck_assert_uint_eq(s.dedicated_bytes.current, 10 * MiB);
    xseg_export_desc d;
    OK(xseg_export(xs, t, &d)); /* the parent exports it */
    xseg_export_close(&d);
    ck_assert_int_eq(xseg_export(xs, small, &d), XSEG_ERR_INVALID_ARG); /* ordinary */
    OK(xseg_free(xs, t));
    OK(xseg_free(xs, small));
    ck_assert_uint_eq(share_stats(xs).dedicated_blocks.current, 0);
    T_CHECK(xs);
    OK(xseg_destroy(xs));
}
END_TEST

/* xseg_destroy with dedicated, exported and imported blocks still live
 * gives every handle, mapping, reservation and descriptor back. */
START_TEST(destroy_gives_back_live_shared_blocks)
{
    xseg_host_counts g0;
    xseg_host_counts_global(&g0);
    int fds0 = open_fds();
    xseg_t *xs = t_host("host_capacity:256MB,peer_access:2");
    xseg_t *other = t_host("host_capacity:256MB");
    void *a = NULL, *b = NULL, *p = NULL;
    OK(xseg_alloc_registrable(xs, 4 * MiB, NULL, &a));
    OK(xseg_alloc_registrable(xs, 2 * MiB, NULL, &b));
    t_fill(a, 4 * MiB, 91);
    xseg_export_desc d;
    OK(xseg_export(xs, a, &d));
    OK(xseg_import(other, &d, &p));
    xseg_export_close(&d);
    ck_assert(t_check(p, 4 * MiB, 91));
    xseg_host_counts g1;
    xseg_host_counts_global(&g1);
    ck_assert_uint_ge(g1.handles, g0.handles + 3); /* two dedicated, one imported */
    OK(xseg_destroy(xs)); /* the importer still maps a's memory */
    ck_assert(t_check(p, 4 * MiB, 91));
    OK(xseg_destroy(other));
    xseg_host_counts_global(&g1);
    ck_assert_uint_eq(g1.handles, g0.handles);
    ck_assert_uint_eq(g1.mappings, g0.mappings);
    ck_assert_uint_eq(g1.reservations, g0.reservations);
    ck_assert_int_eq(open_fds(), fds0); /* the token file and the imported descriptors */
}
END_TEST

/* ---- dedicated and imported bytes in the stats (docs/stats.md) ---- */

static xseg_stats stats_of(xseg_t *xs)
{
    xseg_stats s = {.size = sizeof s};
    OK(xseg_get_stats(xs, &s));
    return s;
}

/* The number after `key` in text (a JSON key with its quotes and colon, or
 * a Prometheus sample name with its labels and space); -1 if absent. */
static long long number_after(const char *text, const char *key)
{
    const char *p = strstr(text, key);
    return p ? strtoll(p + strlen(key), NULL, 10) : -1;
}

START_TEST(stats_show_dedicated_and_imported_bytes_apart)
{
    xseg_t *xs = t_host("host_capacity:256MB");
    xseg_t *other = t_host("host_capacity:256MB");
    void *o = NULL, *a = NULL, *b = NULL, *p = NULL;
    OK(xseg_alloc(xs, 2 * MiB, NULL, &o));
    xseg_stats s0 = stats_of(xs);
    OK(xseg_alloc_registrable(xs, 3 * MiB, NULL, &a)); /* 4 MiB of granules */
    OK(xseg_alloc_registrable(xs, 6 * MiB, NULL, &b));
    xseg_stats s1 = stats_of(xs);
    ck_assert_uint_eq(s1.dedicated_bytes.current, 10 * MiB);
    ck_assert_uint_eq(s1.dedicated_bytes.peak, 10 * MiB);
    ck_assert_uint_eq(s1.dedicated_bytes.total, 10 * MiB);
    /* the arena's figures do not move: xseg_check holds them to the arena */
    ck_assert_uint_eq(s1.mapped_bytes.current, s0.mapped_bytes.current);
    ck_assert_uint_eq(s1.allocated_bytes.current, s0.allocated_bytes.current);
    ck_assert_uint_eq(s1.handles.current, s0.handles.current);
    T_CHECK(xs);
    xseg_export_desc d;
    OK(xseg_export(xs, b, &d));
    OK(xseg_import(other, &d, &p));
    xseg_export_close(&d);
    ck_assert_uint_eq(stats_of(other).imported_bytes.current, 6 * MiB);
    ck_assert_uint_eq(stats_of(other).dedicated_bytes.current, 0);
    ck_assert_uint_eq(stats_of(xs).imported_bytes.current, 0);
    OK(xseg_free(xs, a));
    xseg_stats s2 = stats_of(xs);
    ck_assert_uint_eq(s2.dedicated_bytes.current, 6 * MiB);
    ck_assert_uint_eq(s2.dedicated_bytes.peak, 10 * MiB);
    /* JSON and Prometheus show the same numbers */
    char *buf = malloc(1 << 16);
    ck_assert_ptr_nonnull(buf);
    size_t len = 0;
    OK(xseg_stats_json(xs, buf, 1 << 16, &len));
    ck_assert_int_eq(number_after(buf, "\"dedicated_bytes\":{\"current\":"), 6 * MiB);
    const char *ded = strstr(buf, "\"dedicated_bytes\":");
    ck_assert_ptr_nonnull(ded);
    ck_assert_int_eq(number_after(ded, "\"peak\":"), 10 * MiB);
    ck_assert_int_eq(number_after(ded, "\"total\":"), 10 * MiB);
    ck_assert_int_eq(number_after(buf, "\"imported_bytes\":{\"current\":"), 0);
    OK(xseg_stats_prometheus(xs, buf, 1 << 16, &len));
    ck_assert_int_eq(number_after(buf, "\nxseg_dedicated_bytes{device=\"0\"} "), 6 * MiB);
    ck_assert_int_eq(number_after(buf, "\nxseg_dedicated_peak_bytes{device=\"0\"} "), 10 * MiB);
    ck_assert_int_eq(number_after(buf, "\nxseg_dedicated_alloc_bytes_total{device=\"0\"} "),
                     10 * MiB);
    OK(xseg_stats_prometheus(other, buf, 1 << 16, &len));
    ck_assert_int_eq(number_after(buf, "\nxseg_imported_bytes{device=\"0\"} "), 6 * MiB);
    free(buf);
    OK(xseg_reset_peak(xs)); /* the peaks restart from current */
    ck_assert_uint_eq(stats_of(xs).dedicated_bytes.peak, 6 * MiB);
    ck_assert_uint_eq(share_stats(xs).dedicated_blocks.peak, 1);
    OK(xseg_unimport(other, p));
    ck_assert_uint_eq(stats_of(other).imported_bytes.current, 0);
    OK(xseg_free(xs, b));
    OK(xseg_free(xs, o));
    ck_assert_uint_eq(stats_of(xs).dedicated_bytes.current, 0);
    T_CHECK(xs);
    OK(xseg_destroy(other));
    OK(xseg_destroy(xs));
}
END_TEST

/* ---- every driver call of the share paths failing ---- */

/* alloc_registrable, export, import (into the same allocator), check,
 * unimport, free; each step may fail.  Returns the steps that failed. */
static int share_scenario(xseg_t *xs, char *why, size_t whylen)
{
    void *a = NULL, *p = NULL;
    xseg_export_desc d;
    int failed = 0, have_desc = 0;
    xseg_status st = xseg_alloc_registrable(xs, 6 * MiB, NULL, &a);
    if (st != XSEG_OK) {
        failed++;
        if (!*xseg_last_error())
            snprintf(why, whylen, "alloc_registrable failed without a message");
        return failed;
    }
    t_fill(a, 6 * MiB, 81);
    if (xseg_export(xs, a, &d) == XSEG_OK)
        have_desc = 1;
    else
        failed++;
    if (have_desc && xseg_import(xs, &d, &p) != XSEG_OK) {
        failed++;
        if (p)
            snprintf(why, whylen, "a failed import returned %p", p);
        p = NULL;
    }
    if (p && !t_check(p, 6 * MiB, 81))
        snprintf(why, whylen, "the imported view differs");
    while (p && xseg_unimport(xs, p) != XSEG_OK)
        failed++; /* a failed unimport keeps it: again */
    while (xseg_free(xs, a) != XSEG_OK)
        failed++;
    if (have_desc)
        xseg_export_close(&d);
    return failed;
}

START_TEST(every_share_driver_call_failing_leaves_nothing_behind)
{
    static const int ops[] = {XSEG_OP_RESERVE, XSEG_OP_CREATE, XSEG_OP_MAP, XSEG_OP_SET_ACCESS,
                              XSEG_OP_EXPORT, XSEG_OP_IMPORT, XSEG_OP_UNMAP, XSEG_OP_RELEASE,
                              XSEG_OP_ADDRESS_FREE, XSEG_OP_STREAM_SYNC};
    const char *conf = "backend:host,host_capacity:256MB,reclaim:sync";
    xseg_host_counts g0;
    xseg_host_counts_global(&g0);
    int fds0 = open_fds();
    uint64_t clean[XSEG_OP_COUNT] = {0};
    char why[256] = "";
    fault_reset();
    xseg_t *xs = NULL;
    OK(xseg_create_with_driver(&xs, 0, conf, &fault_driver));
    ck_assert_int_eq(share_scenario(xs, why, sizeof why), 0);
    ck_assert_msg(!why[0], "%s", why);
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
        clean[ops[i]] = fault_calls(ops[i]);
    OK(xseg_destroy(xs));
    ck_assert_uint_ge(clean[XSEG_OP_EXPORT], 1);
    ck_assert_uint_ge(clean[XSEG_OP_IMPORT], 1);
    int points = 0;
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
        int op = ops[i], codes[4];
        int nc = fault_codes(op, codes, 4);
        /* calls made before the scenario (create: the arena's reserve) count too */
        for (uint64_t nth = 1; nth <= clean[op]; nth++)
            for (int k = 0; k < nc; k++) {
                fault_reset();
                xs = NULL;
                OK(xseg_create_with_driver(&xs, 0, conf, &fault_driver));
                fault_arm(op, nth, codes[k], FAULT_ONCE);
                why[0] = 0;
                share_scenario(xs, why, sizeof why);
                fault_disarm();
                ck_assert_msg(!why[0], "%s #%llu (%d): %s", fault_op_name(op),
                              (unsigned long long)nth, codes[k], why);
                ck_assert_msg(xseg_check(xs) == XSEG_OK, "%s #%llu: %s", fault_op_name(op),
                              (unsigned long long)nth, xseg_last_error());
                ck_assert_int_eq(share_scenario(xs, why, sizeof why), 0); /* still works */
                OK(xseg_destroy(xs));
                xseg_host_counts fin;
                ck_assert(fault_fini_counts(&fin));
                ck_assert_msg(fin.handles == 0 && fin.mappings == 0 && fin.reservations == 0,
                              "%s #%llu (%d): left %zu handles, %zu maps, %zu reservations",
                              fault_op_name(op), (unsigned long long)nth, codes[k],
                              fin.handles, fin.mappings, fin.reservations);
                points++;
            }
    }
    xseg_host_counts g1;
    xseg_host_counts_global(&g1);
    ck_assert_uint_eq(g1.handles, g0.handles);
    ck_assert_uint_eq(g1.mappings, g0.mappings);
    ck_assert_int_eq(open_fds(), fds0);
    ck_assert_int_ge(points, 25);
    printf("test_share: %d injection points\n", points);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("share");
    TCase *tc = tcase_create("share");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, conf_keys_parse_and_refuse);
    tcase_add_test(tc, dedicated_blocks_have_one_handle_of_whole_granules);
    tcase_add_test(tc, the_cap_counts_dedicated_blocks);
    tcase_add_test(tc, two_processes_share_blocks_both_ways);
    tcase_add_test(tc, the_exporters_free_never_reuses_imported_pages);
    tcase_add_test(tc, an_importer_killed_costs_the_exporter_nothing);
    tcase_add_test(tc, a_dead_exporters_memory_stays);
    tcase_add_test(tc, bad_descriptions_are_refused_with_nothing_mapped);
    tcase_add_test(tc, send_and_receive_refuse_what_is_not_a_description);
    tcase_add_test(tc, peer_access_is_given_to_every_mapping);
    tcase_add_test(tc, default_allocators_apply_peer_access_from_creation);
    tcase_add_test(tc, a_tags_dedicated_blocks_are_the_familys);
    tcase_add_test(tc, destroy_gives_back_live_shared_blocks);
    tcase_add_test(tc, stats_show_dedicated_and_imported_bytes_apart);
    tcase_add_test(tc, every_share_driver_call_failing_leaves_nothing_behind);
    suite_add_tcase(s, tc);
    return t_run(s);
}
