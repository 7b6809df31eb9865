/* test_trace.c: the xseg-trace v1 reader (tools/trace): good traces, plain
 * and gzip'd through every reader; every kind of malformed input giving a
 * format error that names the right line; id remapping to dense slots;
 * random mutations never crashing; and the replay engine with verify on the
 * host backend. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "support_common.h"

#ifdef XSEG_HAVE_TRACE
#include "replay.h"
#include "replay_verify.h"
#include "trace.h"

/* ---- temporary files --------------------------------------------------- */

static char tmpdir[256];

/* Called from main, outside any test: no ck_assert here. */
static int make_tmpdir(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/xseg_test_trace.XXXXXX");
    if (mkdtemp(tmpdir))
        return 0;
    perror("test_trace: mkdtemp");
    return -1;
}

static void remove_tmpdir(void)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0)
        fprintf(stderr, "test_trace: could not remove %s\n", tmpdir);
}

static const char *tmp_path(const char *name)
{
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    return path;
}

static const char *write_plain(const char *name, const char *text, size_t len)
{
    const char *path = tmp_path(name);
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(text, 1, len, f), len);
    ck_assert_int_eq(fclose(f), 0);
    return path;
}

static int have_gzip(void)
{
    return system("gzip --version >/dev/null 2>&1") == 0;
}

static const char *write_gz(const char *name, const char *text, size_t len)
{
    const char *path = tmp_path(name);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "gzip -c > '%s'", path);
    FILE *p = popen(cmd, "w");
    ck_assert_ptr_nonnull(p);
    ck_assert_uint_eq(fwrite(text, 1, len, p), len);
    ck_assert_int_eq(pclose(p), 0);
    return path;
}

/* Cut a file to `keep` bytes. */
static void truncate_to(const char *path, off_t keep)
{
    ck_assert_int_eq(truncate(path, keep), 0);
}

static off_t file_size(const char *path)
{
    struct stat st;
    ck_assert_int_eq(stat(path, &st), 0);
    return st.st_size;
}

/* ---- helpers ----------------------------------------------------------- */

static xseg_trace *parse_ok(const char *text)
{
    xseg_trace *t = NULL;
    xseg_trace_error err;
    xseg_trace_status st = xseg_trace_parse(text, strlen(text), "mem", &t, &err);
    ck_assert_msg(st == XSEG_TRACE_OK, "parse failed: %s", err.message);
    ck_assert_ptr_nonnull(t);
    return t;
}

static void same_events(const xseg_trace *a, const xseg_trace *b)
{
    ck_assert_uint_eq(a->nevents, b->nevents);
    ck_assert_int_eq(memcmp(a->events, b->events, a->nevents * sizeof *a->events), 0);
    ck_assert_int_eq(memcmp(a->ids, b->ids, a->nevents * sizeof *a->ids), 0);
    ck_assert_uint_eq(a->peak_live_bytes, b->peak_live_bytes);
    ck_assert_uint_eq(a->nslots, b->nslots);
}

static const char good_text[] =
    "# xseg-trace v1: a,<id>,<bytes>,<stream> | f,<id>\n"
    "a,10,100,0\n"
    "a,20,200,0\n"
    "\n"
    "f,10\n"
    "# a comment\r\n"
    "a,30,50,7\r\n"
    "a,10,1000,0\n"
    "f,20\n"
    "a,9223372036854775807,1,18\n"
    "f,30";

/* ---- good traces --------------------------------------------------------- */

START_TEST(parse_good)
{
    xseg_trace *t = parse_ok(good_text);
    ck_assert_uint_eq(t->nevents, 8);
    ck_assert_uint_eq(t->nallocs, 5);
    ck_assert_uint_eq(t->nfrees, 3);
    ck_assert_uint_eq(t->live_at_end, 2);
    ck_assert_uint_eq(t->live_bytes_at_end, 1001);
    ck_assert_uint_eq(t->peak_live_bytes, 1250); /* 200 + 50 + 1000 */
    ck_assert_uint_eq(t->total_alloc_bytes, 1351);
    ck_assert_uint_eq(t->nlines, 11);
    ck_assert_uint_eq(t->nskipped, 3);
    ck_assert_uint_eq(t->nstreams, 3);
    ck_assert_uint_eq(t->streams[0], 0);
    ck_assert_uint_eq(t->streams[1], 7);
    ck_assert_uint_eq(t->streams[2], 18);
    ck_assert_uint_eq(xseg_trace_stream_of(t, &t->events[3]), 7);
    ck_assert_uint_eq(xseg_trace_line_of(t, 0), 2);
    ck_assert_uint_eq(xseg_trace_line_of(t, 2), 5);
    ck_assert_uint_eq(xseg_trace_line_of(t, 3), 7);
    ck_assert_uint_eq(xseg_trace_line_of(t, 7), 11);
    ck_assert_uint_eq(xseg_trace_line_of(t, 8), 0);
    ck_assert_uint_eq(t->ids[6], 9223372036854775807ULL);
    ck_assert_str_eq(t->name, "mem");
    xseg_trace_free(t);
}
END_TEST

