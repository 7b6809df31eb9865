/* test_check.c: xseg_check can fail.  Each test builds a small state,
 * checks that xseg_check passes, breaks one invariant by hand (through
 * internal.h), checks that xseg_check reports exactly that invariant with
 * XSEG_ERR_INTERNAL (naming the block where there is one), puts the state
 * back and checks that it passes again. */
#include <stdio.h>
#include <string.h>

#include "bitmap.h"
#include "internal.h"
#include "support_common.h"

#define S1 ((void *)(uintptr_t)0x11)
#define S2 ((void *)(uintptr_t)0x22)

/* No thread caches: requested bytes are checked, no block is held.  1 GB:
 * within valgrind's address space. */
static xseg_t *fresh(void)
{
    return t_host("thread_cache:off,host_capacity:1GB");
}

/* xseg_check fails naming `inv` (and the block at `addr`, if not 0). */
static void broken(xseg_t *xs, const char *inv, uintptr_t addr)
{
    char want[96];
    ck_assert_int_eq(xseg_check(xs), XSEG_ERR_INTERNAL);
    const char *m = xseg_last_error();
    ck_assert_msg(strstr(m, inv) != NULL, "expected \"%s\", got: %s", inv, m);
    snprintf(want, sizeof want, "at block %#lx (", (unsigned long)addr);
    if (addr)
        ck_assert_msg(strstr(m, want) != NULL, "expected \"%s\", got: %s", want, m);
}

static xblock *block_at(xseg_t *xs, void *p)
{
    for (xblock *b = xs->first_block; b; b = b->anext)
        if (b->addr == (uintptr_t)p)
            return b;
    ck_abort_msg("no block at %p", p);
    return NULL;
}

/* Two large blocks on two streams, freed: cached, in the LRU, and a
 * neutral rest after them. */
static xblock *two_cached(xseg_t *xs, xblock **second)
{
    void *a, *b;
    ck_assert_int_eq(xseg_alloc(xs, 4 * MiB, S1, &a), XSEG_OK);
    ck_assert_int_eq(xseg_alloc(xs, 4 * MiB, S2, &b), XSEG_OK);
    ck_assert_int_eq(xseg_free(xs, a), XSEG_OK);
    ck_assert_int_eq(xseg_free(xs, b), XSEG_OK);
    t_check_ok(xs);
    *second = block_at(xs, b);
    return block_at(xs, a);
}

START_TEST(block_list_contiguous)
{
    xseg_t *xs = fresh();
    xblock *b2, *b1 = two_cached(xs, &b2);
    b1->size += 512;
    broken(xs, "block list contiguous", b1->addr);
    b1->size -= 512;
    t_check_ok(xs);
    b2->anext->aprev = b1;
    broken(xs, "block list contiguous", b2->addr);
    b2->anext->aprev = b2;
    t_check_ok(xs);
    xseg_destroy(xs);
}
END_TEST

START_TEST(free_blocks_indexed)
{
    xseg_t *xs = fresh();
    xblock *b2, *b1 = two_cached(xs, &b2);
    xfi_remove(&b1->owner->idx, b1); /* still XB_FREE */
    broken(xs, "free blocks are indexed", b1->addr);
    xfi_insert(&b1->owner->idx, b1);
    t_check_ok(xs);
    b1->owner->idx.bytes += 512;
    broken(xs, "free index counts", 0);
    b1->owner->idx.bytes -= 512;
    t_check_ok(xs);
    xseg_destroy(xs);
}
END_TEST

START_TEST(bucket_matches_size)
{
    xseg_t *xs = fresh();
    xblock *b2, *b1 = two_cached(xs, &b2);
    xfreeidx *f = &b1->owner->idx;
    xfi_remove(f, b1);
    b1->size /= 2;
    xfi_insert(f, b1); /* in the bucket of half its size */
    f->bytes += b1->size;
    b1->size *= 2;
    broken(xs, "bucket matches size", b1->addr);
    b1->size /= 2;
    f->bytes -= b1->size;
    xfi_remove(f, b1);
    b1->size *= 2;
    xfi_insert(f, b1);
    t_check_ok(xs);
    xseg_destroy(xs);
}
END_TEST

START_TEST(free_block_in_owners_index)
{
    xseg_t *xs = fresh();
    xblock *b2, *b1 = two_cached(xs, &b2);
    xfi_remove(&b1->owner->idx, b1);
    xfi_insert(&b2->owner->idx, b1);
    broken(xs, "free block in its owner's index", b1->addr);
    xfi_remove(&b2->owner->idx, b1);
    xfi_insert(&b1->owner->idx, b1);
    t_check_ok(xs);
    xseg_destroy(xs);
}
END_TEST

