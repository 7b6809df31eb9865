/* tag_fields.h: the one list of the fields of struct xseg_tag_stats
 * (include/xseg.h), in the struct's order, with what each renderer needs:
 * the "tags" array of xseg_stats_json (tagstats.c), the Prometheus families
 * with a `tag` label (prom.c, for the library and xseg-top alike), the tag
 * rows of the stats_shm record (shm_format.h), and the checks: static
 * asserts below that the list and the struct agree field by field, and
 * tests/test_lists.c (docs/stats.md names every field, the JSON has every
 * key, the Prometheus text every family).  The companion of stats_fields.h,
 * which lists xseg_stats.
 *
 * Which tags are shown, everywhere: none while the allocator has no tag in
 * use but the default; once one has (xseg_tag_in_use), tag 0 (the memory
 * allocated without a tag, the parent allocator's own) and every tag in use.
 *
 * XSEG_TAG_FIELDS(X, P) expands X once per field:
 *   X(kind, field, json, row, proms)
 * kind:  U32      the size word (not rendered)
 *        I32      an int32_t
 *        NAME     char[XSEG_TAG_NAME_MAX]
 *        MODE     an int32_t xseg_sleep_mode: "discard" / "backup" in JSON
 *        COUNTER  an xseg_counter: current, peak, total
 *        GAUGE    a uint64_t that moves both ways
 *        MONO     a uint64_t counter that only grows
 * json:  its key in a "tags" entry (0: not rendered)
 * row:   the tag row field (XST_*, shm_format.h) of its first word; -1: none
 * proms: zero or more P(member, style, type, name, help): a Prometheus
 *        family, in list order after the families of stats_fields.h;
 *        `style` one (a uint64_t), i32 (an int32_t) or sec (nanoseconds
 *        shown in seconds).
 */
#ifndef XSEG_TAG_FIELDS_H
#define XSEG_TAG_FIELDS_H

#include <stddef.h>

#include "xseg.h"

/* clang-format off */
#define XSEG_TAG_FIELDS(X, P) \
X(U32, size, 0, -1, ) \
X(I32, tag, "id", XST_TAG, ) \
X(NAME, name, "name", XST_NAME, ) \
X(I32, asleep, "asleep", XST_ASLEEP, \
  P(asleep, i32, gauge, "xseg_tag_asleep", \
    "1 while the tag's memory is asleep (xseg_sleep), else 0.")) \
X(MODE, mode, "mode", XST_MODE, ) \
X(COUNTER, live_bytes, "live_bytes", XST_LIVE, \
  P(live_bytes.current, one, gauge, "xseg_tag_live_bytes", \
    "Bytes of the tag's live allocations (rounded block sizes).") \
  P(live_bytes.peak, one, gauge, "xseg_tag_live_peak_bytes", \
    "Highest xseg_tag_live_bytes since creation or the last peak reset.")) \
X(COUNTER, mapped_bytes, "mapped_bytes", XST_MAPPED, \
  P(mapped_bytes.current, one, gauge, "xseg_tag_mapped_bytes", \
    "Physical device memory mapped for the tag, live and cached.") \
  P(mapped_bytes.peak, one, gauge, "xseg_tag_mapped_peak_bytes", \
    "Highest xseg_tag_mapped_bytes since creation or the last peak reset.")) \
X(GAUGE, sleeping_bytes, "sleeping_bytes", XST_SLEEPING, \
  P(sleeping_bytes, one, gauge, "xseg_tag_sleeping_bytes", \
    "Bytes of the tag's live blocks whose memory is given back while it sleeps.")) \
X(GAUGE, backup_bytes, "backup_bytes", XST_BACKUP, \
  P(backup_bytes, one, gauge, "xseg_tag_backup_bytes", \
    "Pinned host bytes holding the contents of a tag asleep in backup mode.")) \
X(MONO, sleeps, "sleeps", XST_SLEEPS, \
  P(sleeps, one, counter, "xseg_tag_sleeps_total", "Times the tag was put to sleep.")) \
X(MONO, wakes, "wakes", XST_WAKES, \
  P(wakes, one, counter, "xseg_tag_wakes_total", "Times the tag was woken.")) \
X(GAUGE, last_sleep_ns, "last_sleep_ns", XST_LAST_SLEEP_NS, \
  P(last_sleep_ns, sec, gauge, "xseg_tag_last_sleep_seconds", \
    "Duration of the tag's last xseg_sleep.")) \
X(GAUGE, last_wake_ns, "last_wake_ns", XST_LAST_WAKE_NS, \
  P(last_wake_ns, sec, gauge, "xseg_tag_last_wake_seconds", \
    "Duration of the tag's last xseg_wake."))
/* clang-format on */

#define XSEG_TF_NOTHING(...)
#define XSEG_TF_ONE(...) +1
#define XSEG_TF_PROMS_(kind, f, json, row, proms) proms