START_TEST(id_remap)
{
    xseg_trace *t = parse_ok(good_text);
    const xseg_trace_event *e = t->events;
    ck_assert_uint_eq(t->nslots, 3); /* at most 3 live at once */
    /* a,10 -> 0; a,20 -> 1; f,10 frees 0; a,30 reuses 0; a,10 -> 2 */
    ck_assert_uint_eq(e[0].slot, 0);
    ck_assert_uint_eq(e[1].slot, 1);
    ck_assert_uint_eq(e[2].op, XSEG_TRACE_FREE);
    ck_assert_uint_eq(e[2].slot, 0);
    ck_assert_uint_eq(e[2].bytes, 100); /* a free carries its block's size */
    ck_assert_uint_eq(e[3].slot, 0);
    ck_assert_uint_eq(e[3].stream, 1);
    ck_assert_uint_eq(e[4].slot, 2);
    ck_assert_uint_eq(e[5].slot, 1); /* f,20 */
    ck_assert_uint_eq(e[5].bytes, 200);
    ck_assert_uint_eq(e[6].slot, 1); /* the huge id reuses slot 1 */
    ck_assert_uint_eq(e[7].slot, 0); /* f,30 */
    ck_assert_uint_eq(e[7].stream, 1);
    ck_assert_uint_eq(e[7].bytes, 50);
    for (size_t i = 0; i < t->nevents; i++)
        ck_assert_uint_lt(e[i].slot, t->nslots);
    xseg_trace_free(t);
}
END_TEST

START_TEST(empty_and_comment_only)
{
    xseg_trace *t = parse_ok("");
    ck_assert_uint_eq(t->nevents, 0);
    ck_assert_uint_eq(t->nslots, 0);
    xseg_trace_free(t);
    t = parse_ok("# xseg-trace v1\n# nothing\n\n");
    ck_assert_uint_eq(t->nevents, 0);
    ck_assert_uint_eq(t->nlines, 3);
    xseg_trace_free(t);
}
END_TEST

/* A trace of n allocations on 3 streams, freed with a lag, as text. */
static char *synthetic(size_t n, size_t *len)
{
    size_t cap = n * 64 + 64, o = 0;
    char *s = malloc(cap);
    ck_assert_ptr_nonnull(s);
    o += (size_t)snprintf(s + o, cap - o, "# xseg-trace v1 synthetic\n");
    for (size_t i = 0; i < n; i++) {
        o += (size_t)snprintf(s + o, cap - o, "a,%zu,%zu,%zu\n", i * 7 + 3,
                              (i * 2654435761u) % 100000 + 1, i % 3);
        if (i >= 5)
            o += (size_t)snprintf(s + o, cap - o, "f,%zu\n", (i - 5) * 7 + 3);
    }
    *len = o;
    return s;
}

START_TEST(files_all_readers)
{
    size_t len;
    char *text = synthetic(150000, &len); /* > 1 MiB: lines cross chunks */
    xseg_trace *mem = NULL, *t = NULL;
    xseg_trace_error err;
    ck_assert_int_eq(xseg_trace_parse(text, len, "mem", &mem, &err), XSEG_TRACE_OK);
    ck_assert_uint_eq(mem->nevents, 150000 + 149995);
    ck_assert_uint_eq(mem->nslots, 6);
    const char *plain = write_plain("synthetic.csv", text, len);
    ck_assert_int_eq(xseg_trace_load(plain, &t, &err), XSEG_TRACE_OK);
    ck_assert_str_eq(t->name, plain);
    same_events(mem, t);
    xseg_trace_free(t);
    ck_assert_int_eq(xseg_trace_load_with(plain, XSEG_TRACE_READ_GZIP_CMD, &t, &err),
                     XSEG_TRACE_OK);
    same_events(mem, t);
    xseg_trace_free(t);
    if (have_gzip()) {
        const char *gz = write_gz("synthetic.csv.gz", text, len);
        ck_assert_msg(xseg_trace_load(gz, &t, &err) == XSEG_TRACE_OK, "%s", err.message);
        same_events(mem, t);
        xseg_trace_free(t);
        ck_assert_msg(xseg_trace_load_with(gz, XSEG_TRACE_READ_GZIP_CMD, &t, &err) ==
                      XSEG_TRACE_OK, "%s", err.message);
        same_events(mem, t);
        xseg_trace_free(t);
    }
    xseg_trace_free(mem);
    free(text);
}
END_TEST

