/* slack.c: the slack governor (release_slack_max).  release_threshold:auto
 * keeps mapped at most the budget (the peak of live bytes) plus
 * release_slack of it; what is over is given back, or moved, when growth
 * needs room.  A workload whose live bytes swing below their peak and back
 * pays for that on every swing: pages given back or moved away are mapped
 * again a moment later, a driver call on the caller's thread each (a ring
 * of 64 tensors of mixed sizes ran 4x slower than PyTorch's cache on an
 * H100, docs/benchmarks.md).  The governor watches windows of as many
 * allocated bytes as the budget.  A window churns when the budget rose by
 * less than XSLACK_GROWTH_DIV of it (a steady state) and its allocations
 * that were no new peak mapped more than XSLACK_TOLERANCE_DIV of it.  When
 * XSLACK_NEED of the last XSLACK_SEEN windows churned (a steady churn, not
 * one burst), the cache may keep half of what the window mapped again
 * more, up to release_slack_max of the budget in all.  A grant the cache
 * fills stays; after XSLACK_QUIET quiet windows that left its top eighth
 * unused, that eighth goes; a trim drops it.  Memory is so traded for
 * driver calls only where they recur (docs/config.md, release_slack_max:
 * the trade measured trace by trace; docs/design.md: why it is safe). */
#include "internal.h"

/* A window may map again this share of the budget and not churn. */
#define XSLACK_TOLERANCE_DIV 16
/* A window whose budget grew by this share or more does not churn. */
#define XSLACK_GROWTH_DIV 64
/* A raise needs XSLACK_NEED churning windows of the last XSLACK_SEEN. */
#define XSLACK_SEEN 4
#define XSLACK_NEED 3
/* Quiet windows with the grant's top eighth unused before that eighth goes. */
#define XSLACK_QUIET 8

/* The most the governor may grant now (0: it is off). */
static size_t grant_max(const xseg_t *xs, size_t budget)
{
    double span = xs->conf.release_slack_max - xs->conf.release_slack;
    if (span <= 0 || xs->conf.release_threshold != XSEG_SIZE_AUTO)
        return 0;
    return (size_t)((double)budget * span);
}

/* Is the top eighth of the grant unused (mapped below the release
 * threshold, which counts the grant, by that much)?  A grant the cache
 * fills is what keeps a steady state quiet: it stays; the cache gives
 * memory back only when growth needs room. */
static int unused(const xseg_t *xs, size_t have)
{
    return xs->mapped.cur + have / 8 <= xblk_release_limit(xs);
}

static void window_end(xseg_t *xs, size_t budget)
{
    size_t max = grant_max(xs, budget), have = xs->gov.extra < max ? xs->gov.extra : max;
    /* growth maps pages whatever the cache keeps: only a window whose
     * budget rose by less than XSLACK_GROWTH_DIV of it (a steady state,
     * but for a slab's or a block's rounding) can churn */
    int churn = xs->gov.remap > budget / XSLACK_TOLERANCE_DIV &&
                budget - xs->gov.start < budget / XSLACK_GROWTH_DIV;
    xs->gov.start = budget;
    xs->gov.hist = (xs->gov.hist << 1 | (uint32_t)churn) & ((1u << XSLACK_SEEN) - 1);
    if (churn && __builtin_popcount(xs->gov.hist) >= XSLACK_NEED) {
        size_t add = xs->gov.remap / 2;
        have = add > max - have ? max : have + add;
        xs->gov.quiet = 0;
    } else if (!churn && have && unused(xs, have) && ++xs->gov.quiet >= XSLACK_QUIET) {
        have -= have / 8 + (have < 8);
        xs->gov.quiet = 0;
    }
    xs->gov.extra = have;
    xs->gov.alloc = 0;
    xs->gov.remap = 0;
}

/* An allocation of `bytes` (what it mapped again is in gov.remap already:
 * alloc.c ensure_mapped). */
void xslack_note(xseg_t *xs, size_t bytes)
{
    xs->gov.alloc += bytes;
    size_t budget = xseg_budget(xs);
    if (budget && xs->gov.alloc >= budget)
        window_end(xs, budget);
}

/* A trim gives memory back on purpose: the grant goes with it. */
void xslack_reset(xseg_t *xs)
{
    xs->gov.extra = 0;
    xs->gov.alloc = 0;
    xs->gov.remap = 0;
    xs->gov.quiet = 0;
    xs->gov.hist = 0;
    xs->gov.start = 0;
}