START_TEST(free_neighbours_merged)
{
    xseg_t *xs = fresh();
    xblock *b2, *b1 = two_cached(xs, &b2);
    ck_assert_ptr_eq(b1->anext, b2);
    xstream *o = b2->owner;
    b2->owner = b1->owner;
    broken(xs, "free neighbours of one owner are merged", b1->addr);
    b2->owner = o;
    t_check_ok(xs);
    xseg_destroy(xs);
}
END_TEST

START_TEST(neutral_epoch_zero)
{
    xseg_t *xs = fresh();
    xblock *b2, *b1 = two_cached(xs, &b2);
    xblock *n = b2->anext; /* the neutral rest of the arena */
    ck_assert(n && (n->flags & XB_FREE) && !n->owner);
    n->epoch = 3;
    broken(xs, "neutral free blocks carry epoch 0", n->addr);
    n->epoch = 0;
    t_check_ok(xs);
    b1->epoch = b1->owner->epoch + 1;
    broken(xs, "free epochs not ahead of their stream", b1->addr);
    b1->epoch = 0;
    t_check_ok(xs);
    xseg_destroy(xs);
}
END_TEST

START_TEST(lru_flags)
{
    xseg_t *xs = fresh();
    xblock *b2, *b1 = two_cached(xs, &b2);
    ck_assert(b1->flags & XB_LRU);
    b1->flags &= ~(uint32_t)XB_LRU;
    broken(xs, "LRU holds listed XB_LRU blocks once", b1->addr);
    b1->flags |= XB_LRU;
    t_check_ok(xs);
    xblock *n = b2->anext;
    ck_assert(!(n->flags & XB_LRU));
    n->flags |= XB_LRU; /* flagged, not on the list */
    broken(xs, "XB_LRU blocks are in the LRU", 0);
    n->flags &= ~(uint32_t)XB_LRU;
    t_check_ok(xs);
    xseg_destroy(xs);
}
END_TEST

START_TEST(live_blocks_and_counters)
{
    xseg_t *xs = fresh();
    void *p;
    ck_assert_int_eq(xseg_alloc(xs, 3 * MiB, S1, &p), XSEG_OK);
    t_check_ok(xs);
    xblock *b = block_at(xs, p);
    uintptr_t tag = 0;
    ck_assert(xseg_ptrmap_del(&xs->live, (uintptr_t)p, &tag));
    broken(xs, "blocks in use are live or pending", b->addr);
    ck_assert_int_eq(xseg_ptrmap_put(&xs->live, (uintptr_t)p, tag), 0);
    t_check_ok(xs);
    xs->allocated.cur += 512;
    broken(xs, "allocated bytes and active blocks sum the live allocations", 0);
    xs->allocated.cur -= 512;
    xs->active.cur++;
    broken(xs, "allocated bytes and active blocks sum the live allocations", 0);
    xs->active.cur--;
    xs->requested.cur++;
    broken(xs, "requested bytes sum the live requests", 0);
    xs->requested.cur--;
    xs->arena_used += 512;
    broken(xs, "arena_used sums the blocks in use", 0);
    xs->arena_used -= 512;
    t_check_ok(xs);
    ck_assert_int_eq(xseg_free(xs, p), XSEG_OK);
    t_check_ok(xs);
    xseg_destroy(xs);
}
END_TEST

START_TEST(generations_and_held_bits)
{
    xseg_t *xs = fresh();
    void *p;
    ck_assert_int_eq(xseg_alloc(xs, 3 * MiB, S1, &p), XSEG_OK);
    xblock *b = block_at(xs, p);
    uint64_t g = atomic_load(&b->gen);
    atomic_store(&b->gen, g | 1); /* held, with no thread cache */
    broken(xs, "held bits only with thread caches", b->addr);
    atomic_store(&b->gen, 0);
    broken(xs, "live allocations carry a generation", b->addr);
    atomic_store(&b->gen, g);
    t_check_ok(xs);
    xblock *n = b->anext; /* free */
    atomic_store(&n->gen, 2);
    broken(xs, "only live blocks carry a generation", n->addr);
    atomic_store(&n->gen, 0);
    t_check_ok(xs);
    ck_assert_int_eq(xseg_free(xs, p), XSEG_OK);
    xseg_destroy(xs);
}
END_TEST

