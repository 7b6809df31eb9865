/* test_conf.c: Check suite for the configuration: defaults, every key's
 * values, size units, each kind of error and its message, and that a failed
 * parse leaves the configuration untouched. */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf.h"

#define KIB ((size_t)1 << 10)
#define MIB ((size_t)1 << 20)
#define GIB ((size_t)1 << 30)
#define TIB ((size_t)1 << 40)

/* ---- helpers ------------------------------------------------------------ */

/* Defaults, then `text`, which must parse. */
static xseg_conf parse_ok(const char *text)
{
    xseg_conf c;
    char err[512] = "junk";
    xseg_conf_defaults(&c);
    ck_assert_msg(xseg_conf_parse(&c, text, err, sizeof err) == XSEG_OK,
                  "\"%s\" rejected: %s", text, err);
    ck_assert_str_eq(err, "");
    return c;
}

/* `text` must fail on a non-default conf, leave it byte for byte unchanged,
 * and the message must quote the key and the value. */
static void parse_bad(const char *text, const char *key, const char *value)
{
    xseg_conf c, before;
    char err[1024] = "";
    char want[256];
    xseg_conf_defaults(&c);
    ck_assert_int_eq(xseg_conf_parse(&c, "max_mapped:1GB,verbose:on,history:7", err,
                                     sizeof err), XSEG_OK);
    memcpy(&before, &c, sizeof c);
    ck_assert_msg(xseg_conf_parse(&c, text, err, sizeof err) == XSEG_ERR_CONFIG,
                  "\"%s\" accepted", text);
    ck_assert_msg(memcmp(&before, &c, sizeof c) == 0, "\"%s\" changed the conf", text);
    ck_assert_msg(strncmp(err, "xseg conf: ", 11) == 0, "message: %s", err);
    snprintf(want, sizeof want, "\"%s\"", key);
    ck_assert_msg(strstr(err, want) != NULL, "no key %s in: %s", want, err);
    snprintf(want, sizeof want, "\"%s\"", value);
    ck_assert_msg(strstr(err, want) != NULL, "no value %s in: %s", want, err);
}

static size_t size_of(const char *text)
{
    size_t s = 12345;
    ck_assert_msg(xseg_parse_size(text, strlen(text), &s) == 0, "\"%s\" rejected", text);
    return s;
}

static void size_bad(const char *text)
{
    size_t s = 12345;
    ck_assert_msg(xseg_parse_size(text, strlen(text), &s) == -1, "\"%s\" accepted", text);
    ck_assert_uint_eq(s, 12345);
}

/* ---- defaults ----------------------------------------------------------- */

START_TEST(test_defaults)
{
    xseg_conf c;
    memset(&c, 0xab, sizeof c);
    xseg_conf_defaults(&c);
    ck_assert_int_eq(c.backend, XSEG_BACKEND_AUTO);
    ck_assert_uint_eq(c.page_size, 0);
    ck_assert_uint_eq(c.handle_size, 0);
    ck_assert_uint_eq(c.va_size, 0);
    ck_assert_uint_eq(c.max_mapped, 0);
    ck_assert_double_eq(c.memory_fraction, 0.0);
    ck_assert_double_eq(c.gc_threshold, 0.0);
    ck_assert_uint_eq(c.release_threshold, XSEG_SIZE_AUTO);
    ck_assert_uint_eq(c.alloc_retries, 3);
    ck_assert_uint_eq(c.max_split_size, XSEG_SIZE_UNLIMITED);
    ck_assert_uint_eq(c.roundup_power2_divisions, 0);
    ck_assert_int_eq(c.caching, 1);
    ck_assert_uint_eq(c.host_capacity, XSEG_DEFAULT_HOST_CAPACITY); /* 64 GiB unless built smaller */
    ck_assert_uint_eq(c.small_size, 64 * KIB);
    ck_assert_int_eq(c.verbose, 0);
    ck_assert_int_eq(c.stats_shm, 0);
    ck_assert_uint_eq(c.history, 0);
    ck_assert_double_eq(c.release_slack, 0.006);
    ck_assert_int_eq(c.placement, XSEG_PLACE_START);
}
END_TEST