START_TEST(long_comment_skipped)
{
    size_t n = (3u << 20) + 100;
    char *text = malloc(n + 64);
    memset(text, 'x', n);
    text[0] = '#';
    strcpy(text + n, "\na,1,5,0\nf,1\n");
    xseg_trace *t = NULL;
    xseg_trace_error err;
    const char *path = write_plain("long_comment.csv", text, strlen(text));
    ck_assert_msg(xseg_trace_load(path, &t, &err) == XSEG_TRACE_OK, "%s", err.message);
    ck_assert_uint_eq(t->nevents, 2);
    ck_assert_uint_eq(xseg_trace_line_of(t, 0), 2);
    xseg_trace_free(t);
    free(text);
}
END_TEST

/* ---- malformed input ----------------------------------------------------- */

typedef struct bad_case {
    const char *text;
    size_t len;        /* 0: strlen */
    uint64_t line;
    const char *what;  /* expected in the message */
} bad_case;

static const bad_case bad_cases[] = {
    { "a,1,100,0\nx,1\n", 0, 2, "unknown op 'x'" },
    { "alloc,1,100,0\n", 0, 1, "unknown op 'alloc'" },
    { " a,1,100,0\n", 0, 1, "unknown op ' a'" },
    { "a,1,100\n", 0, 1, "missing stream field" },
    { "a,1\n", 0, 1, "missing bytes field" },
    { "# c\nf\n", 0, 2, "missing id field" },
    { "a,1,100,0,9\n", 0, 1, "too many fields" },
    { "a,1,100,0\nf,1,100\n", 0, 2, "too many fields" },
    { "a,x,100,0\n", 0, 1, "non-numeric id 'x'" },
    { "a,1,1e6,0\n", 0, 1, "non-numeric bytes '1e6'" },
    { "a,1,100, 0\n", 0, 1, "non-numeric stream ' 0'" },
    { "a,1,+5,0\n", 0, 1, "non-numeric bytes '+5'" },
    { "a,,100,0\n", 0, 1, "empty id field" },
    { "a,1,-100,0\n", 0, 1, "negative bytes '-100'" },
    { "f,-1\n", 0, 1, "negative id '-1'" },
    { "a,1,100,18446744073709551616\n", 0, 1, "stream '18446744073709551616' overflows" },
    { "a,99999999999999999999999,1,0\n", 0, 1, "overflows 64 bits" },
    { "a,9223372036854775808,1,0\n", 0, 1, "id 9223372036854775808 is too large" },
    { "a,1,18446744073709551615,0\n", 0, 1, "bytes 18446744073709551615 is too large" },
    { "a,1,0,0\n", 0, 1, "zero bytes" },
    { "a,1,100,0\nf,2\n", 0, 2, "free of unknown id 2 (never allocated)" },
    { "a,1,100,0\nf,1\n\nf,1\n", 0, 4, "free of id 1 that is not live (already freed at line 2)" },
    { "a,1,100,0\n# c\na,1,5,0\n", 0, 3, "alloc of id 1 that is already live (allocated at line 1)" },
    { "a,1,1\0000,0\n", 10, 1, "embedded NUL byte at column 6" },
    { "a,1,10,0\n# c\0omment\n", 20, 2, "embedded NUL" },
    { "# xseg-trace v2\na,1,5,0\n", 0, 1, "unsupported trace format version" },
    /* what xseg-record's own parser let through (issue 19, defect 8) */
    { "a,1,100,0junk\n", 0, 1, "non-numeric stream '0junk'" },
    { "a,1,100,0\nf,1 x\n", 0, 2, "non-numeric id '1 x'" },
    { "a,1,100kB,0\n", 0, 1, "non-numeric bytes '100kB'" },
    { "a,+1,100,0\n", 0, 1, "non-numeric id '+1'" },
    { "a,1,100,-0\n", 0, 1, "negative stream '-0'" },
    { "a,18446744073709551615,100,0\n", 0, 1, "id 18446744073709551615 is too large" },
    { "a,1,5,0\nf,18446744073709551615\n", 0, 2, "id 18446744073709551615 is too large" },
    { "a,1,100,0\0junk\nf,1\n", 19, 1, "embedded NUL byte at column 10" },
    { "a,9223372036854775807,9223372036854775807,0\na,2,9223372036854775807,0\n"
      "a,3,9223372036854775807,0\n", 0, 3, "live bytes overflow" },
};

