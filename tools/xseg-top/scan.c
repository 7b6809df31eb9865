/* scan.c: one sample of every allocator publishing live stats: lists the
 * xseg.<pid> files of the directory, recognises (and removes) files of dead
 * processes, and copies each used record with the lock-free seqlock reader.
 * Also the small value helpers the renderers share. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "top.h"

#define READ_TRIES 20000 /* bounded: at most ~20 ms on a record written without pause */

static double mono_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t real_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* "xseg.<pid>" or "xseg.<pid>.tmp": the pid, else 0. */
static int name_pid(const char *name, int *tmp)
{
    size_t plen = strlen(XSEG_SHM_PREFIX);
    if (strncmp(name, XSEG_SHM_PREFIX, plen) != 0)
        return 0;
    char *end = NULL;
    long pid = strtol(name + plen, &end, 10);
    if (end == name + plen || pid <= 0 || pid > INT32_MAX)
        return 0;
    *tmp = strcmp(end, ".tmp") == 0;
    return (*end == '\0' || *tmp) ? (int)pid : 0;
}

/* A process is gone when kill() says so, when it is a zombie, or when its
 * pid now names a process that started at another time (pid reuse). */
static int proc_dead(int pid, uint64_t start_ticks)
{
    if (kill(pid, 0) != 0 && errno == ESRCH)
        return 1;
    char state = 0;
    uint64_t now = xseg_shm_start_ticks(pid, &state);
    if (state == 'Z' || state == 'X')
        return 1;
    return start_ticks && now && now != start_ticks;
}

static void *grow(void *p, size_t *cap, size_t need, size_t size)
{
    if (need <= *cap)
        return p;
    size_t c = *cap ? *cap * 2 : 16;
    while (c < need)
        c *= 2;
    void *q = realloc(p, c * size);
    if (q)
        *cap = c;
    return q;
}

static int add_records(top_sample *s, void *base, const xseg_shm_header *h)
{
    for (uint32_t i = 0; i < h->nslots; i++) {
        top_alloc a = {.pid = h->pid, .slot = i};
        int rc = xseg_shm_read(xseg_shm_slot(base, h, i), a.v, READ_TRIES);
        if (rc == 0)
            continue;
        a.busy = rc < 0;
        a.ntags = xseg_shm_read_tags(xseg_shm_slot(base, h, i), a.tags, READ_TRIES, &a.tags_busy);
        top_alloc *n = grow(s->a, &s->acap, s->na + 1, sizeof *n);
        if (!n)
            return -1;
        s->a = n;
        s->a[s->na++] = a;
    }
    return 0;
}

static int add_proc(top_sample *s, void *base)
{
    const xseg_shm_header *h = base;
    top_proc *n = grow(s->p, &s->pcap, s->np + 1, sizeof *n);
    if (!n)
        return -1;
    s->p = n;
    top_proc *p = &s->p[s->np];
    memset(p, 0, sizeof *p);
    p->pid = h->pid;
    memcpy(p->comm, h->comm, sizeof p->comm - 1);
    p->start_ticks = h->start_ticks;
    p->created_ns = h->created_ns;
    p->dropped = atomic_load(&((xseg_shm_header *)base)->dropped);
    p->first = s->na;
    if (add_records(s, base, h) != 0)
        return -1;
    p->count = s->na - p->first;
    s->np++;
    return 0;
}

/* Map one file; a dead owner's file is removed instead (if opts->clean). */
static void read_file(const top_opts *o, top_sample *s, const char *name, int pid, int tmp)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", o->dir, name);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    struct stat st;
    void *base = MAP_FAILED;
    if (fd >= 0 && fstat(fd, &st) == 0 && st.st_size > 0)
        base = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    if (fd >= 0)
        close(fd);
    int valid = base != MAP_FAILED && xseg_shm_valid(base, (size_t)st.st_size) &&
                ((const xseg_shm_header *)base)->pid == pid;
    uint64_t start = valid ? ((const xseg_shm_header *)base)->start_ticks : 0;
    if (proc_dead(pid, start)) {
        if (o->clean && unlink(path) == 0)
            s->stale_removed++;
    } else if (valid && !tmp) {
        add_proc(s, base);
    } else if (!tmp) {
        s->unreadable++;
    }
    if (base != MAP_FAILED)
        munmap(base, (size_t)st.st_size);
}

static int by_pid(const void *a, const void *b)
{
    const top_proc *x = a, *y = b;
    return (x->pid > y->pid) - (x->pid < y->pid);
}

