/* test_lists.c: the one lists (the stats fields of lib/stats_fields.h, the
 * tag fields of lib/tag_fields.h, the conf keys of lib/conf.h) against what
 * they must reach: docs/stats.md names every stats and tag field and driver
 * op, docs/config.md documents every key (a section and a row of the
 * table), the JSON of xseg_stats_json has exactly the listed keys (and,
 * with tags in use, a "tags" entry with every tag key), the Prometheus text
 * every listed family with its type and a sample (the tag families with a
 * `tag` label, only with tags in use).  The docs are read from $XSEG_LISTS_DOCS (a directory,
 * for trying a changed copy), else XSEG_SOURCE_DIR/docs. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf.h"
#include "stats_fields.h"
#include "support_common.h"
#include "tag_fields.h"

#define TEXT_MAX ((size_t)1 << 20)

/* The whole of docs/<name> (NUL-terminated, caller frees). */
static char *read_doc(const char *name)
{
    const char *dir = getenv("XSEG_LISTS_DOCS");
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir && *dir ? dir : XSEG_SOURCE_DIR "/docs", name);
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    char *buf = malloc(TEXT_MAX + 1);
    ck_assert_ptr_nonnull(buf);
    size_t n = fread(buf, 1, TEXT_MAX, f);
    fclose(f);
    buf[n] = '\0';
    return buf;
}

/* 1 when text has `name` in backquotes, or `name[ (an array's index). */
static int names_code(const char *text, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = text; (p = strchr(p, '`')) != NULL; p++)
        if (strncmp(p + 1, name, n) == 0 && (p[1 + n] == '`' || p[1 + n] == '['))
            return 1;
    return 0;
}

/* ---- the stats fields -------------------------------------------------- */

#define FIELD_NAME(kind, f, ...) #f,
static const char *const field_names[] = {XSEG_STATS_FIELDS(FIELD_NAME, XSEG_SF_NOTHING)};
#define JSON_NAME(kind, f, json, ...) json,
static const char *const json_names[] = {XSEG_STATS_FIELDS(JSON_NAME, XSEG_SF_NOTHING)};
#define IS_COUNTER_U32 0
#define IS_COUNTER_I32 0
#define IS_COUNTER_COUNTER 1
#define IS_COUNTER_OPS 0
#define IS_COUNTER_GAUGE 0
#define IS_COUNTER_MONO 0
#define IS_COUNTER(kind, ...) IS_COUNTER_##kind,
static const int is_counter[] = {XSEG_STATS_FIELDS(IS_COUNTER, XSEG_SF_NOTHING)};

typedef struct family {
    const char *name, *type;
} family;
#define FAMILY(order, member, style, type, name, help) [order] = {name, #type},
static const family families[XSEG_STATS_NFAMILIES] = {
    XSEG_STATS_FIELDS(XSEG_SF_PROMS_, FAMILY)};

#define NFIELDS (sizeof field_names / sizeof field_names[0])

START_TEST(test_stats_doc_names_every_field)
{
    char *doc = read_doc("stats.md");
    ck_assert_int_eq(NFIELDS, XSEG_STATS_NFIELDS);
    for (size_t i = 0; i < NFIELDS; i++)
        ck_assert_msg(names_code(doc, field_names[i]),
                      "docs/stats.md does not name the stats field `%s` (list entry %zu)",
                      field_names[i], i);
    for (int op = 0; op < XSEG_OP_COUNT; op++)
        ck_assert_msg(names_code(doc, xseg_op_name((xseg_op)op)),
                      "docs/stats.md does not name the driver op `%s`",
                      xseg_op_name((xseg_op)op));
    free(doc);
}
END_TEST

/* The text of a JSON or Prometheus renderer of a host allocator that did
 * some work. */
static char *render(int prom)
{
    xseg_t *xs = t_host("host_capacity:1GB");
    void *p, *q;
    ck_assert_int_eq(xseg_alloc(xs, 3 * MiB, NULL, &p), XSEG_OK);
    ck_assert_int_eq(xseg_alloc(xs, 1000, NULL, &q), XSEG_OK);
    ck_assert_int_eq(xseg_free(xs, p), XSEG_OK);
    char *buf = malloc(TEXT_MAX);
    ck_assert_ptr_nonnull(buf);
    size_t len = 0;
    xseg_status st = prom ? xseg_stats_prometheus(xs, buf, TEXT_MAX, &len)
                          : xseg_stats_json(xs, buf, TEXT_MAX, &len);
    ck_assert_int_eq(st, XSEG_OK);
    ck_assert_int_eq(xseg_destroy(xs), XSEG_OK);
    return buf;
}