START_TEST(slab_counts)
{
    xseg_t *xs = fresh();
    void *p[3];
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(xseg_alloc(xs, 1000, S1, &p[i]), XSEG_OK);
    uintptr_t tag = 0;
    ck_assert(xseg_ptrmap_get(&xs->live, (uintptr_t)p[0], &tag) && (tag & 1));
    xslab *sl = (xslab *)(tag & ~(uintptr_t)1);
    t_check_ok(xs);
    sl->nfree--;
    broken(xs, "slab free counts match their free lists", sl->blk->addr);
    sl->nfree++;
    t_check_ok(xs);
    uint32_t head = sl->free_head;
    sl->free_head = 0; /* a used slot on the free list */
    broken(xs, "free slots carry no request or generation", sl->blk->addr);
    sl->free_head = head;
    t_check_ok(xs);
    sl->listed = 0;
    broken(xs, "slabs with free slots are listed", sl->blk->addr);
    sl->listed = 1;
    t_check_ok(xs);
    xlist *pl = &sl->owner->partial[sl->cls];
    xlist_node *last = pl->last;
    pl->last = NULL; /* the list's end pointer lost */
    broken(xs, "partial lists hold listed slabs of their stream and class", 0);
    pl->last = last;
    t_check_ok(xs);
    sl->is_kept = 1; /* a slab in use marked kept */
    broken(xs, "kept slabs are the empty ones", sl->blk->addr);
    sl->is_kept = 0;
    t_check_ok(xs);
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(xseg_free(xs, p[i]), XSEG_OK);
    t_check_ok(xs); /* the slab, now empty, is the kept one */
    ck_assert(sl->is_kept);
    sl->is_kept = 0; /* an empty slab nobody keeps: no drop would find it */
    broken(xs, "kept slabs are the empty ones", sl->blk->addr);
    sl->is_kept = 1;
    t_check_ok(xs);
    xseg_destroy(xs);
}
END_TEST

START_TEST(pages_and_handles)
{
    xseg_t *xs = fresh();
    void *p;
    ck_assert_int_eq(xseg_alloc(xs, 3 * MiB, S1, &p), XSEG_OK);
    xblock *b = block_at(xs, p);
    xarena *ar = &xs->arena;
    size_t pg = (b->addr - ar->base) >> ar->shift, far = ar->npages - 1;
    t_check_ok(xs);
    xbm_set(ar->mapped_bits, pg, pg + 1, 0);
    broken(xs, "pages under blocks in use are mapped", b->addr);
    xbm_set(ar->mapped_bits, pg, pg + 1, 1);
    t_check_ok(xs);
    ar->page_handle[far] = ar->page_handle[pg];
    broken(xs, "unmapped pages have no handle", 0);
    ar->page_handle[far] = 0;
    t_check_ok(xs);
    xbm_set(ar->mapped_bits, far, far + 1, 1);
    broken(xs, "mapped pages start handles", 0);
    xbm_set(ar->mapped_bits, far, far + 1, 0);
    xs->mapped.cur += ar->page;
    broken(xs, "mapped bytes match the page bitmap", 0);
    xs->mapped.cur -= ar->page;
    xs->handles.cur++;
    broken(xs, "handles counted", 0);
    xs->handles.cur--;
    t_check_ok(xs);
    ck_assert_int_eq(xseg_free(xs, p), XSEG_OK);
    xseg_destroy(xs);
}
END_TEST

START_TEST(streams_and_moved)
{
    xseg_t *xs = fresh();
    void *p;
    ck_assert_int_eq(xseg_alloc(xs, 3 * MiB, S1, &p), XSEG_OK);
    t_check_ok(xs);
    xs->ngone++;
    broken(xs, "gone streams counted", 0);
    xs->ngone--;
    xs->unmapping_bytes += 512;
    broken(xs, "moved blocks counted", 0);
    xs->unmapping_bytes -= 512;
    t_check_ok(xs);
    ck_assert_int_eq(xseg_free(xs, p), XSEG_OK);
    ck_assert_int_eq(xseg_check(NULL), XSEG_ERR_INVALID_ARG);
    xseg_destroy(xs);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("check");
    TCase *tc = tcase_create("violations");
    tcase_add_test(tc, block_list_contiguous);
    tcase_add_test(tc, free_blocks_indexed);
    tcase_add_test(tc, bucket_matches_size);
    tcase_add_test(tc, free_block_in_owners_index);
    tcase_add_test(tc, free_neighbours_merged);
    tcase_add_test(tc, neutral_epoch_zero);
    tcase_add_test(tc, lru_flags);
    tcase_add_test(tc, live_blocks_and_counters);
    tcase_add_test(tc, generations_and_held_bits);
    tcase_add_test(tc, slab_counts);
    tcase_add_test(tc, pages_and_handles);
    tcase_add_test(tc, streams_and_moved);
    suite_add_tcase(s, tc);
    return t_run(s);
}
