/* trace_source.c: the byte sources the trace reader pulls text from: zlib
 * (gzip or plain, transparently), a `gzip -dc` pipe when zlib is absent or
 * asked for, a plain file, or memory.  Each reports a truncated or corrupt
 * gzip stream as an error rather than as a short file. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include "trace_internal.h"
#ifdef XSEG_TRACE_HAVE_ZLIB
#include <zlib.h>
#endif

#define READ_MAX ((size_t)1 << 30)

int xseg_trace_have_zlib(void)
{
#ifdef XSEG_TRACE_HAVE_ZLIB
    return 1;
#else
    return 0;
#endif
}

/* ---- memory --------------------------------------------------------- */

static long mem_read(trace_source *s, char *buf, size_t n)
{
    size_t left = s->mem_len - s->mem_pos;
    if (n > left)
        n = left;
    memcpy(buf, s->mem + s->mem_pos, n);
    s->mem_pos += n;
    return (long)n;
}

static void no_close(trace_source *s)
{
    (void)s;
}

void trace_source_memory(trace_source *s, const char *text, size_t len)
{
    memset(s, 0, sizeof *s);
    s->mem = text;
    s->mem_len = text ? len : 0;
    s->read = mem_read;
    s->close = no_close;
}

/* ---- zlib ----------------------------------------------------------- */

#ifdef XSEG_TRACE_HAVE_ZLIB
static long zlib_read(trace_source *s, char *buf, size_t n)
{
    int errnum, got = gzread(s->handle, buf, (unsigned)(n > READ_MAX ? READ_MAX : n));
    const char *m;
    if (got > 0)
        return got;
    m = gzerror(s->handle, &errnum);
    if (m && s->path && strncmp(m, s->path, strlen(s->path)) == 0 &&
        strncmp(m + strlen(s->path), ": ", 2) == 0)
        m += strlen(s->path) + 2; /* zlib puts the path first */
    if (got == 0 && errnum == Z_OK)
        return 0;
    if (errnum == Z_BUF_ERROR)
        snprintf(s->msg, sizeof s->msg, "truncated gzip data (unexpected end of file)");
    else if (errnum == Z_ERRNO)
        snprintf(s->msg, sizeof s->msg, "read error: %s", strerror(errno));
    else
        snprintf(s->msg, sizeof s->msg, "corrupt gzip data: %s", m ? m : "unknown error");
    return -1;
}

static void zlib_close(trace_source *s)
{
    gzclose(s->handle);
}

static int zlib_open(trace_source *s, const char *path)
{
    gzFile g = gzopen(path, "rbe");
    if (!g)
        return snprintf(s->msg, sizeof s->msg, "cannot open: %s",
                        errno ? strerror(errno) : "out of memory"), -1;
    gzbuffer(g, 1u << 18);
    s->handle = g;
    s->path = path;
    s->read = zlib_read;
    s->close = zlib_close;
    return 0;
}
#endif

/* ---- plain file ------------------------------------------------------ */

static long file_read(trace_source *s, char *buf, size_t n)
{
    size_t got = fread(buf, 1, n, s->handle);
    if (got > 0)
        return (long)got;
    if (ferror((FILE *)s->handle))
        return snprintf(s->msg, sizeof s->msg, "read error: %s", strerror(errno)), -1;
    return 0;
}

static void file_close(trace_source *s)
{
    fclose(s->handle);
}

/* ---- gzip -dc pipe ---------------------------------------------------- */

static int pipe_status(trace_source *s)
{
    int st = pclose(s->handle);
    s->pipe_done = 1;
    if (st == -1)
        return snprintf(s->msg, sizeof s->msg, "gzip -dc: %s", strerror(errno)), -1;
    if (WIFEXITED(st) && (WEXITSTATUS(st) == 0 || WEXITSTATUS(st) == 2))
        return 0; /* 2: a warning only, e.g. trailing garbage ignored */
    if (WIFEXITED(st) && WEXITSTATUS(st) == 127)
        return snprintf(s->msg, sizeof s->msg,
                        "gzip not found (needed to read gzip files without zlib)"), -1;
    if (WIFEXITED(st))
        return snprintf(s->msg, sizeof s->msg,
                        "gzip -dc failed (exit %d): truncated or corrupt gzip data",
                        WEXITSTATUS(st)), -1;
    return snprintf(s->msg, sizeof s->msg, "gzip -dc killed by signal %d",
                    WIFSIGNALED(st) ? WTERMSIG(st) : 0), -1;
}