/* The number of keys of the outermost object. */
static size_t top_keys(const char *j)
{
    size_t n = 0;
    int depth = 0, in_str = 0;
    for (const char *p = j; *p; p++) {
        if (in_str) {
            in_str = *p == '\\' ? (p++, 1) : *p != '"';
            continue;
        }
        if (*p == '"') {
            in_str = 1;
            n += depth == 1 && (p[-1] == '{' || p[-1] == ',');
        } else if (*p == '{') {
            depth++;
        } else if (*p == '}') {
            depth--;
        }
    }
    return n;
}

START_TEST(test_json_has_every_field)
{
    char *j = render(0);
    size_t listed = 0;
    char key[128];
    for (size_t i = 0; i < NFIELDS; i++) {
        if (!json_names[i])
            continue;
        listed++;
        snprintf(key, sizeof key, "\"%s\":%s", json_names[i], is_counter[i] ? "{\"current\":" : "");
        ck_assert_msg(strstr(j, key) != NULL, "the JSON has no %s (field %s): %.300s", key,
                      field_names[i], j);
    }
    ck_assert_msg(strstr(j, "\"backend\":\"host\"") != NULL, "no backend in %.300s", j);
    ck_assert_msg(top_keys(j) == listed + 1, "the JSON has %zu keys, the list %zu and backend",
                  top_keys(j), listed);
    free(j);
}
END_TEST

/* Check that text has family f: its HELP, its TYPE and a sample. */
static void check_family(const char *text, const family *f)
{
    char line[256];
    ck_assert_msg(f->name != NULL, "a Prometheus order has no family");
    snprintf(line, sizeof line, "# HELP %s ", f->name);
    ck_assert_msg(strstr(text, line) != NULL, "no HELP line for %s", f->name);
    snprintf(line, sizeof line, "# TYPE %s %s\n", f->name, f->type);
    ck_assert_msg(strstr(text, line) != NULL, "no TYPE line '%s %s'", f->name, f->type);
    snprintf(line, sizeof line, "\n%s{", f->name);
    ck_assert_msg(strstr(text, line) != NULL, "no sample of %s", f->name);
}

static size_t count(const char *text, const char *what)
{
    size_t n = 0;
    for (const char *p = text; (p = strstr(p, what)) != NULL; p++)
        n++;
    return n;
}

START_TEST(test_prometheus_has_every_family)
{
    char *t = render(1);
    for (size_t i = 0; i < XSEG_STATS_NFAMILIES; i++)
        check_family(t, &families[i]);
    /* the list's families and xseg_info, nothing else */
    ck_assert_uint_eq(count(t, "# TYPE "), XSEG_STATS_NFAMILIES + 1);
    free(t);
}
END_TEST

/* xseg-top's text: the same renderer over records, with labels. */
START_TEST(test_prometheus_render_has_every_family)
{
    xseg_stats st = {.size = sizeof st, .device = 2};
    const char *names[] = {"pid"}, *values[] = {"7"};
    xseg_prom_source src = {&st, "host", NULL, 1, names, values};
    char *t = malloc(TEXT_MAX);
    ck_assert_ptr_nonnull(t);
    size_t len;
    ck_assert_int_eq(xseg_stats_prometheus_render(&src, 1, t, TEXT_MAX, &len), XSEG_OK);
    for (size_t i = 0; i < XSEG_STATS_NFAMILIES; i++) {
        check_family(t, &families[i]);
        char s[256];
        snprintf(s, sizeof s, "\n%s{pid=\"7\",device=\"2\"", families[i].name);
        ck_assert_msg(strstr(t, s) != NULL, "no labelled sample of %s", families[i].name);
    }
    ck_assert_uint_eq(count(t, "# TYPE "), XSEG_STATS_NFAMILIES + 1);
    free(t);
}
END_TEST

/* ---- the tag fields ----------------------------------------------------- */

#define TAG_FIELD(kind, f, ...) #f,
static const char *const tag_field_names[] = {XSEG_TAG_FIELDS(TAG_FIELD, XSEG_TF_NOTHING)};
#define TAG_JSON(kind, f, json, ...) json,
static const char *const tag_json_names[] = {XSEG_TAG_FIELDS(TAG_JSON, XSEG_TF_NOTHING)};
#define TAG_FAMILY(member, style, type, name, help) {name, #type},
static const family tag_families[XSEG_TAG_NFAMILIES] = {
    XSEG_TAG_FIELDS(XSEG_TF_PROMS_, TAG_FAMILY)};