START_TEST(test_null_and_empty)
{
    xseg_conf c, before;
    const char *texts[] = {"", "   ", ",", ",,", " , ,\t"};
    char err[64] = "junk";
    size_t i;
    xseg_conf_defaults(&c);
    memcpy(&before, &c, sizeof c);
    ck_assert_int_eq(xseg_conf_parse(&c, NULL, err, sizeof err), XSEG_OK);
    ck_assert_str_eq(err, "");
    for (i = 0; i < sizeof texts / sizeof texts[0]; i++)
        ck_assert_int_eq(xseg_conf_parse(&c, texts[i], err, sizeof err), XSEG_OK);
    ck_assert_int_eq(memcmp(&before, &c, sizeof c), 0);
    ck_assert_int_eq(xseg_conf_parse(NULL, "verbose:on", err, sizeof err),
                     XSEG_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(err, "xseg conf"));
    xseg_conf_defaults(NULL); /* must not crash */
}
END_TEST

/* ---- sizes -------------------------------------------------------------- */

START_TEST(test_size_units)
{
    ck_assert_uint_eq(size_of("0"), 0);
    ck_assert_uint_eq(size_of("512"), 512);
    ck_assert_uint_eq(size_of("512B"), 512);
    ck_assert_uint_eq(size_of("512b"), 512);
    ck_assert_uint_eq(size_of("3K"), 3 * KIB);
    ck_assert_uint_eq(size_of("3KB"), 3 * KIB);
    ck_assert_uint_eq(size_of("3KiB"), 3 * KIB);
    ck_assert_uint_eq(size_of("3kib"), 3 * KIB);
    ck_assert_uint_eq(size_of("2M"), 2 * MIB);
    ck_assert_uint_eq(size_of("2MB"), 2 * MIB);
    ck_assert_uint_eq(size_of("2mb"), 2 * MIB);
    ck_assert_uint_eq(size_of("2MiB"), 2 * MIB);
    ck_assert_uint_eq(size_of("40G"), 40 * GIB);
    ck_assert_uint_eq(size_of("40GB"), 40 * GIB);
    ck_assert_uint_eq(size_of("40gB"), 40 * GIB);
    ck_assert_uint_eq(size_of("40GiB"), 40 * GIB);
    ck_assert_uint_eq(size_of("1T"), TIB);
    ck_assert_uint_eq(size_of("1TB"), TIB);
    ck_assert_uint_eq(size_of("1TiB"), TIB);
    ck_assert_uint_eq(size_of("007MB"), 7 * MIB);
    ck_assert_uint_eq(size_of("1 GB"), GIB);
}
END_TEST

START_TEST(test_size_limits)
{
    ck_assert_uint_eq(size_of("18446744073709551615"), SIZE_MAX);
    ck_assert_uint_eq(size_of("16777215TB"), SIZE_MAX - TIB + 1);
    size_bad("18446744073709551616");
    size_bad("16777216TB");
    size_bad("17179869184GB");
    size_bad("99999999999999999999GB");
    size_bad("99999999999999999999999999999999999999");
}
END_TEST

START_TEST(test_size_bad)
{
    const char *bad[] = {"", " ", "MB", "-1", "-1MB", "+1", "1.5GB", "1,5GB", "0x10",
                         "12abc", "12MBx", "12 ", " 12", "12PB", "12KBB", "1e3",
                         "12 M B", "12iB", "abc"};
    size_t i, s = 1;
    for (i = 0; i < sizeof bad / sizeof bad[0]; i++)
        size_bad(bad[i]);
    ck_assert_int_eq(xseg_parse_size(NULL, 3, &s), -1);
    ck_assert_int_eq(xseg_parse_size("1MB", 3, NULL), -1);
}
END_TEST

START_TEST(test_size_len)
{
    size_t s = 0;
    /* Only `len` characters are read: no NUL needed. */
    ck_assert_int_eq(xseg_parse_size("2MBxyz", 3, &s), 0);
    ck_assert_uint_eq(s, 2 * MIB);
    ck_assert_int_eq(xseg_parse_size("2MBxyz", 1, &s), 0);
    ck_assert_uint_eq(s, 2);
    ck_assert_int_eq(xseg_parse_size("2MBxyz", 0, &s), -1);
}
END_TEST

/* ---- every key ---------------------------------------------------------- */