/* Processes sorted by pid, each with its allocators (kept contiguous). */
static void sort_procs(top_sample *s)
{
    if (s->np > 1) /* qsort(NULL, 0, ...) is undefined */
        qsort(s->p, s->np, sizeof *s->p, by_pid);
    top_alloc *a = malloc((s->na ? s->na : 1) * sizeof *a);
    if (!a)
        return;
    size_t k = 0;
    for (size_t i = 0; i < s->np; i++) {
        memcpy(&a[k], &s->a[s->p[i].first], s->p[i].count * sizeof *a);
        s->p[i].first = k;
        k += s->p[i].count;
    }
    free(s->a);
    s->a = a;
    s->acap = s->na ? s->na : 1;
}

int top_scan(const top_opts *o, top_sample *s)
{
    s->np = s->na = 0;
    s->stale_removed = s->unreadable = 0;
    s->mono_s = mono_now();
    s->real_ns = real_now();
    DIR *d = opendir(o->dir);
    if (!d)
        return -1;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        int tmp = 0, pid = name_pid(e->d_name, &tmp);
        if (pid)
            read_file(o, s, e->d_name, pid, tmp);
    }
    closedir(d);
    sort_procs(s);
    return 0;
}

void top_sample_free(top_sample *s)
{
    free(s->p);
    free(s->a);
    memset(s, 0, sizeof *s);
}

static const top_alloc *find_prev(const top_sample *prev, const top_alloc *a)
{
    for (size_t i = 0; prev && i < prev->na; i++) {
        const top_alloc *b = &prev->a[i];
        if (b->pid == a->pid && b->slot == a->slot && b->v[XSF_GENERATION] == a->v[XSF_GENERATION])
            return b;
    }
    return NULL;
}

static double rate(uint64_t now, uint64_t then, double dt)
{
    return now >= then ? (double)(now - then) / dt : 0.0;
}

void top_rates(top_sample *s, const top_sample *prev)
{
    double dt = prev ? s->mono_s - prev->mono_s : 0;
    for (size_t i = 0; i < s->na; i++) {
        top_alloc *a = &s->a[i];
        const top_alloc *b = dt > 0 ? find_prev(prev, a) : NULL;
        a->has_rates = b != NULL && !a->busy && !b->busy;
        if (!a->has_rates)
            continue;
        a->alloc_rate = rate(a->v[XSF_ALLOC_CALLS], b->v[XSF_ALLOC_CALLS], dt);
        a->free_rate = rate(a->v[XSF_FREE_CALLS], b->v[XSF_FREE_CALLS], dt);
        a->oom_rate = rate(a->v[XSF_OOMS], b->v[XSF_OOMS], dt);
        for (unsigned k = 0; k < XSEG_SHM_OPS; k++)
            a->drv_rate[k] = rate(a->v[XSF_DRV + k], b->v[XSF_DRV + k], dt);
    }
}

/* ---- value helpers ---- */

const char *top_size(uint64_t v, char *buf, size_t len)
{
    static const char unit[] = "KMGTPE";
    double d = (double)v;
    int u = -1;
    while (d >= 1024.0 && u < 5) {
        d /= 1024.0;
        u++;
    }
    if (u < 0)
        snprintf(buf, len, "%llu", (unsigned long long)v);
    else
        snprintf(buf, len, d < 10 ? "%.2f%c" : d < 100 ? "%.1f%c" : "%.0f%c", d, unit[u]);
    return buf;
}

const char *top_backend(const top_alloc *a, char buf[9])
{
    memcpy(buf, &a->v[XSF_BACKEND], 8);
    buf[8] = '\0';
    return buf;
}

const char *top_tag_name(const xseg_tag_stats *t, char buf[XSEG_TAG_NAME_MAX + 1])
{
    if (t->name[0])
        snprintf(buf, XSEG_TAG_NAME_MAX + 1, "%.*s", XSEG_TAG_NAME_MAX, t->name);
    else
        snprintf(buf, XSEG_TAG_NAME_MAX + 1, "%d", t->tag);
    return buf;
}

uint64_t top_cached(const top_alloc *a)
{
    return a->v[XSF_MAPPED] > a->v[XSF_ALLOCATED] ? a->v[XSF_MAPPED] - a->v[XSF_ALLOCATED] : 0;
}

double top_frag(const top_alloc *a)
{
    return a->v[XSF_ALLOCATED] ? (double)a->v[XSF_MAPPED] / (double)a->v[XSF_ALLOCATED] : 0.0;
}