#define NTAGFIELDS (sizeof tag_field_names / sizeof tag_field_names[0])

START_TEST(test_stats_doc_names_every_tag_field)
{
    char *doc = read_doc("stats.md");
    ck_assert_int_eq(NTAGFIELDS, XSEG_TAG_NFIELDS);
    for (size_t i = 0; i < NTAGFIELDS; i++)
        ck_assert_msg(names_code(doc, tag_field_names[i]),
                      "docs/stats.md does not name the tag field `%s` (tag list entry %zu)",
                      tag_field_names[i], i);
    ck_assert_msg(strstr(doc, "`\"tags\"`") != NULL, "docs/stats.md does not name \"tags\"");
    free(doc);
}
END_TEST

/* The text of a renderer for an allocator with a tag in use. */
static char *render_tagged(int prom)
{
    xseg_t *xs = t_host("host_capacity:1GB");
    int tag;
    void *p, *q;
    ck_assert_int_eq(xseg_tag_id("lists_tag", &tag), XSEG_OK);
    ck_assert_int_eq(xseg_alloc(xs, 3 * MiB, NULL, &p), XSEG_OK);
    ck_assert_int_eq(xseg_alloc_tagged(xs, 2 * MiB, NULL, tag, &q), XSEG_OK);
    ck_assert_int_eq(xseg_sleep(xs, &tag, 1, XSEG_SLEEP_DISCARD), XSEG_OK);
    char *buf = malloc(TEXT_MAX);
    ck_assert_ptr_nonnull(buf);
    size_t len = 0;
    xseg_status st = prom ? xseg_stats_prometheus(xs, buf, TEXT_MAX, &len)
                          : xseg_stats_json(xs, buf, TEXT_MAX, &len);
    ck_assert_int_eq(st, XSEG_OK);
    ck_assert_int_eq(xseg_destroy(xs), XSEG_OK);
    return buf;
}

/* Every tag key, in both entries (default and lists_tag), and nothing
 * else in an entry; the stats' own keys as without tags. */
START_TEST(test_json_has_every_tag_key)
{
    char *j = render_tagged(0), key[128];
    const char *tags = strstr(j, ",\"tags\":[{");
    ck_assert_msg(tags != NULL, "no tags in %.300s", j);
    size_t listed = 0;
    for (size_t i = 0; i < NFIELDS; i++)
        listed += json_names[i] != NULL;
    ck_assert_msg(top_keys(j) == listed + 2, "the JSON has %zu keys, the list %zu, backend, tags",
                  top_keys(j), listed);
    const char *second = strstr(tags, "},{\"id\":");
    ck_assert_msg(second != NULL, "one tag entry only: %s", tags);
    size_t keys = 0;
    for (size_t i = 0; i < NTAGFIELDS; i++) {
        if (!tag_json_names[i])
            continue;
        keys++;
        snprintf(key, sizeof key, "\"%s\":", tag_json_names[i]);
        const char *a = strstr(tags, key), *b = strstr(second, key);
        ck_assert_msg(a && a < second && b, "a tag entry has no %s: %s", key, tags);
    }
    char *first = strndup(tags + strlen(",\"tags\":["), (size_t)(second + 1 - tags) -
                                                           strlen(",\"tags\":["));
    ck_assert_uint_eq(top_keys(first), keys); /* the first entry: the listed keys alone */
    free(first);
    ck_assert_ptr_nonnull(strstr(tags, "\"name\":\"default\""));
    ck_assert_ptr_nonnull(strstr(second, "\"name\":\"lists_tag\",\"asleep\":1,\"mode\":\"discard\""));
    free(j);
}
END_TEST

START_TEST(test_prometheus_has_every_tag_family)
{
    char *t = render_tagged(1), s[256];
    for (size_t i = 0; i < XSEG_STATS_NFAMILIES; i++)
        check_family(t, &families[i]);
    for (size_t i = 0; i < XSEG_TAG_NFAMILIES; i++) {
        check_family(t, &tag_families[i]);
        snprintf(s, sizeof s, "\n%s{device=\"0\",tag=\"lists_tag\"} ", tag_families[i].name);
        ck_assert_msg(strstr(t, s) != NULL, "no sample %s", s);
        snprintf(s, sizeof s, "\n%s{device=\"0\",tag=\"default\"} ", tag_families[i].name);
        ck_assert_msg(strstr(t, s) != NULL, "no sample %s", s);
    }
    ck_assert_uint_eq(count(t, "# TYPE "), XSEG_STATS_NFAMILIES + XSEG_TAG_NFAMILIES + 1);
    free(t);
}
END_TEST