START_TEST(test_backend)
{
    ck_assert_int_eq(parse_ok("backend:cuda").backend, XSEG_BACKEND_CUDA);
    ck_assert_int_eq(parse_ok("backend:host").backend, XSEG_BACKEND_HOST);
    ck_assert_int_eq(parse_ok("backend:HOST").backend, XSEG_BACKEND_HOST);
    ck_assert_int_eq(parse_ok("backend:host,backend:auto").backend, XSEG_BACKEND_AUTO);
    parse_bad("backend:gpu", "backend", "gpu");
    parse_bad("backend:cudaMallocAsync", "backend", "cudaMallocAsync");
}
END_TEST

START_TEST(test_page_size)
{
    ck_assert_uint_eq(parse_ok("page_size:2MB").page_size, 2 * MIB);
    ck_assert_uint_eq(parse_ok("page_size:4KB").page_size, 4 * KIB);
    ck_assert_uint_eq(parse_ok("page_size:1GB").page_size, GIB);
    ck_assert_uint_eq(parse_ok("page_size:2MB,page_size:auto").page_size, 0);
    ck_assert_uint_eq(parse_ok("page_size:2MB,page_size:0").page_size, 0);
    parse_bad("page_size:3MB", "page_size", "3MB");
    parse_bad("page_size:2KB", "page_size", "2KB");
    parse_bad("page_size:4097", "page_size", "4097");
    parse_bad("page_size:big", "page_size", "big");
}
END_TEST

START_TEST(test_handle_size)
{
    ck_assert_uint_eq(parse_ok("handle_size:32MB").handle_size, 32 * MIB);
    ck_assert_uint_eq(parse_ok("handle_size:auto").handle_size, 0);
    ck_assert_uint_eq(parse_ok("handle_size:8MB,handle_size:0").handle_size, 0);
    ck_assert_uint_eq(parse_ok("page_size:2MB,handle_size:2MB").handle_size, 2 * MIB);
    ck_assert_uint_eq(parse_ok("handle_size:64MB,page_size:2MB").handle_size, 64 * MIB);
    ck_assert_uint_eq(parse_ok("handle_size:page").handle_size, XSEG_HANDLE_PAGE);
    ck_assert_uint_eq(parse_ok("page_size:64KB,handle_size:page").handle_size, XSEG_HANDLE_PAGE);
    parse_bad("handle_size:pages", "handle_size", "pages");
    parse_bad("handle_size:20MB", "handle_size", "20MB");
    parse_bad("handle_size:1KB", "handle_size", "1KB");
    /* Must be a multiple of an explicit page size. */
    parse_bad("page_size:2MB,handle_size:1MB", "handle_size", "1048576");
}
END_TEST

START_TEST(test_va_size)
{
    ck_assert_uint_eq(parse_ok("va_size:1TB").va_size, TIB);
    ck_assert_uint_eq(parse_ok("va_size:600GB").va_size, 600 * GIB);
    ck_assert_uint_eq(parse_ok("va_size:1TB,va_size:auto").va_size, 0);
    ck_assert_uint_eq(parse_ok("va_size:1TB,va_size:0").va_size, 0);
    parse_bad("va_size:lots", "va_size", "lots");
}
END_TEST

START_TEST(test_max_mapped)
{
    ck_assert_uint_eq(parse_ok("max_mapped:40GB").max_mapped, 40 * GIB);
    ck_assert_uint_eq(parse_ok("max_mapped:512MB").max_mapped, 512 * MIB);
    ck_assert_uint_eq(parse_ok("max_mapped:40GB,max_mapped:none").max_mapped, 0);
    ck_assert_uint_eq(parse_ok("max_mapped:40GB,max_mapped:0").max_mapped, 0);
    ck_assert_uint_eq(parse_ok("max_mapped:40GB,max_mapped:unlimited").max_mapped, 0);
    parse_bad("max_mapped:abc", "max_mapped", "abc");
    parse_bad("max_mapped:-1GB", "max_mapped", "-1GB");
    parse_bad("max_mapped:1.5GB", "max_mapped", "1.5GB");
    parse_bad("max_mapped:99999999999999999999GB", "max_mapped", "99999999999999999999GB");
}
END_TEST

