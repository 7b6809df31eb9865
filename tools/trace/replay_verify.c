/* replay_verify.c: writes and checks the verify pattern of a block.  The
 * byte at offset o depends on the id and on o only, so the regions (head,
 * one per MiB, tail) may overlap in small blocks and still agree. */
#include <stddef.h>
#include <string.h>
#include "replay_verify.h"

#define REGION 64u
#define STRIDE ((uint64_t)1 << 20)

static uint64_t le64(uint64_t v)
{
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    return __builtin_bswap64(v);
#else
    return v;
#endif
}

static uint64_t seed_of(uint64_t id)
{
    uint64_t z = id + 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* The pattern word k covers bytes [8k, 8k + 8), little-endian. */
static uint64_t word_at(uint64_t seed, uint64_t k)
{
    return (seed + k) * 0x9e3779b97f4a7c15ULL;
}

static uint8_t byte_at(uint64_t seed, uint64_t o)
{
    return (uint8_t)(word_at(seed, o >> 3) >> (8 * (o & 7)));
}

/* Bytes one at a time: write (m == NULL) or check. */
static int bytes_op(uint8_t *p, uint64_t s, uint64_t e, uint64_t seed, replay_mismatch *m)
{
    for (uint64_t o = s; o < e; o++) {
        uint8_t want = byte_at(seed, o);
        if (!m)
            p[o] = want;
        else if (p[o] != want)
            return *m = (replay_mismatch){ o, want, p[o] }, -1;
    }
    return 0;
}

/* Whole little-endian words at 8-aligned offsets; a mismatching word is
 * rescanned byte by byte to name the first bad byte. */
static int words_op(uint8_t *p, uint64_t s, uint64_t e, uint64_t seed, replay_mismatch *m)
{
    for (uint64_t o = s; o < e; o += 8) {
        uint64_t want = le64(word_at(seed, o >> 3)), have;
        if (!m) {
            memcpy(p + o, &want, 8);
            continue;
        }
        memcpy(&have, p + o, 8);
        if (have != want)
            return bytes_op(p, o, o + 8, seed, m);
    }
    return 0;
}

/* Write (m == NULL) or check bytes [s, e) of p. */
static int span(uint8_t *p, uint64_t s, uint64_t e, uint64_t seed, replay_mismatch *m)
{
    uint64_t a = (s + 7) & ~(uint64_t)7, b = e & ~(uint64_t)7;
    if (a >= b)
        return bytes_op(p, s, e, seed, m);
    if (bytes_op(p, s, a, seed, m) != 0 || words_op(p, a, b, seed, m) != 0)
        return -1;
    return bytes_op(p, b, e, seed, m);
}

static int visit(uint8_t *p, uint64_t n, uint64_t id, replay_mismatch *m)
{
    uint64_t seed = seed_of(id);
    if (span(p, 0, n < REGION ? n : REGION, seed, m) != 0)
        return -1;
    for (uint64_t o = STRIDE; o < n; o += STRIDE)
        if (span(p, o, n - o < REGION ? n : o + REGION, seed, m) != 0)
            return -1;
    return span(p, n > REGION ? n - REGION : 0, n, seed, m);
}

void replay_verify_write(void *p, uint64_t bytes, uint64_t id)
{
    visit(p, bytes, id, NULL);
}

int replay_verify_check(const void *p, uint64_t bytes, uint64_t id, replay_mismatch *m)
{
    replay_mismatch dummy;
    return visit((uint8_t *)(uintptr_t)p, bytes, id, m ? m : &dummy);
}
