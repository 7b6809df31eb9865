/* top.h: xseg-top's shared types: one sample of every allocator that
 * publishes live stats (stats_shm), read from the per-process files, with
 * the rows of its tags (tag 0 and the tags in use, once one is), and the
 * renderers (terminal table, JSON, Prometheus textfile). */
#ifndef XSEG_TOP_H
#define XSEG_TOP_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "shm_format.h"
#include "xseg.h"

typedef struct top_alloc {
    int pid;
    uint32_t slot;
    int busy;              /* every read met a write in progress: v is stale */
    uint64_t v[XSF_COUNT];
    xseg_tag_stats tags[XSEG_SHM_TAGS]; /* its tag rows in use, tag order */
    size_t ntags;
    unsigned tags_busy;    /* tag rows left out: every read met a write */
    /* filled by top_rates() when a previous sample of the same allocator
     * exists: per-second rates of alloc/free calls and driver calls */
    int has_rates;
    double alloc_rate, free_rate, oom_rate;
    double drv_rate[XSEG_SHM_OPS];
} top_alloc;

typedef struct top_proc {
    int pid;
    char comm[64];
    uint64_t start_ticks;
    uint64_t created_ns;
    uint32_t dropped;      /* allocators of this process not published */
    size_t first, count;   /* its allocators in top_sample.a */
} top_proc;

typedef struct top_sample {
    double mono_s;         /* CLOCK_MONOTONIC when taken */
    uint64_t real_ns;      /* CLOCK_REALTIME when taken */
    top_proc *p;
    size_t np, pcap;
    top_alloc *a;
    size_t na, acap;
    unsigned stale_removed;/* files of dead processes removed by this scan */
    unsigned unreadable;   /* files skipped: unknown version, no permission */
} top_sample;

typedef struct top_opts {
    const char *dir;
    int clean;             /* remove files of dead processes */
} top_opts;

/* scan.c: read every xseg.<pid> file of opts->dir into s (cleared first).
 * Returns 0, or -1 with errno when the directory cannot be read. */
int top_scan(const top_opts *opts, top_sample *s);
void top_sample_free(top_sample *s);
/* Fill the rates of s's allocators from an earlier sample (may be NULL). */
void top_rates(top_sample *s, const top_sample *prev);

/* Human-readable size: "12.3G", "512K", "0". */
const char *top_size(uint64_t bytes, char *buf, size_t len);
/* Backend name stored in XSF_BACKEND. */
const char *top_backend(const top_alloc *a, char buf[9]);
/* A tag row's name, or its id when the record does not name it. */
const char *top_tag_name(const xseg_tag_stats *t, char buf[XSEG_TAG_NAME_MAX + 1]);
/* mapped / live, 0 when nothing is live. */
double top_frag(const top_alloc *a);
uint64_t top_cached(const top_alloc *a);

/* render_text.c / render_json.c / render_prom.c */
void top_render_text(FILE *out, const top_sample *s, const top_opts *o);
void top_render_json(FILE *out, const top_sample *s, const top_opts *o);
/* The library's Prometheus text (xseg_stats_prometheus_render) for every
 * allocator, plus xseg_top_processes; 0, or -1 with the reason on stderr. */
int top_render_prom(FILE *out, const top_sample *s);

#endif