START_TEST(malformed)
{
    const bad_case *c = &bad_cases[_i];
    size_t len = c->len ? c->len : strlen(c->text);
    xseg_trace *t = (xseg_trace *)1;
    xseg_trace_error err;
    xseg_trace_status st = xseg_trace_parse(c->text, len, "bad.csv", &t, &err);
    ck_assert_int_eq(st, XSEG_TRACE_ERR_FORMAT);
    ck_assert_ptr_null(t);
    ck_assert_int_eq(err.status, XSEG_TRACE_ERR_FORMAT);
    ck_assert_uint_eq(err.line, c->line);
    ck_assert_msg(strstr(err.message, c->what), "case %d: '%s' lacks '%s'", _i, err.message,
                  c->what);
    char where[64];
    snprintf(where, sizeof where, "bad.csv:%llu: ", (unsigned long long)c->line);
    ck_assert_msg(strncmp(err.message, where, strlen(where)) == 0, "'%s'", err.message);
    ck_assert_msg(strchr(err.message, '"'), "no line content in '%s'", err.message);
}
END_TEST

START_TEST(line_too_long)
{
    char *text = malloc(10000);
    strcpy(text, "a,1,5,0\na,2,");
    memset(text + strlen(text), '7', 8000);
    strcpy(text + 12 + 8000, ",0\n");
    xseg_trace *t = NULL;
    xseg_trace_error err;
    ck_assert_int_eq(xseg_trace_parse(text, strlen(text), "long", &t, &err),
                     XSEG_TRACE_ERR_FORMAT);
    ck_assert_uint_eq(err.line, 2);
    ck_assert_ptr_nonnull(strstr(err.message, "line too long"));
    free(text);
}
END_TEST

/* Line numbers stay right whatever the buffer holds: the reader starts with
 * a buffer sized to the input and doubles it, so lines (short, 4096 bytes,
 * long comments) fall across every kind of boundary.  The bad line is at a
 * known number, read from memory and from a file. */
static char *boundary_text(int pad, size_t *len, uint64_t *bad_line)
{
    size_t cap = 400000, n = 0;
    uint64_t line = 0;
    char *t = malloc(cap);
    ck_assert_ptr_nonnull(t);
    for (int i = 0; i < pad; i++, line++)
        n += (size_t)sprintf(t + n, "#%*s\n", i * 37 % 300, "");
    for (int i = 1; n < 250000; i++) {
        if (i % 50 == 0) { /* a 6000-byte comment: one line */
            t[n++] = '#';
            memset(t + n, 'c', 6000);
            n += 6000;
            t[n++] = '\n';
            line++;
        } else if (i % 77 == 0) { /* exactly XSEG_TRACE_MAX_LINE bytes */
            int k = sprintf(t + n, "a,%d,", 1000000 + i);
            memset(t + n + k, '0', XSEG_TRACE_MAX_LINE - k - 3);
            memcpy(t + n + XSEG_TRACE_MAX_LINE - 3, "1,0\n", 4);
            n += XSEG_TRACE_MAX_LINE + 1;
            n += (size_t)sprintf(t + n, "f,%d\n", 1000000 + i);
            line += 2;
        } else {
            n += (size_t)sprintf(t + n, "a,%d,%d,%d\nf,%d\n", i, i * 13 + 1, i % 3, i);
            line += 2;
        }
    }
    n += (size_t)sprintf(t + n, "f,77777777\na,1,5,0\n");
    *bad_line = line + 1;
    *len = n;
    return t;
}