/* xseg-top's text with tag rows: the same families with its labels. */
START_TEST(test_prometheus_render_has_every_tag_family)
{
    xseg_stats st = {.size = sizeof st, .device = 2};
    xseg_tag_stats tags[2] = {{.size = sizeof tags[0], .tag = 0, .name = "default"},
                              {.size = sizeof tags[0], .tag = 5, .name = "kv"}};
    const xseg_tag_stats *per[] = {tags};
    size_t ntags[] = {2};
    const char *names[] = {"pid"}, *values[] = {"7"};
    xseg_prom_source src = {&st, "host", NULL, 1, names, values};
    char *t = malloc(TEXT_MAX), s[256];
    ck_assert_ptr_nonnull(t);
    size_t len;
    ck_assert_int_eq(xseg_prom_render_tags(&src, per, ntags, 1, t, TEXT_MAX, &len), XSEG_OK);
    for (size_t i = 0; i < XSEG_TAG_NFAMILIES; i++) {
        check_family(t, &tag_families[i]);
        snprintf(s, sizeof s, "\n%s{pid=\"7\",device=\"2\",tag=\"kv\"} ", tag_families[i].name);
        ck_assert_msg(strstr(t, s) != NULL, "no labelled sample %s", s);
    }
    ck_assert_uint_eq(count(t, "# TYPE "), XSEG_STATS_NFAMILIES + XSEG_TAG_NFAMILIES + 1);
    /* without tags: none of their families */
    ck_assert_int_eq(xseg_prom_render_tags(&src, NULL, NULL, 1, t, TEXT_MAX, &len), XSEG_OK);
    ck_assert_ptr_null(strstr(t, "xseg_tag_"));
    free(t);
}
END_TEST

/* ---- the conf keys ----------------------------------------------------- */

#define KEY_NAME(key, ...) #key,
static const char *const conf_names[] = {XSEG_CONF_KEYS(KEY_NAME)};

START_TEST(test_config_doc_names_every_key)
{
    char *doc = read_doc("config.md");
    char s[256];
    for (size_t i = 0; i < sizeof conf_names / sizeof conf_names[0]; i++) {
        snprintf(s, sizeof s, "\n### %s\n", conf_names[i]);
        ck_assert_msg(strstr(doc, s) != NULL, "docs/config.md has no section '### %s'",
                      conf_names[i]);
        snprintf(s, sizeof s, "\n| [`%s`](#%s) |", conf_names[i], conf_names[i]);
        ck_assert_msg(strstr(doc, s) != NULL,
                      "docs/config.md's 'Keys at a glance' has no row for %s", conf_names[i]);
    }
    free(doc);
}
END_TEST

/* The parser knows every key of the list: an empty value is a bad value
 * of that key, not an unknown key. */
START_TEST(test_every_key_is_parsed)
{
    char text[128], err[512];
    for (size_t i = 0; i < sizeof conf_names / sizeof conf_names[0]; i++) {
        xseg_conf c;
        xseg_conf_defaults(&c);
        snprintf(text, sizeof text, "%s:", conf_names[i]);
        ck_assert_int_eq(xseg_conf_parse(&c, text, err, sizeof err), XSEG_ERR_CONFIG);
        ck_assert_msg(strstr(err, "bad value") != NULL, "key %s: %s", conf_names[i], err);
    }
}
END_TEST

static Suite *lists_suite(void)
{
    Suite *s = suite_create("lists");
    TCase *t = tcase_create("lists");
    tcase_add_test(t, test_stats_doc_names_every_field);
    tcase_add_test(t, test_json_has_every_field);
    tcase_add_test(t, test_prometheus_has_every_family);
    tcase_add_test(t, test_prometheus_render_has_every_family);
    tcase_add_test(t, test_stats_doc_names_every_tag_field);
    tcase_add_test(t, test_json_has_every_tag_key);
    tcase_add_test(t, test_prometheus_has_every_tag_family);
    tcase_add_test(t, test_prometheus_render_has_every_tag_family);
    tcase_add_test(t, test_config_doc_names_every_key);
    tcase_add_test(t, test_every_key_is_parsed);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    return t_run(lists_suite());
}
