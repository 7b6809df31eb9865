/* test_monitor_snapshot.c: xseg_snapshot_json (lib/snapshot.c): the blocks
 * tile the segment in address order; states, sizes, requested sizes and
 * streams are right; mapped and unmapped ranges and handles account for
 * every mapped byte; slabs list their live slots; buffer rules; with tags,
 * a segment per tag allocator, each block naming its tag, a sleeping
 * tag's segment unmapped under its live blocks, the totals the family's. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "xseg.h"
#include "support_common.h"

#define MIB ((size_t)1 << 20)

typedef unsigned long long ull;

typedef struct sblk {
    ull addr, size, requested, mapped;
    char state[16];
    long long stream; /* -1: null */
    const char *text;
} sblk;

typedef struct snap {
    char *json;
    sblk *b;
    size_t n;
    ull base, size, mapped_runs, unmapped_runs, handle_bytes;
} snap;

static xseg_t *make(const char *conf)
{
    xseg_t *xs = NULL;
    ck_assert_msg(xseg_create(&xs, 0, conf) == XSEG_OK, "%s", xseg_last_error());
    return xs;
}

static ull num(const char *json, const char *key)
{
    const char *p = strstr(json, key);
    ck_assert_msg(p != NULL, "no %s", key);
    return strtoull(p + strlen(key), NULL, 10);
}

/* Sum of the lengths of a "[[a,n],[a,n]...]" list after `key`. */
static ull sum_runs(const char *json, const char *key)
{
    const char *p = strstr(json, key);
    ck_assert_ptr_nonnull(p);
    p += strlen(key);
    ull total = 0, a, n;
    int used;
    while (sscanf(p, "[%llu,%llu]%n", &a, &n, &used) == 2) {
        total += n;
        p += used;
        if (*p == ',')
            p++;
    }
    return total;
}

static ull sum_handles(const char *json)
{
    ull total = 0, a, n, h;
    const char *end = strstr(json, "\"blocks\":[");
    for (const char *p = strstr(json, "\"handles\":["); (p = strstr(p + 1, "{\"addr\":")) && p < end;)
        if (sscanf(p, "{\"addr\":%llu,\"size\":%llu,\"handle\":%llu}", &a, &n, &h) == 3)
            total += n;
    return total;
}

static void parse_block(const char *p, sblk *b)
{
    int got = sscanf(p, "{\"addr\":%llu,\"size\":%llu,\"requested\":%llu,\"state\":\"%15[a-z]\"",
                     &b->addr, &b->size, &b->requested, b->state);
    ck_assert_int_eq(got, 4);
    const char *s = strstr(p, "\"stream\":") + 9;
    b->stream = strncmp(s, "null", 4) ? (long long)strtoull(s, NULL, 10) : -1;
    b->mapped = num(p, "\"mapped\":");
    b->text = p;
}

static snap get(xseg_t *xs)
{
    snap s = {0};
    size_t len = 0;
    ck_assert_int_eq(xseg_snapshot_json(xs, NULL, 0, &len), XSEG_ERR_BUFFER_TOO_SMALL);
    s.json = malloc(len + 1);
    ck_assert_int_eq(xseg_snapshot_json(xs, s.json, len + 1, &len), XSEG_OK);
    ck_assert_uint_eq(strlen(s.json), len);
    s.base = num(s.json, "{\"base\":");
    s.size = num(strstr(s.json, "{\"base\":"), ",\"size\":");
    s.mapped_runs = sum_runs(s.json, "\"mapped\":[");
    s.unmapped_runs = sum_runs(s.json, "\"unmapped\":[");
    s.handle_bytes = sum_handles(s.json);
    const char *blocks = strstr(s.json, "\"blocks\":[");
    ck_assert_ptr_nonnull(blocks);
    const char *end = strstr(blocks, "}]}"); /* the first segment's blocks only */
    size_t cap = 16;
    s.b = malloc(cap * sizeof *s.b);
    for (const char *p = strstr(blocks, "\n{\"addr\":"); p && p < end;
         p = strstr(p + 1, "\n{\"addr\":")) {
        if (s.n == cap)
            s.b = realloc(s.b, (cap *= 2) * sizeof *s.b);
        parse_block(p + 1, &s.b[s.n++]);
    }
    return s;
}