START_TEST(line_numbers_across_buffers)
{
    size_t len;
    uint64_t want;
    char *text = boundary_text(_i * 7, &len, &want);
    xseg_trace *t = NULL;
    xseg_trace_error err;
    ck_assert_int_eq(xseg_trace_parse(text, len, "mem", &t, &err), XSEG_TRACE_ERR_FORMAT);
    ck_assert_msg(err.line == want, "memory: line %llu, want %llu: %s",
                  (unsigned long long)err.line, (unsigned long long)want, err.message);
    ck_assert_ptr_nonnull(strstr(err.message, "free of unknown id 77777777"));
    const char *path = write_plain("boundary.csv", text, len);
    ck_assert_int_eq(xseg_trace_load(path, &t, &err), XSEG_TRACE_ERR_FORMAT);
    ck_assert_msg(err.line == want, "file: line %llu, want %llu: %s",
                  (unsigned long long)err.line, (unsigned long long)want, err.message);
    /* without the bad line it loads, with every line counted */
    len -= strlen("f,77777777\na,1,5,0\n");
    ck_assert_msg(xseg_trace_load(write_plain("boundary.csv", text, len), &t, &err) ==
                  XSEG_TRACE_OK, "%s", err.message);
    ck_assert_uint_eq(t->nlines, want - 1);
    ck_assert_uint_eq(t->nevents + t->nskipped, want - 1);
    xseg_trace_free(t);
    free(text);
}
END_TEST

/* Tiny inputs: every prefix of a short trace parses or fails cleanly. */
START_TEST(tiny_inputs)
{
    static const char text[] = "# c\na,1,100,0\na,2,7,1\nf,1\nf,2\n";
    for (size_t n = 0; n <= sizeof text - 1; n++) {
        xseg_trace *t = NULL;
        xseg_trace_error err;
        xseg_trace_status st = xseg_trace_parse(text, n, "tiny", &t, &err);
        if (st == XSEG_TRACE_OK) {
            ck_assert_ptr_nonnull(t);
            xseg_trace_free(t);
        } else {
            ck_assert_int_eq(st, XSEG_TRACE_ERR_FORMAT);
            ck_assert_uint_ge(err.line, 1);
        }
    }
    xseg_trace *t = NULL;
    xseg_trace_error err;
    ck_assert_int_eq(xseg_trace_parse(text, sizeof text - 1, "tiny", &t, &err), XSEG_TRACE_OK);
    ck_assert_uint_eq(t->nevents, 4);
    ck_assert_uint_eq(t->nstreams, 2);
    ck_assert_uint_eq(xseg_trace_line_of(t, 3), 5);
    xseg_trace_free(t);
}
END_TEST

START_TEST(io_errors)
{
    xseg_trace *t = NULL;
    xseg_trace_error err;
    ck_assert_int_eq(xseg_trace_load(tmp_path("absent.csv.gz"), &t, &err), XSEG_TRACE_ERR_IO);
    ck_assert_ptr_null(t);
    ck_assert_ptr_nonnull(strstr(err.message, "absent.csv.gz"));
    ck_assert_ptr_nonnull(strstr(err.message, "No such file"));
    ck_assert_int_eq(xseg_trace_load_with(tmpdir, XSEG_TRACE_READ_GZIP_CMD, &t, &err),
                     XSEG_TRACE_ERR_IO);
    ck_assert_ptr_nonnull(strstr(err.message, "directory"));
    ck_assert_int_eq(xseg_trace_load(NULL, &t, &err), XSEG_TRACE_ERR_INVALID_ARG);
    ck_assert_int_eq(xseg_trace_load("x", NULL, &err), XSEG_TRACE_ERR_INVALID_ARG);
    ck_assert_int_eq(xseg_trace_parse(NULL, 5, "x", &t, NULL), XSEG_TRACE_ERR_INVALID_ARG);
    ck_assert_int_eq(xseg_trace_load_with("x", (xseg_trace_reader)99, &t, &err),
                     XSEG_TRACE_ERR_INVALID_ARG);
    if (!xseg_trace_have_zlib())
        ck_assert_int_eq(xseg_trace_load_with("x", XSEG_TRACE_READ_ZLIB, &t, &err),
                         XSEG_TRACE_ERR_INVALID_ARG);
}
END_TEST

