/* list.h: the library's one intrusive doubly-linked list.  A node is
 * embedded in its element; the list holds its first and last nodes and
 * ends in NULL both ways (no sentinel: a zeroed xlist is empty, a zeroed
 * node is unlinked).  All O(1) but iteration; header only. */
#ifndef XSEG_LIST_H
#define XSEG_LIST_H

#include <stddef.h>

typedef struct xlist_node {
    struct xlist_node *prev, *next;
} xlist_node;

typedef struct xlist {
    xlist_node *first, *last;
} xlist;

/* The element that holds `node` in its field `member`. */
#define XLIST_ENTRY(node, type, member) ((type *)((char *)(node) - offsetof(type, member)))

static inline void xlist_init(xlist *l)
{
    l->first = l->last = NULL;
}

static inline int xlist_empty(const xlist *l)
{
    return l->first == NULL;
}

static inline xlist_node *xlist_first(const xlist *l)
{
    return l->first;
}

static inline xlist_node *xlist_next(const xlist_node *n)
{
    return n->next;
}

static inline void xlist_push_front(xlist *l, xlist_node *n)
{
    n->prev = NULL;
    n->next = l->first;
    if (l->first)
        l->first->prev = n;
    else
        l->last = n;
    l->first = n;
}

static inline void xlist_push_back(xlist *l, xlist_node *n)
{
    n->next = NULL;
    n->prev = l->last;
    if (l->last)
        l->last->next = n;
    else
        l->first = n;
    l->last = n;
}

/* Put n where old stands in l (old's links are cleared). */
static inline void xlist_replace(xlist *l, xlist_node *old, xlist_node *n)
{
    n->prev = old->prev;
    n->next = old->next;
    if (n->prev)
        n->prev->next = n;
    else
        l->first = n;
    if (n->next)
        n->next->prev = n;
    else
        l->last = n;
    old->prev = old->next = NULL;
}

/* Move all of `front` (in its order) before the first node of l. */
static inline void xlist_splice_front(xlist *l, xlist *front)
{
    if (!front->first)
        return;
    front->last->next = l->first;
    if (l->first)
        l->first->prev = front->last;
    else
        l->last = front->last;
    l->first = front->first;
    front->first = front->last = NULL;
}

/* Unlink n (a member of l); its links are cleared. */
static inline void xlist_remove(xlist *l, xlist_node *n)
{
    if (n->prev)
        n->prev->next = n->next;
    else
        l->first = n->next;
    if (n->next)
        n->next->prev = n->prev;
    else
        l->last = n->prev;
    n->prev = n->next = NULL;
}

#endif