static void put(snap *s)
{
    free(s->json);
    free(s->b);
}

static const sblk *at(const snap *s, const void *p)
{
    for (size_t i = 0; i < s->n; i++)
        if (s->b[i].addr <= (uintptr_t)p && (uintptr_t)p < s->b[i].addr + s->b[i].size)
            return &s->b[i];
    ck_abort_msg("no block holds %p", p);
    return NULL;
}

/* The blocks tile the segment; mapped bytes agree everywhere. */
static void check_tiling(const snap *s, xseg_t *xs)
{
    xseg_stats st = {.size = sizeof st};
    xseg_get_stats(xs, &st);
    ck_assert_uint_gt(s->n, 0);
    ck_assert_uint_eq(s->b[0].addr, s->base);
    ull sum = 0, mapped = 0;
    for (size_t i = 0; i < s->n; i++) {
        if (i)
            ck_assert_uint_eq(s->b[i].addr, s->b[i - 1].addr + s->b[i - 1].size);
        ck_assert_uint_le(s->b[i].mapped, s->b[i].size);
        sum += s->b[i].size;
        mapped += s->b[i].mapped;
    }
    ck_assert_uint_eq(sum, s->size);
    ck_assert_uint_eq(s->mapped_runs, st.mapped_bytes.current);
    ck_assert_uint_eq(s->mapped_runs + s->unmapped_runs, s->size);
    ck_assert_uint_eq(s->handle_bytes, st.mapped_bytes.current);
    ck_assert_uint_eq(num(s->json, "\"allocated\":"), st.allocated_bytes.current);
    ck_assert_uint_eq(num(s->json, "\"mapped\":"), st.mapped_bytes.current);
    ck_assert_uint_eq(mapped, st.mapped_bytes.current); /* each mapped byte in one block */
}

/* The first segment (get() parses its blocks) tiles and accounts for its
 * own mapped bytes, its "mapped_bytes", as check_tiling does for a lone one. */
static void check_tiling_own(const snap *s)
{
    const char *seg = strstr(s->json, "{\"base\":");
    ull own = num(seg, "\"mapped_bytes\":"), sum = 0, mapped = 0;
    for (size_t i = 0; i < s->n; i++) {
        if (i)
            ck_assert_uint_eq(s->b[i].addr, s->b[i - 1].addr + s->b[i - 1].size);
        sum += s->b[i].size;
        mapped += s->b[i].mapped;
    }
    ck_assert_uint_eq(sum, s->size);
    ck_assert_uint_eq(s->mapped_runs, own);
    ck_assert_uint_eq(s->mapped_runs + s->unmapped_runs, s->size);
    ck_assert_uint_eq(mapped, own);
}

START_TEST(t_fresh)
{
    xseg_t *xs = make("backend:host,host_capacity:64MB");
    snap s = get(xs);
    ck_assert_uint_eq(s.n, 1);
    ck_assert_str_eq(s.b[0].state, "free");
    ck_assert_int_eq(s.b[0].stream, -1);
    ck_assert_uint_eq(s.b[0].mapped, 0);
    check_tiling(&s, xs);
    ck_assert_ptr_nonnull(strstr(s.json, "\"backend\":\"host\""));
    put(&s);
    xseg_destroy(xs);
}
END_TEST