static void expect_io_error(const char *path, xseg_trace_reader reader)
{
    xseg_trace *t = (xseg_trace *)1;
    xseg_trace_error err;
    ck_assert_int_eq(xseg_trace_load_with(path, reader, &t, &err), XSEG_TRACE_ERR_IO);
    ck_assert_ptr_null(t);
    ck_assert_msg(strstr(err.message, "gzip"), "'%s'", err.message);
}

START_TEST(bad_gzip)
{
    if (!have_gzip())
        return;
    size_t len;
    char *text = synthetic(20000, &len);
    const char *path = write_gz("cut.csv.gz", text, len);
    truncate_to(path, file_size(path) / 2);
    expect_io_error(path, XSEG_TRACE_READ_AUTO);
    expect_io_error(path, XSEG_TRACE_READ_GZIP_CMD);
    path = write_plain("corrupt.csv.gz", "\x1f\x8b\x08\x00garbage-not-deflate-data", 28);
    expect_io_error(path, XSEG_TRACE_READ_AUTO);
    expect_io_error(path, XSEG_TRACE_READ_GZIP_CMD);
    free(text);
}
END_TEST

/* Random mutations of a good trace: OK or a format error naming a line,
 * never a crash; a trace that loads is consistent. */
static void check_consistent(const xseg_trace *t)
{
    size_t allocs = 0;
    for (size_t i = 0; i < t->nevents; i++) {
        ck_assert_uint_lt(t->events[i].slot, t->nslots);
        ck_assert_uint_lt(t->events[i].stream, t->nstreams);
        ck_assert_uint_gt(t->events[i].bytes, 0);
        allocs += t->events[i].op == XSEG_TRACE_ALLOC;
    }
    ck_assert_uint_eq(allocs, t->nallocs);
    ck_assert_uint_eq(t->nallocs - t->nfrees, t->live_at_end);
}

static void mutate(char *s, size_t len, unsigned *seed)
{
    static const char alphabet[] = "af#,0123456789-\n\r\0x ";
    int edits = 1 + rand_r(seed) % 4;
    for (int k = 0; k < edits; k++)
        s[rand_r(seed) % len] = alphabet[rand_r(seed) % (sizeof alphabet - 1)];
}

START_TEST(fuzz)
{
    size_t len;
    char *text = synthetic(60, &len), *copy = malloc(len);
    unsigned seed = 12345;
    int ok = 0;
    for (int round = 0; round < 4000; round++) {
        xseg_trace *t = NULL;
        xseg_trace_error err;
        memcpy(copy, text, len);
        mutate(copy, len, &seed);
        xseg_trace_status st = xseg_trace_parse(copy, len, "fuzz", &t, &err);
        if (st == XSEG_TRACE_OK) {
            check_consistent(t);
            xseg_trace_free(t);
            ok++;
            continue;
        }
        ck_assert_int_eq(st, XSEG_TRACE_ERR_FORMAT);
        ck_assert_uint_ge(err.line, 1);
        ck_assert_str_ne(err.message, "");
    }
    ck_assert_int_gt(ok, 0);
    free(copy);
    free(text);
}
END_TEST

/* ---- replay -------------------------------------------------------------- */

/* Sizes from 1 byte to 5 MiB (the verify pattern covers every MiB), three
 * streams, blocks freed out of order, two left live at the end. */
static const char replay_text[] =
    "# xseg-trace v1 replay test\n"
    "a,1,1,0\n"
    "a,2,100,1\n"
    "a,3,4096,2\n"
    "a,4,5242880,0\n"
    "a,5,2097153,1\n"
    "f,2\n"
    "a,6,777,0\n"
    "f,4\n"
    "a,2,3000000,2\n"
    "f,1\n"
    "f,5\n"
    "a,7,65,0\n"
    "f,3\n"
    "f,2\n";

static xseg_replay_result *replay(const xseg_trace *t, const char *extra, int verify,
                                  int free_at_end, xseg_t **keep)
{
    xseg_t *xs = t_host(extra);
    xseg_replay_opts o = { .verify = verify, .free_at_end = free_at_end };
    xseg_replay_result *r = calloc(1, sizeof *r);
    ck_assert_ptr_nonnull(r);
    xseg_replay_run(xs, t, &o, r);
    if (keep)
        *keep = xs;
    else
        xseg_destroy(xs);
    return r;
}