/* Number of uint64_t words of a kind in a tag row (U32: none). */
#define XSEG_TF_WORDS_U32 0
#define XSEG_TF_WORDS_I32 1
#define XSEG_TF_WORDS_NAME (XSEG_TAG_NAME_MAX / 8)
#define XSEG_TF_WORDS_MODE 1
#define XSEG_TF_WORDS_COUNTER 3
#define XSEG_TF_WORDS_GAUGE 1
#define XSEG_TF_WORDS_MONO 1

enum {
    XSEG_TAG_NFIELDS = 0 XSEG_TAG_FIELDS(XSEG_TF_ONE, XSEG_TF_NOTHING),
    XSEG_TAG_NFAMILIES = 0 XSEG_TAG_FIELDS(XSEG_TF_PROMS_, XSEG_TF_ONE)
};
_Static_assert(XSEG_TAG_NAME_MAX % 8 == 0, "a tag name fills whole row words");

/* ---- the list and the struct agree, field by field -------------------- */

#define XSEG_TF_TYPEDEF(kind, f, ...) typedef XSEG_TF_ARR_##kind(xseg_tf_t_##f);
#define XSEG_TF_ARR_U32(n) uint32_t n
#define XSEG_TF_ARR_I32(n) int32_t n
#define XSEG_TF_ARR_NAME(n) char n[XSEG_TAG_NAME_MAX]
#define XSEG_TF_ARR_MODE(n) int32_t n
#define XSEG_TF_ARR_COUNTER(n) xseg_counter n
#define XSEG_TF_ARR_GAUGE(n) uint64_t n
#define XSEG_TF_ARR_MONO(n) uint64_t n
XSEG_TAG_FIELDS(XSEG_TF_TYPEDEF, XSEG_TF_NOTHING)
#define XSEG_TF_MEMBER(kind, f, ...) xseg_tf_t_##f f;
typedef struct xseg_tag_stats_listed {
    XSEG_TAG_FIELDS(XSEG_TF_MEMBER, XSEG_TF_NOTHING)
} xseg_tag_stats_listed;
#define XSEG_TF_ASSERT(kind, f, ...)                                                          \
    _Static_assert(offsetof(xseg_tag_stats_listed, f) == offsetof(xseg_tag_stats, f) &&       \
                       sizeof(((xseg_tag_stats_listed *)0)->f) ==                            \
                           sizeof(((xseg_tag_stats *)0)->f),                                 \
                   "tag_fields.h: " #f " is not where xseg_tag_stats has it");
XSEG_TAG_FIELDS(XSEG_TF_ASSERT, XSEG_TF_NOTHING)
_Static_assert(sizeof(xseg_tag_stats_listed) == sizeof(xseg_tag_stats),
               "tag_fields.h: a field of xseg_tag_stats is missing from the list");

/* ---- which tags are shown ---------------------------------------------- */

/* A tag other than 0 is in use once it has held memory or slept. */
static inline int xseg_tag_in_use(const xseg_tag_stats *s)
{
    return s->tag != 0 && (s->live_bytes.total || s->mapped_bytes.total || s->sleeps ||
                           s->asleep);
}

/* Keep in t[0..n) (in order) tag 0 and the tags in use, or nothing when no
 * tag but 0 is in use; returns how many are kept. */
static inline size_t xseg_tags_shown(xseg_tag_stats *t, size_t n)
{
    size_t k = 0, used = 0;
    for (size_t i = 0; i < n; i++)
        used += xseg_tag_in_use(&t[i]);
    for (size_t i = 0; used && i < n; i++)
        if (t[i].tag == 0 || xseg_tag_in_use(&t[i]))
            t[k++] = t[i];
    return k;
}

/* ---- the renderers (a tag's stats come from xseg_tag_stats_get) -------- */
struct xseg;
struct xtb;
/* tagstats.c: the tags shown of xs's family into out, tag order; the count. */
size_t xtags_collect(struct xseg *xs, xseg_tag_stats out[XSEG_MAX_TAGS]);
/* tagstats.c: `,"tags":[{...},...]` (nothing when n is 0). */
void xtags_json(struct xtb *j, const xseg_tag_stats *t, size_t n);
/* tagstats.c: the text of xseg_stats_json: st (the family's stats) and the
 * family's tags shown; returns the length needed (no NUL). */
size_t xtags_stats_json(struct xseg *xs, const xseg_stats *st, char *buf, size_t cap);
/* shm.c: name tag `tag` in the tag rows of stats_shm (tag 0 is "default";
 * shm.c cannot ask tags.c, a layer above it: tags.c's registration is to
 * call this; a row whose name is unknown is shown by its id). */
void xseg_shm_tag_name(int tag, const char *name);
/* prom.c: xseg_stats_prometheus_render with each source's tags (tags[i],
 * ntags[i]; both NULL: none) in the tag families. */
xseg_status xseg_prom_render_tags(const xseg_prom_source *src, const xseg_tag_stats *const *tags,
                                  const size_t *ntags, size_t n, char *buf, size_t cap,
                                  size_t *len);

#endif