START_TEST(t_blocks)
{
    xseg_t *xs = make("backend:host,host_capacity:256MB");
    void *big[4], *small[3];
    void *s7 = (void *)(uintptr_t)7;
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(xseg_alloc(xs, (size_t)(i + 1) * 3 * MIB + 11, i == 2 ? s7 : NULL,
                                    &big[i]), XSEG_OK);
    ck_assert_int_eq(xseg_alloc(xs, 1000, NULL, &small[0]), XSEG_OK);
    ck_assert_int_eq(xseg_alloc(xs, 1000, NULL, &small[1]), XSEG_OK);
    ck_assert_int_eq(xseg_alloc(xs, 3000, s7, &small[2]), XSEG_OK);
    ck_assert_int_eq(xseg_free(xs, big[1]), XSEG_OK);     /* cached */
    ck_assert_int_eq(xseg_free(xs, small[1]), XSEG_OK);
    ck_assert_int_eq(xseg_record_stream(xs, big[3], s7), XSEG_OK);
    ck_assert_int_eq(xseg_free(xs, big[3]), XSEG_OK);     /* pending on s7's event */
    snap s = get(xs);
    check_tiling(&s, xs);
    for (int i = 0; i < 3; i += 2) {
        const sblk *b = at(&s, big[i]);
        ck_assert_uint_eq(b->addr, (uintptr_t)big[i]);
        ck_assert_str_eq(b->state, "allocated");
        ck_assert_uint_eq(b->requested, (size_t)(i + 1) * 3 * MIB + 11);
        ck_assert_uint_ge(b->size, b->requested);
        ck_assert_uint_eq(b->mapped, b->size);
        ck_assert_int_eq(b->stream, i == 2 ? 7 : 0);
    }
    const sblk *f = at(&s, big[1]);
    ck_assert_str_eq(f->state, "free");
    ck_assert_uint_gt(f->mapped, 0); /* cached: still mapped */
    ck_assert_int_eq(f->stream, 0);  /* kept for its stream */
    const sblk *pend = at(&s, big[3]);
    ck_assert(!strcmp(pend->state, "pending") || !strcmp(pend->state, "free"));
    /* small ones live in slabs, listed with their requested sizes */
    char want[64];
    const sblk *sl = at(&s, small[0]);
    ck_assert_str_eq(sl->state, "slab");
    snprintf(want, sizeof want, "[%llu,1000]", (ull)(uintptr_t)small[0]);
    ck_assert_ptr_nonnull(strstr(sl->text, want));
    snprintf(want, sizeof want, "[%llu,1000]", (ull)(uintptr_t)small[1]);
    ck_assert_ptr_null(strstr(s.json, want)); /* freed slot: not listed */
    const sblk *sl7 = at(&s, small[2]);
    ck_assert_str_eq(sl7->state, "slab");
    ck_assert_int_eq(sl7->stream, 7);
    ck_assert_ptr_ne(sl7, sl);
    ck_assert_uint_eq(num(sl->text, "\"used\":"), 1);
    ck_assert_uint_eq(num(sl->text, "\"slot_size\":"), 1024);
    put(&s);
    xseg_destroy(xs);
}
END_TEST

/* Trimmed memory shows as unmapped holes; nothing stays mapped. */
START_TEST(t_after_trim)
{
    xseg_t *xs = make("backend:host,host_capacity:256MB");
    void *p[3];
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(xseg_alloc(xs, 8 * MIB, NULL, &p[i]), XSEG_OK);
    ck_assert_int_eq(xseg_free(xs, p[1]), XSEG_OK);
    ck_assert_int_eq(xseg_trim(xs, 0, NULL), XSEG_OK);
    snap s = get(xs);
    check_tiling(&s, xs);
    const sblk *hole = at(&s, p[1]);
    ck_assert_str_eq(hole->state, "free");
    ck_assert_uint_eq(hole->mapped, 0);
    ck_assert_uint_eq(s.mapped_runs, 16 * MIB);
    put(&s);
    xseg_destroy(xs);
}
END_TEST

/* The segment of tag `tag` in a snapshot, or NULL. */
static const char *segment_of(const char *json, int tag)
{
    char key[64];
    snprintf(key, sizeof key, ",\"tag\":%d,\"tag_name\":", tag);
    for (const char *p = strstr(json, "{\"base\":"); p; p = strstr(p + 1, "{\"base\":")) {
        const char *next = strstr(p + 1, "{\"base\":"), *k = strstr(p, key);
        if (k && (!next || k < next))
            return p;
    }
    return NULL;
}