START_TEST(test_memory_fraction)
{
    ck_assert_double_eq(parse_ok("memory_fraction:0.5").memory_fraction, 0.5);
    ck_assert_double_eq(parse_ok("memory_fraction:1").memory_fraction, 1.0);
    ck_assert_double_eq(parse_ok("memory_fraction:1.0").memory_fraction, 1.0);
    ck_assert_double_eq(parse_ok("memory_fraction:.25").memory_fraction, 0.25);
    ck_assert_double_eq(parse_ok("memory_fraction:0.9").memory_fraction, 0.9);
    ck_assert_double_eq(parse_ok("memory_fraction:0.5,memory_fraction:0").memory_fraction,
                        0.0);
    parse_bad("memory_fraction:1.01", "memory_fraction", "1.01");
    parse_bad("memory_fraction:2", "memory_fraction", "2");
    parse_bad("memory_fraction:-0.5", "memory_fraction", "-0.5");
    parse_bad("memory_fraction:half", "memory_fraction", "half");
    parse_bad("memory_fraction:5e-1", "memory_fraction", "5e-1");
    parse_bad("memory_fraction:0.5.1", "memory_fraction", "0.5.1");
    parse_bad("memory_fraction:.", "memory_fraction", ".");
    parse_bad("memory_fraction:nan", "memory_fraction", "nan");
}
END_TEST

START_TEST(test_gc_threshold)
{
    ck_assert_double_eq(parse_ok("gc_threshold:0.8").gc_threshold, 0.8);
    ck_assert_double_eq(parse_ok("gc_threshold:0.999").gc_threshold, 0.999);
    ck_assert_double_eq(parse_ok("gc_threshold:0.8,gc_threshold:0").gc_threshold, 0.0);
    parse_bad("gc_threshold:1", "gc_threshold", "1");
    parse_bad("gc_threshold:1.0", "gc_threshold", "1.0");
    parse_bad("gc_threshold:-0.1", "gc_threshold", "-0.1");
    parse_bad("gc_threshold:inf", "gc_threshold", "inf");
}
END_TEST

START_TEST(test_release_threshold)
{
    ck_assert_uint_eq(parse_ok("release_threshold:4GB").release_threshold, 4 * GIB);
    ck_assert_uint_eq(parse_ok("release_threshold:unlimited").release_threshold,
                      XSEG_SIZE_UNLIMITED);
    ck_assert_uint_eq(parse_ok("release_threshold:none").release_threshold,
                      XSEG_SIZE_UNLIMITED);
    ck_assert_uint_eq(parse_ok("release_threshold:none,release_threshold:auto")
                          .release_threshold, XSEG_SIZE_AUTO);
    /* A literal 0 means "release everything": stored as 1 byte, not AUTO. */
    ck_assert_uint_eq(parse_ok("release_threshold:0").release_threshold, 1);
    ck_assert_uint_eq(parse_ok("release_threshold:0GB").release_threshold, 1);
    ck_assert_uint_eq(parse_ok("release_threshold:1").release_threshold, 1);
    parse_bad("release_threshold:never", "release_threshold", "never");
}
END_TEST

START_TEST(test_release_slack)
{
    ck_assert_double_eq(parse_ok("release_slack:0.01").release_slack, 0.01);
    ck_assert_double_eq(parse_ok("release_slack:0.5,release_slack:0").release_slack, 0.0);
    parse_bad("release_slack:1", "release_slack", "1");
    parse_bad("release_slack:-0.01", "release_slack", "-0.01");
    parse_bad("release_slack:1%", "release_slack", "1%");
}
END_TEST

START_TEST(test_expected_peak)
{
    ck_assert_uint_eq(parse_ok("").expected_peak, 0);
    ck_assert_uint_eq(parse_ok("expected_peak:40GB").expected_peak, 40 * GIB);
    ck_assert_uint_eq(parse_ok("expected_peak:40GB,expected_peak:none").expected_peak, 0);
    ck_assert_uint_eq(parse_ok("expected_peak:0").expected_peak, 0);
    parse_bad("expected_peak:lots", "expected_peak", "lots");
    parse_bad("expected_peak:-1GB", "expected_peak", "-1GB");
}
END_TEST

START_TEST(test_placement)
{
    ck_assert_int_eq(parse_ok("placement:pages").placement, XSEG_PLACE_PAGES);
    ck_assert_int_eq(parse_ok("placement:pages,placement:start").placement, XSEG_PLACE_START);
    ck_assert_int_eq(parse_ok("placement:START").placement, XSEG_PLACE_START);
    parse_bad("placement:end", "placement", "end");
    parse_bad("placement:", "placement", "");
}
END_TEST