START_TEST(replay_verify_host)
{
    xseg_trace *t = parse_ok(replay_text);
    xseg_t *xs;
    xseg_replay_result *r = replay(t, NULL, 1, 1, &xs);
    ck_assert_msg(r->status == XSEG_OK, "%s", r->error_message);
    ck_assert_int_eq(r->corrupted, 0);
    ck_assert_uint_eq(r->events, t->nevents);
    ck_assert_uint_eq(r->verified_blocks, t->nallocs);
    ck_assert_uint_eq(r->freed_at_end, 2);
    ck_assert_uint_eq(r->ooms, 0);
    ck_assert_uint_eq(r->peak_live_bytes, t->peak_live_bytes);
    ck_assert_uint_ge(r->peak_mapped_bytes, r->peak_live_bytes);
    ck_assert_double_eq_tol(r->frag_ratio,
                            (double)r->peak_mapped_bytes / (double)r->peak_live_bytes, 1e-12);
    ck_assert_uint_ge(r->maps, 1);
    ck_assert_uint_eq(r->maps, r->driver_calls[XSEG_OP_MAP]);
    ck_assert_uint_eq(r->unmaps, r->driver_calls[XSEG_OP_UNMAP]);
    ck_assert_double_eq_tol(r->map_unmap_per_1000,
                            (double)(r->maps + r->unmaps) * 1000.0 / (double)r->events, 1e-9);
    ck_assert_uint_eq(t_stats(xs).allocated_bytes.current, 0);
    ck_assert_str_eq(xseg_backend_name(xs), "host");
    xseg_destroy(xs);
    free(r);
    xseg_trace_free(t);
}
END_TEST

START_TEST(replay_keeps_live)
{
    xseg_trace *t = parse_ok(replay_text);
    xseg_t *xs;
    xseg_replay_result *r = replay(t, NULL, 0, 0, &xs);
    ck_assert_msg(r->status == XSEG_OK, "%s", r->error_message);
    ck_assert_uint_eq(r->freed_at_end, 0);
    ck_assert_uint_eq(r->verified_blocks, 0);
    xseg_stats s = t_stats(xs);
    ck_assert_uint_eq(s.requested_bytes.current, t->live_bytes_at_end);
    ck_assert_uint_eq(s.active_blocks.current, t->live_at_end);
    xseg_destroy(xs);
    free(r);
    xseg_trace_free(t);
}
END_TEST

/* The second half's figures: a repeating pattern, served from the cache
 * once the first half mapped it, makes no driver call there; growth in the
 * second half is counted there, and only there. */
START_TEST(replay_second_half)
{
    xseg_trace *t = parse_ok("a,1,8388608,0\nf,1\na,2,8388608,0\nf,2\n"
                             "a,3,8388608,0\nf,3\na,4,8388608,0\nf,4\n");
    xseg_replay_result *r = replay(t, NULL, 0, 1, NULL);
    ck_assert_msg(r->status == XSEG_OK, "%s", r->error_message);
    ck_assert_uint_eq(r->half_event, 4);
    ck_assert_uint_ge(r->driver_calls[XSEG_OP_MAP], 1);
    for (int op = 0; op < XSEG_OP_COUNT; op++)
        ck_assert_msg(r->second_half_calls[op] == 0, "%s: %llu in the second half",
                      xseg_op_name((xseg_op)op), (unsigned long long)r->second_half_calls[op]);
    ck_assert_uint_eq(r->second_half_caller_ns, 0);
    free(r);
    xseg_trace_free(t);

    t = parse_ok("a,1,2097152,0\nf,1\na,2,67108864,0\nf,2\n");
    r = replay(t, NULL, 0, 1, NULL);
    ck_assert_msg(r->status == XSEG_OK, "%s", r->error_message);
    ck_assert_uint_eq(r->half_event, 2);
    uint64_t c2 = r->second_half_calls[XSEG_OP_CREATE], m2 = r->second_half_calls[XSEG_OP_MAP];
    ck_assert_uint_ge(c2, 1);
    ck_assert_uint_ge(m2, 1);
    ck_assert_uint_lt(c2, r->driver_calls[XSEG_OP_CREATE]); /* the first half made one too */
    ck_assert_uint_lt(m2, r->driver_calls[XSEG_OP_MAP]);
    ck_assert_uint_gt(r->second_half_caller_ns, 0);
    free(r);
    xseg_trace_free(t);
}
END_TEST