START_TEST(t_tags)
{
    xseg_t *xs = make("backend:host,host_capacity:256MB");
    int w, kv;
    ck_assert_int_eq(xseg_tag_id("snap_w", &w), XSEG_OK);
    ck_assert_int_eq(xseg_tag_id("snap_kv", &kv), XSEG_OK);
    void *d, *a, *b;
    ck_assert_int_eq(xseg_alloc(xs, 3 * MIB, NULL, &d), XSEG_OK);
    ck_assert_int_eq(xseg_alloc_tagged(xs, 5 * MIB, NULL, w, &a), XSEG_OK);
    ck_assert_int_eq(xseg_alloc_tagged(xs, 2 * MIB, NULL, kv, &b), XSEG_OK);
    ck_assert_int_eq(xseg_sleep(xs, &w, 1, XSEG_SLEEP_DISCARD), XSEG_OK);
    snap s = get(xs); /* parses the first segment: the parent's, tag 0 */
    check_tiling_own(&s);
    xseg_stats st = {.size = sizeof st};
    ck_assert_int_eq(xseg_get_stats(xs, &st), XSEG_OK);
    ck_assert_uint_eq(num(s.json, "\"allocated\":"), st.allocated_bytes.current);
    ck_assert_uint_eq(num(s.json, "\"mapped\":"), st.mapped_bytes.current);
    ck_assert_uint_eq(num(s.json, "\"active\":"), 3);
    const char *s0 = segment_of(s.json, 0), *sw = segment_of(s.json, w),
               *skv = segment_of(s.json, kv);
    ck_assert_msg(s0 && sw && skv, "a segment per tag: %.600s", s.json);
    ck_assert_ptr_eq(s0, strstr(s.json, "{\"base\":"));
    ck_assert_ptr_nonnull(strstr(s0, "\"tag_name\":\"default\",\"asleep\":0,\"allocated\":3145728,"));
    ck_assert_ptr_nonnull(strstr(sw, "\"tag_name\":\"snap_w\",\"asleep\":1,\"allocated\":5242880,"
                                     "\"mapped\":[],"));
    ck_assert_ptr_nonnull(strstr(skv, "\"tag_name\":\"snap_kv\",\"asleep\":0,"));
    ck_assert_uint_eq(num(sw, "\"mapped_bytes\":"), 0);
    ck_assert_uint_ge(num(skv, "\"mapped_bytes\":"), 2 * MIB);
    /* each block names its tag; w's live block is unmapped while asleep */
    char want[160];
    snprintf(want, sizeof want, "{\"addr\":%llu,\"size\":5242880,\"requested\":5242880,"
             "\"state\":\"allocated\",\"stream\":0,\"mapped\":0,\"tag\":%d}",
             (ull)(uintptr_t)a, w);
    ck_assert_msg(strstr(sw, want) != NULL, "no %s in %.400s", want, sw);
    snprintf(want, sizeof want, "{\"addr\":%llu,\"size\":2097152,\"requested\":2097152,"
             "\"state\":\"allocated\",\"stream\":0,\"mapped\":2097152,\"tag\":%d}",
             (ull)(uintptr_t)b, kv);
    ck_assert_msg(strstr(skv, want) != NULL, "no %s in %.400s", want, skv);
    snprintf(want, sizeof want, "{\"addr\":%llu,", (ull)(uintptr_t)d);
    const char *bd = strstr(s0, want);
    ck_assert_ptr_nonnull(bd);
    ck_assert_ptr_nonnull(strstr(bd, ",\"tag\":0}"));
    ck_assert(strstr(bd, ",\"tag\":0}") < sw);
    put(&s);
    xseg_destroy(xs);
}
END_TEST

START_TEST(t_buffer_rules)
{
    xseg_t *xs = make("backend:host,host_capacity:64MB");
    char small[40];
    size_t len = 0;
    ck_assert_int_eq(xseg_snapshot_json(xs, small, sizeof small, &len), XSEG_ERR_BUFFER_TOO_SMALL);
    ck_assert_uint_gt(len, sizeof small);
    ck_assert_uint_eq(strlen(small), sizeof small - 1);
    ck_assert_int_eq(xseg_snapshot_json(xs, NULL, 4, NULL), XSEG_ERR_INVALID_ARG);
    ck_assert_int_eq(xseg_snapshot_json(NULL, small, sizeof small, NULL), XSEG_ERR_INVALID_ARG);
    xseg_destroy(xs);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("monitor_snapshot");
    TCase *tc = tcase_create("snapshot");
    tcase_add_test(tc, t_fresh);
    tcase_add_test(tc, t_blocks);
    tcase_add_test(tc, t_after_trim);
    tcase_add_test(tc, t_buffer_rules);
    tcase_add_test(tc, t_tags);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return t_run(suite());
}