START_TEST(test_alloc_retries)
{
    ck_assert_uint_eq(parse_ok("alloc_retries:1").alloc_retries, 1);
    ck_assert_uint_eq(parse_ok("alloc_retries:16").alloc_retries, 16);
    ck_assert_uint_eq(parse_ok("alloc_retries:5").alloc_retries, 5);
    parse_bad("alloc_retries:0", "alloc_retries", "0");
    parse_bad("alloc_retries:17", "alloc_retries", "17");
    parse_bad("alloc_retries:2.5", "alloc_retries", "2.5");
    parse_bad("alloc_retries:3x", "alloc_retries", "3x");
    parse_bad("alloc_retries:3KB", "alloc_retries", "3KB");
    parse_bad("alloc_retries:-3", "alloc_retries", "-3");
    parse_bad("alloc_retries:4294967299", "alloc_retries", "4294967299");
}
END_TEST

START_TEST(test_max_split_size)
{
    ck_assert_uint_eq(parse_ok("max_split_size:256MB").max_split_size, 256 * MIB);
    ck_assert_uint_eq(parse_ok("max_split_size:1MB").max_split_size, MIB);
    ck_assert_uint_eq(parse_ok("max_split_size:1MB,max_split_size:unlimited")
                          .max_split_size, XSEG_SIZE_UNLIMITED);
    ck_assert_uint_eq(parse_ok("max_split_size:1MB,max_split_size:none").max_split_size,
                      XSEG_SIZE_UNLIMITED);
    parse_bad("max_split_size:1023KB", "max_split_size", "1023KB");
    parse_bad("max_split_size:0", "max_split_size", "0");
    parse_bad("max_split_size:auto", "max_split_size", "auto");
}
END_TEST

START_TEST(test_roundup_power2_divisions)
{
    unsigned ok[] = {0, 1, 2, 4, 8, 16, 32, 64};
    char text[64];
    size_t i;
    for (i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        snprintf(text, sizeof text, "roundup_power2_divisions:%u", ok[i]);
        ck_assert_uint_eq(parse_ok(text).roundup_power2_divisions, ok[i]);
    }
    parse_bad("roundup_power2_divisions:3", "roundup_power2_divisions", "3");
    parse_bad("roundup_power2_divisions:12", "roundup_power2_divisions", "12");
    parse_bad("roundup_power2_divisions:128", "roundup_power2_divisions", "128");
    parse_bad("roundup_power2_divisions:[256:1]", "roundup_power2_divisions", "[256:1]");
}
END_TEST

START_TEST(test_bools)
{
    const char *keys[] = {"caching", "verbose", "stats_shm"};
    const char *on[] = {"on", "true", "1", "ON", "True"};
    const char *off[] = {"off", "false", "0", "OFF", "False"};
    char text[64];
    size_t k, i;
    for (k = 0; k < 3; k++) {
        for (i = 0; i < 5; i++) {
            xseg_conf c;
            snprintf(text, sizeof text, "%s:%s", keys[k], on[i]);
            c = parse_ok(text);
            ck_assert_int_eq(k == 0 ? c.caching : k == 1 ? c.verbose : c.stats_shm, 1);
            snprintf(text, sizeof text, "%s:%s", keys[k], off[i]);
            c = parse_ok(text);
            ck_assert_int_eq(k == 0 ? c.caching : k == 1 ? c.verbose : c.stats_shm, 0);
        }
        snprintf(text, sizeof text, "%s:yes", keys[k]);
        parse_bad(text, keys[k], "yes");
        snprintf(text, sizeof text, "%s:2", keys[k]);
        parse_bad(text, keys[k], "2");
    }
}
END_TEST

START_TEST(test_host_capacity)
{
    ck_assert_uint_eq(parse_ok("host_capacity:4MB").host_capacity, 4 * MIB);
    ck_assert_uint_eq(parse_ok("host_capacity:8GB").host_capacity, 8 * GIB);
    ck_assert_uint_eq(parse_ok("host_capacity:2TB").host_capacity, 2 * TIB);
    parse_bad("host_capacity:4095KB", "host_capacity", "4095KB");
    parse_bad("host_capacity:0", "host_capacity", "0");
}
END_TEST

