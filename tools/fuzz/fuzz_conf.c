/* fuzz_conf.c: libFuzzer target for the configuration parser
 * (xseg_conf_parse, xseg_parse_size): any bytes, as a conf string and as a
 * size.  On success the result must be within every documented range and
 * parsing it again must change nothing; on failure the configuration is
 * untouched and the message is a NUL-terminated string within the error
 * buffer (whose size the input picks, so a short one is tried too). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "conf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int is_pow2(size_t x)
{
    return x && !(x & (x - 1));
}

static int outside(size_t v, size_t lo, size_t hi)
{
    return v < lo || v > hi;
}

/* The fields whose range the key list gives: booleans 0 or 1, counts and
 * bounded sizes within [min, max]. */
#define RANGE_bool(key, min, max) || (c->key != 0 && c->key != 1)
#define RANGE_count(key, min, max) || outside(c->key, min, max)
#define RANGE_size_range(key, min, max) || outside(c->key, min, max)
#define RANGE_backend(key, min, max)
#define RANGE_pow2_auto(key, min, max)
#define RANGE_handle(key, min, max)
#define RANGE_size_auto(key, min, max)
#define RANGE_cap(key, min, max)
#define RANGE_fraction(key, min, max)
#define RANGE_threshold(key, min, max)
#define RANGE_release(key, min, max)
#define RANGE_split(key, min, max)
#define RANGE_divisions(key, min, max)
#define RANGE_placement(key, min, max)
#define RANGE_latency(key, min, max) || (c->key != 0 && c->key != 1)
#define RANGE_reclaim(key, min, max) || (c->key < 0 || c->key > 2)
#define RANGE_premap(key, min, max)
#define RANGE_shareable(key, min, max) || (c->key < 0 || c->key > 3)
#define RANGE_peers(key, min, max)
#define RANGE(key, type, def, parse, min, max, expect) RANGE_##parse(key, min, max)

/* Every field within its documented range (docs/config.md). */
static void check_ranges(const xseg_conf *c)
{
    if (0 XSEG_CONF_KEYS(RANGE))
        abort();
    if (c->backend < XSEG_BACKEND_AUTO || c->backend > XSEG_BACKEND_HOST)
        abort();
    /* handle_size: 0 (auto), XSEG_HANDLE_PAGE (page) or a power of two
     * >= 4KB and >= an explicit page_size. */
    int handle_bytes = c->handle_size && c->handle_size != XSEG_HANDLE_PAGE;
    if ((c->page_size && (!is_pow2(c->page_size) || c->page_size < 4096)) ||
        (handle_bytes && (!is_pow2(c->handle_size) || c->handle_size < 4096)))
        abort();
    if (c->page_size && handle_bytes && c->handle_size < c->page_size)
        abort();
    if (!(c->release_slack >= 0.0 && c->release_slack < 1.0) ||
        (c->placement != XSEG_PLACE_START && c->placement != XSEG_PLACE_PAGES))
        abort();
    if (!(c->memory_fraction >= 0.0 && c->memory_fraction <= 1.0) ||
        !(c->gc_threshold >= 0.0 && c->gc_threshold < 1.0))
        abort();
    if (c->alloc_retries < 1 || c->alloc_retries > 16 || c->history > 1000000)
        abort();
    if (c->roundup_power2_divisions > 64 ||
        (c->roundup_power2_divisions && !is_pow2(c->roundup_power2_divisions)))
        abort();
    if (c->max_split_size < ((size_t)1 << 20) || c->host_capacity < ((size_t)4 << 20) ||
        c->small_size < 512 || c->small_size > ((size_t)1 << 20))
        abort();
    if ((c->caching != 0 && c->caching != 1) || (c->verbose != 0 && c->verbose != 1) ||
        (c->stats_shm != 0 && c->stats_shm != 1))
        abort();
}

/* Every field of the key list equal (conf.h's XSEG_CONF_KEYS). */
#define SAME(key, ...) &&a->key == b->key
static int same(const xseg_conf *a, const xseg_conf *b)
{
    return 1 XSEG_CONF_KEYS(SAME);
}

static void fuzz_parse(const char *text, size_t errlen)
{
    xseg_conf c, before, again;
    char *err = malloc(errlen ? errlen : 1);
    xseg_conf_defaults(&c);
    before = c;
    xseg_status st = xseg_conf_parse(&c, text, err, errlen);
    if (st == XSEG_OK) {
        check_ranges(&c);
        again = c;
        if (xseg_conf_parse(&again, text, NULL, 0) != XSEG_OK || !same(&again, &c))
            abort(); /* parsing is idempotent */
    } else {
        if (st != XSEG_ERR_CONFIG || !same(&c, &before))
            abort(); /* a rejected conf changes nothing */
        if (errlen && (!memchr(err, '\0', errlen) || (errlen > 1 && !err[0])))
            abort(); /* a message, NUL-terminated inside the buffer */
    }
    free(err);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    memcpy(text, data, size);
    text[size] = '\0';
    size_t errlen = size ? (size_t)(data[0] % 4 == 0 ? data[size - 1] % 48 : 512) : 512;
    fuzz_parse(text, errlen);
    free(text);
    size_t out = 12345;
    char *raw = malloc(size ? size : 1); /* exact length: no NUL to lean on */
    memcpy(raw, data, size);
    if (xseg_parse_size(raw, size, &out) != 0 && out != 12345)
        abort(); /* a failed parse leaves *out alone */
    free(raw);
    return 0;
}