static long pipe_read(trace_source *s, char *buf, size_t n)
{
    long got;
    if (s->pipe_done)
        return 0;
    got = file_read(s, buf, n);
    if (got != 0)
        return got;
    return pipe_status(s);
}

static void pipe_close(trace_source *s)
{
    if (!s->pipe_done)
        pclose(s->handle);
}

/* "exec gzip -dc -- 'path' 2>/dev/null", the path single-quoted. */
static char *gzip_command(const char *path)
{
    static const char head[] = "exec gzip -dc -- '", tail[] = "' 2>/dev/null";
    size_t n = sizeof head + sizeof tail + strlen(path) * 4;
    char *cmd = malloc(n), *o;
    if (!cmd)
        return NULL;
    o = stpcpy(cmd, head);
    for (const char *p = path; *p; p++)
        o = *p == '\'' ? stpcpy(o, "'\\''") : (*o = *p, o + 1);
    stpcpy(o, tail);
    return cmd;
}

static int pipe_open(trace_source *s, const char *path)
{
    char *cmd = gzip_command(path);
    FILE *f = cmd ? popen(cmd, "re") : NULL;
    int e = errno;
    free(cmd);
    if (!f)
        return snprintf(s->msg, sizeof s->msg, "cannot run gzip -dc: %s",
                        strerror(cmd ? e : ENOMEM)), -1;
    s->handle = f;
    s->read = pipe_read;
    s->close = pipe_close;
    return 0;
}

static int is_gzip(FILE *f)
{
    unsigned char m[2];
    size_t got = fread(m, 1, 2, f);
    rewind(f);
    return got == 2 && m[0] == 0x1f && m[1] == 0x8b;
}

static int cmd_open(trace_source *s, const char *path)
{
    FILE *f = fopen(path, "rbe");
    if (!f)
        return snprintf(s->msg, sizeof s->msg, "cannot open: %s", strerror(errno)), -1;
    if (is_gzip(f)) {
        fclose(f);
        return pipe_open(s, path);
    }
    s->handle = f;
    s->read = file_read;
    s->close = file_close;
    return 0;
}

/* ---- open ------------------------------------------------------------ */

static int check_path(trace_source *s, const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return snprintf(s->msg, sizeof s->msg, "cannot open: %s", strerror(errno)), -1;
    if (S_ISDIR(st.st_mode))
        return snprintf(s->msg, sizeof s->msg, "cannot open: is a directory"), -1;
    return 0;
}

int trace_source_open(trace_source *s, const char *path, xseg_trace_reader reader,
                      xseg_trace_status *status)
{
    memset(s, 0, sizeof *s);
    *status = XSEG_TRACE_ERR_IO;
    if (reader == XSEG_TRACE_READ_AUTO)
        reader = xseg_trace_have_zlib() ? XSEG_TRACE_READ_ZLIB : XSEG_TRACE_READ_GZIP_CMD;
    if (reader != XSEG_TRACE_READ_GZIP_CMD &&
        (reader != XSEG_TRACE_READ_ZLIB || !xseg_trace_have_zlib())) {
        *status = XSEG_TRACE_ERR_INVALID_ARG;
        return snprintf(s->msg, sizeof s->msg, "reader %d not available", (int)reader), -1;
    }
    if (check_path(s, path) != 0)
        return -1;
#ifdef XSEG_TRACE_HAVE_ZLIB
    if (reader == XSEG_TRACE_READ_ZLIB)
        return zlib_open(s, path);
#endif
    return cmd_open(s, path);
}