START_TEST(test_small_size)
{
    ck_assert_uint_eq(parse_ok("small_size:512B").small_size, 512);
    ck_assert_uint_eq(parse_ok("small_size:1MB").small_size, MIB);
    ck_assert_uint_eq(parse_ok("small_size:256KB").small_size, 256 * KIB);
    parse_bad("small_size:511", "small_size", "511");
    parse_bad("small_size:1025KB", "small_size", "1025KB");
    parse_bad("small_size:0", "small_size", "0");
}
END_TEST

START_TEST(test_history)
{
    ck_assert_uint_eq(parse_ok("history:0").history, 0);
    ck_assert_uint_eq(parse_ok("history:1000").history, 1000);
    ck_assert_uint_eq(parse_ok("history:1000000").history, 1000000);
    parse_bad("history:1000001", "history", "1000001");
    parse_bad("history:1K", "history", "1K");
    parse_bad("history:-1", "history", "-1");
}
END_TEST

/* ---- syntax ------------------------------------------------------------- */

START_TEST(test_many_keys)
{
    xseg_conf c = parse_ok("backend:host,page_size:64KB,handle_size:2MB,va_size:256GB,"
                           "max_mapped:40GB,memory_fraction:0.9,gc_threshold:0.8,"
                           "release_threshold:1GB,alloc_retries:4,max_split_size:128MB,"
                           "roundup_power2_divisions:8,caching:off,host_capacity:16GB,"
                           "small_size:128KB,verbose:on,stats_shm:true,history:100");
    ck_assert_int_eq(c.backend, XSEG_BACKEND_HOST);
    ck_assert_uint_eq(c.page_size, 64 * KIB);
    ck_assert_uint_eq(c.handle_size, 2 * MIB);
    ck_assert_uint_eq(c.va_size, 256 * GIB);
    ck_assert_uint_eq(c.max_mapped, 40 * GIB);
    ck_assert_double_eq(c.memory_fraction, 0.9);
    ck_assert_double_eq(c.gc_threshold, 0.8);
    ck_assert_uint_eq(c.release_threshold, GIB);
    ck_assert_uint_eq(c.alloc_retries, 4);
    ck_assert_uint_eq(c.max_split_size, 128 * MIB);
    ck_assert_uint_eq(c.roundup_power2_divisions, 8);
    ck_assert_int_eq(c.caching, 0);
    ck_assert_uint_eq(c.host_capacity, 16 * GIB);
    ck_assert_uint_eq(c.small_size, 128 * KIB);
    ck_assert_int_eq(c.verbose, 1);
    ck_assert_int_eq(c.stats_shm, 1);
    ck_assert_uint_eq(c.history, 100);
}
END_TEST

START_TEST(test_whitespace)
{
    xseg_conf c = parse_ok("  max_mapped : 40GB ,\tgc_threshold:\t0.8\n, verbose :on ");
    ck_assert_uint_eq(c.max_mapped, 40 * GIB);
    ck_assert_double_eq(c.gc_threshold, 0.8);
    ck_assert_int_eq(c.verbose, 1);
    ck_assert_uint_eq(parse_ok("max_mapped: 2 MB").max_mapped, 2 * MIB);
}
END_TEST

START_TEST(test_last_wins_and_merge)
{
    xseg_conf c;
    char err[256];
    ck_assert_uint_eq(parse_ok("max_mapped:1GB,max_mapped:2GB").max_mapped, 2 * GIB);
    ck_assert_uint_eq(parse_ok("alloc_retries:5,alloc_retries:2").alloc_retries, 2);
    /* A second parse applies on top of the first: untouched keys stay. */
    xseg_conf_defaults(&c);
    ck_assert_int_eq(xseg_conf_parse(&c, "max_mapped:1GB,verbose:on", err, sizeof err),
                     XSEG_OK);
    ck_assert_int_eq(xseg_conf_parse(&c, "max_mapped:3GB", err, sizeof err), XSEG_OK);
    ck_assert_uint_eq(c.max_mapped, 3 * GIB);
    ck_assert_int_eq(c.verbose, 1);
}
END_TEST

START_TEST(test_empty_items)
{
    xseg_conf c = parse_ok("verbose:on,");
    ck_assert_int_eq(c.verbose, 1);
    c = parse_ok(",verbose:on,,history:3, ,");
    ck_assert_int_eq(c.verbose, 1);
    ck_assert_uint_eq(c.history, 3);
}
END_TEST