START_TEST(replay_oom_goes_on)
{
    xseg_trace *t = parse_ok("a,1,1048576,0\n"
                             "a,2,1073741824,0\n" /* 1 GiB: over the cap */
                             "a,3,4096,0\n"
                             "f,2\n"
                             "f,1\n");
    xseg_replay_result *r = replay(t, "max_mapped:64MB", 1, 1, NULL);
    ck_assert_msg(r->status == XSEG_ERR_OOM, "status %d: %s", r->status, r->error_message);
    ck_assert_uint_eq(r->ooms, 1);
    ck_assert_uint_eq(r->events, t->nevents); /* went on after the OOM */
    ck_assert_uint_eq(r->error_event, 1);
    ck_assert_uint_eq(r->error_line, 2);
    ck_assert_ptr_nonnull(strstr(r->error_message, "line 2"));
    ck_assert_uint_eq(r->verified_blocks, 2);
    ck_assert_uint_eq(r->freed_at_end, 1);
    free(r);
    xseg_trace_free(t);
}
END_TEST

START_TEST(replay_bad_args)
{
    xseg_replay_result r;
    xseg_trace *t = parse_ok("a,1,5,0\n");
    ck_assert_int_eq(xseg_replay_run(NULL, t, NULL, &r), XSEG_ERR_INVALID_ARG);
    ck_assert_int_eq(r.status, XSEG_ERR_INVALID_ARG);
    ck_assert_int_eq(xseg_replay_run(NULL, t, NULL, NULL), XSEG_ERR_INVALID_ARG);
    xseg_trace_free(t);
}
END_TEST

/* The pattern itself: intact blocks pass, any changed byte is found. */
START_TEST(verify_pattern)
{
    size_t n = 3 * MiB + 123;
    unsigned char *p = calloc(1, n);
    replay_mismatch m;
    for (size_t small = 1; small < 300; small++) {
        replay_verify_write(p, small, small * 31);
        ck_assert_int_eq(replay_verify_check(p, small, small * 31, NULL), 0);
    }
    replay_verify_write(p, n, 42);
    ck_assert_int_eq(replay_verify_check(p, n, 42, &m), 0);
    ck_assert_int_ne(replay_verify_check(p, n, 43, &m), 0); /* another id */
    ck_assert_uint_lt(m.offset, 64);
    const size_t spots[] = { 0, 63, MiB + 5, 2 * MiB + 63, n - 64, n - 1 };
    for (size_t k = 0; k < sizeof spots / sizeof *spots; k++) {
        p[spots[k]] ^= 0x40;
        ck_assert_int_ne(replay_verify_check(p, n, 42, &m), 0);
        ck_assert_uint_eq(m.offset, spots[k]);
        ck_assert_uint_eq(m.found ^ m.expected, 0x40);
        p[spots[k]] ^= 0x40;
    }
    free(p);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("trace");
    TCase *parse = tcase_create("parse");
    TCase *bad = tcase_create("malformed");
    TCase *run = tcase_create("replay");
    if (make_tmpdir() != 0)
        return 1;
    tcase_set_timeout(parse, 120);
    tcase_add_test(parse, parse_good);
    tcase_add_test(parse, id_remap);
    tcase_add_test(parse, empty_and_comment_only);
    tcase_add_test(parse, files_all_readers);
    tcase_add_test(parse, long_comment_skipped);
    tcase_add_loop_test(bad, malformed, 0, (int)(sizeof bad_cases / sizeof *bad_cases));
    tcase_add_test(bad, line_too_long);
    tcase_add_loop_test(bad, line_numbers_across_buffers, 0, 6);
    tcase_add_test(bad, tiny_inputs);
    tcase_add_test(bad, io_errors);
    tcase_add_test(bad, bad_gzip);
    tcase_add_test(bad, fuzz);
    tcase_set_timeout(run, 120);
    tcase_add_test(run, replay_verify_host);
    tcase_add_test(run, replay_keeps_live);
    tcase_add_test(run, replay_second_half);
    tcase_add_test(run, replay_oom_goes_on);
    tcase_add_test(run, replay_bad_args);
    tcase_add_test(run, verify_pattern);
    suite_add_tcase(s, parse);
    suite_add_tcase(s, bad);
    suite_add_tcase(s, run);
    int rc = t_run(s);
    remove_tmpdir();
    return rc;
}
#else
int main(void)
{
    printf("test_trace: built without the trace reader (tools disabled): skipped\n");
    return 77;
}
#endif