/* ---- errors ------------------------------------------------------------- */

START_TEST(test_unknown_key)
{
    xseg_conf c;
    char err[1024];
    parse_bad("max_maped:40GB", "max_maped", "40GB");
    parse_bad("expandable_segments:True", "expandable_segments", "True");
    parse_bad("Verbose:on", "Verbose", "on");
    xseg_conf_defaults(&c);
    ck_assert_int_eq(xseg_conf_parse(&c, "bogus:1", err, sizeof err), XSEG_ERR_CONFIG);
    /* The message lists the valid keys. */
    ck_assert_ptr_nonnull(strstr(err, "unknown key"));
    ck_assert_ptr_nonnull(strstr(err, "backend"));
    ck_assert_ptr_nonnull(strstr(err, "release_threshold"));
    ck_assert_ptr_nonnull(strstr(err, "roundup_power2_divisions"));
    ck_assert_ptr_nonnull(strstr(err, "history"));
}
END_TEST

START_TEST(test_missing_colon)
{
    xseg_conf c, before;
    char err[512];
    xseg_conf_defaults(&c);
    memcpy(&before, &c, sizeof c);
    ck_assert_int_eq(xseg_conf_parse(&c, "verbose:on,caching", err, sizeof err),
                     XSEG_ERR_CONFIG);
    ck_assert_ptr_nonnull(strstr(err, "\"caching\""));
    ck_assert_ptr_nonnull(strstr(err, "':'"));
    ck_assert_int_eq(memcmp(&before, &c, sizeof c), 0);
    ck_assert_int_eq(xseg_conf_parse(&c, ":5", err, sizeof err), XSEG_ERR_CONFIG);
    ck_assert_ptr_nonnull(strstr(err, "empty key"));
    ck_assert_ptr_nonnull(strstr(err, "\":5\""));
    ck_assert_int_eq(memcmp(&before, &c, sizeof c), 0);
}
END_TEST

START_TEST(test_empty_value)
{
    char err[512];
    xseg_conf c;
    parse_bad("max_mapped:", "max_mapped", "");
    parse_bad("max_mapped:  ,verbose:on", "max_mapped", "");
    parse_bad("verbose:on,history:", "history", "");
    xseg_conf_defaults(&c);
    ck_assert_int_eq(xseg_conf_parse(&c, "history:", err, sizeof err), XSEG_ERR_CONFIG);
    ck_assert_ptr_nonnull(strstr(err, "empty"));
}
END_TEST

START_TEST(test_message_format)
{
    xseg_conf c;
    char err[512];
    xseg_conf_defaults(&c);
    ck_assert_int_eq(xseg_conf_parse(&c, "max_mapped:abc", err, sizeof err),
                     XSEG_ERR_CONFIG);
    ck_assert_ptr_nonnull(strstr(err, "xseg conf: bad value \"abc\" for key "
                                      "\"max_mapped\": expected a size such as "
                                      "512MB or 40GB"));
    ck_assert_int_eq(xseg_conf_parse(&c, "max_mapped:99999999999999999999GB", err,
                                     sizeof err), XSEG_ERR_CONFIG);
    ck_assert_ptr_nonnull(strstr(err, "too large"));
    ck_assert_int_eq(xseg_conf_parse(&c, "page_size:3MB", err, sizeof err),
                     XSEG_ERR_CONFIG);
    ck_assert_ptr_nonnull(strstr(err, "power of two"));
    ck_assert_int_eq(xseg_conf_parse(&c, "memory_fraction:1.5", err, sizeof err),
                     XSEG_ERR_CONFIG);
    ck_assert_ptr_nonnull(strstr(err, "out of range"));
    ck_assert_ptr_nonnull(strstr(err, "(0, 1]"));
}
END_TEST

START_TEST(test_unchanged_after_late_error)
{
    xseg_conf c, before;
    char err[512];
    xseg_conf_defaults(&c);
    memcpy(&before, &c, sizeof c);
    /* Good items before the bad one must not be applied either. */
    ck_assert_int_eq(xseg_conf_parse(&c, "max_mapped:1GB,verbose:on,caching:off,"
                                         "history:9,backend:host,alloc_retries:99",
                                     err, sizeof err), XSEG_ERR_CONFIG);
    ck_assert_int_eq(memcmp(&before, &c, sizeof c), 0);
    ck_assert_ptr_nonnull(strstr(err, "\"alloc_retries\""));
    ck_assert_ptr_nonnull(strstr(err, "\"99\""));
}
END_TEST

START_TEST(test_err_buffer)
{
    xseg_conf c;
    char small[8];
    char big[512];
    char longval[600];
    xseg_conf_defaults(&c);
    memset(small, 'x', sizeof small);
    ck_assert_int_eq(xseg_conf_parse(&c, "bogus:1", small, sizeof small), XSEG_ERR_CONFIG);
    ck_assert_uint_eq(strlen(small), sizeof small - 1);
    ck_assert_int_eq(strncmp(small, "xseg co", 7), 0);
    ck_assert_int_eq(xseg_conf_parse(&c, "bogus:1", NULL, 0), XSEG_ERR_CONFIG);
    ck_assert_int_eq(xseg_conf_parse(&c, "bogus:1", small, 0), XSEG_ERR_CONFIG);
    ck_assert_int_eq(xseg_conf_parse(&c, "bogus:1", small, 1), XSEG_ERR_CONFIG);
    ck_assert_str_eq(small, "");
    /* A long value is quoted shortened, and the message still fits. */
    memcpy(longval, "max_mapped:", 11);
    memset(longval + 11, '7', sizeof longval - 12);
    longval[sizeof longval - 1] = '\0';
    ck_assert_int_eq(xseg_conf_parse(&c, longval, big, sizeof big), XSEG_ERR_CONFIG);
    ck_assert_uint_lt(strlen(big), sizeof big);
    ck_assert_ptr_nonnull(strstr(big, "max_mapped"));
}
END_TEST

/* ---- runner ------------------------------------------------------------- */

static Suite *conf_suite(void)
{
    Suite *s = suite_create("conf");
    TCase *basics = tcase_create("basics");
    TCase *sizes = tcase_create("sizes");
    TCase *keys = tcase_create("keys");
    TCase *syntax = tcase_create("syntax");
    TCase *errors = tcase_create("errors");
    tcase_add_test(basics, test_defaults);
    tcase_add_test(basics, test_null_and_empty);
    tcase_add_test(sizes, test_size_units);
    tcase_add_test(sizes, test_size_limits);
    tcase_add_test(sizes, test_size_bad);
    tcase_add_test(sizes, test_size_len);
    tcase_add_test(keys, test_backend);
    tcase_add_test(keys, test_page_size);
    tcase_add_test(keys, test_handle_size);
    tcase_add_test(keys, test_va_size);
    tcase_add_test(keys, test_max_mapped);
    tcase_add_test(keys, test_memory_fraction);
    tcase_add_test(keys, test_gc_threshold);
    tcase_add_test(keys, test_release_threshold);
    tcase_add_test(keys, test_release_slack);
    tcase_add_test(keys, test_expected_peak);
    tcase_add_test(keys, test_placement);
    tcase_add_test(keys, test_alloc_retries);
    tcase_add_test(keys, test_max_split_size);
    tcase_add_test(keys, test_roundup_power2_divisions);
    tcase_add_test(keys, test_bools);
    tcase_add_test(keys, test_host_capacity);
    tcase_add_test(keys, test_small_size);
    tcase_add_test(keys, test_history);
    tcase_add_test(syntax, test_many_keys);
    tcase_add_test(syntax, test_whitespace);
    tcase_add_test(syntax, test_last_wins_and_merge);
    tcase_add_test(syntax, test_empty_items);
    tcase_add_test(errors, test_unknown_key);
    tcase_add_test(errors, test_missing_colon);
    tcase_add_test(errors, test_empty_value);
    tcase_add_test(errors, test_message_format);
    tcase_add_test(errors, test_unchanged_after_late_error);
    tcase_add_test(errors, test_err_buffer);
    suite_add_tcase(s, basics);
    suite_add_tcase(s, sizes);
    suite_add_tcase(s, keys);
    suite_add_tcase(s, syntax);
    suite_add_tcase(s, errors);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(conf_suite());
    int failed;
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed != 0 ? EXIT_FAILURE : EXIT_SUCCESS;
}
