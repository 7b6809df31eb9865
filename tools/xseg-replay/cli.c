/* cli.c: parses xseg-replay's options (getopt_long) and prints its usage
 * and version texts. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"
#include "trace.h"
#include "xseg.h"

static const char usage_text[] =
"Usage: xseg-replay [options] TRACE...\n"
"\n"
"Replay allocation traces through the xseg allocator and report speed,\n"
"memory and driver traffic.  Each trace (format xseg-trace v1: gzip or plain\n"
"text, lines `a,<id>,<bytes>,<stream>` and `f,<id>`) is replayed through a\n"
"fresh allocator, xseg_create(device, conf).\n"
"\n"
"Options:\n"
"  -c, --conf STR     allocator configuration \"key:value,...\" (docs/config.md);\n"
"                     default: the XSEG_CONF environment variable.  The backend\n"
"                     comes from it: backend:auto|cuda|host (auto: host where\n"
"                     there is no GPU)\n"
"  -d, --device N     device index (default 0)\n"
"  -r, --repeat N     replay each trace N times, each through a fresh\n"
"                     allocator, and report the best time (default 1)\n"
"      --verify       write a pattern derived from the id into the head, tail\n"
"                     and every MiB of each block and check it at free: finds\n"
"                     overlapping blocks (host backend only)\n"
"      --peak-snapshot FILE\n"
"                     append to FILE, per trace, one JSON line: the allocator's\n"
"                     snapshot and stats when its mapped bytes were at their\n"
"                     highest, with the live bytes then (the first replay of\n"
"                     each trace; a stats read after every allocation, which\n"
"                     the time includes); tools/peak-report reads it\n"
"      --expected-peak\n"
"                     give each allocator its trace's peak of live bytes as\n"
"                     expected_peak (xseg_set_expected_peak), as a program\n"
"                     that knows its peak would (docs/config.md)\n"
"  -j, --json         print one JSON object per trace, one per line\n"
"      --json-array   print one JSON array holding those objects\n"
"  -h, --help         print this text and exit\n"
"  -V, --version      print the version and exit\n"
"\n"
"Output, one row per trace: events replayed; seconds (trace events only: the\n"
"blocks still live at the end are freed afterwards, untimed); events/s; peak\n"
"live (highest sum of requested bytes live, from the trace); peak mapped\n"
"(xseg_stats mapped_bytes.peak); ratio = peak mapped / peak live; map+unmap\n"
"driver calls per 1000 events; the backend; then every driver call by kind,\n"
"and the time spent in driver calls on the caller's threads and on the\n"
"worker's (xseg_driver_time; JSON driver_caller_ns, driver_worker_ns and\n"
"driver_ns_by_op); and the same for the second half of the trace's events\n"
"(JSON second_half: from_event, driver_calls, caller_ns), where a workload\n"
"whose memory is mapped and whose shapes repeat calls no driver function.\n"
"host_driver_latency:h200 makes the host backend's calls\n"
"take an H200's time, so the caller's driver time predicts the GPU's.\n"
"An allocation failing with OOM is counted and skipped (its free too).\n"
"\n"
"Exit status: 0 success; 1 a trace could not be read or replayed (an OOM\n"
"included), with a message on stderr naming the trace and line/event;\n"
"2 usage error (bad option or configuration).\n"
"\n"
"Examples:\n"
"  xseg-replay tools/traces/llama_serve_s1.csv.gz\n"
"  xseg-replay --conf backend:host --verify tools/traces/*.csv.gz\n"
"  xseg-replay --conf backend:host,max_mapped:3GB --repeat 3 trace.csv.gz\n"
"  XSEG_CONF=release_threshold:0 xseg-replay --json trace.csv.gz | jq .ratio\n"
"  xseg-replay -c backend:host --peak-snapshot /tmp/p.jsonl t.csv.gz &&\n"
"    tools/peak-report /tmp/p.jsonl\n";

void cli_usage(FILE *f)
{
    fputs(usage_text, f);
}

static void version(void)
{
    printf("xseg-replay (xseg) %s\n", xseg_version());
    printf("trace reader: %s\n", xseg_trace_have_zlib() ? "zlib" : "gzip -dc");
}

static int usage_error(const char *fmt, const char *arg)
{
    fprintf(stderr, "xseg-replay: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\nTry 'xseg-replay --help' for more information.\n");
    return CLI_USAGE;
}

static int parse_int(const char *s, int min, int *out)
{
    char *end;
    long v;
    errno = 0;
    v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < min || v > INT_MAX)
        return -1;
    *out = (int)v;
    return 0;
}

enum { OPT_VERIFY = 256, OPT_JSON_ARRAY, OPT_PEAK_SNAPSHOT, OPT_EXPECTED_PEAK };

static const struct option long_opts[] = {
    { "conf", required_argument, NULL, 'c' },
    { "device", required_argument, NULL, 'd' },
    { "repeat", required_argument, NULL, 'r' },
    { "verify", no_argument, NULL, OPT_VERIFY },
    { "json", no_argument, NULL, 'j' },
    { "json-array", no_argument, NULL, OPT_JSON_ARRAY },
    { "peak-snapshot", required_argument, NULL, OPT_PEAK_SNAPSHOT },
    { "expected-peak", no_argument, NULL, OPT_EXPECTED_PEAK },
    { "help", no_argument, NULL, 'h' },
    { "version", no_argument, NULL, 'V' },
    { NULL, 0, NULL, 0 }
};

static int apply(int opt, const char *arg, replay_cli *c)
{
    switch (opt) {
    case 'c': c->conf = arg; return CLI_RUN;
    case 'd':
        return parse_int(arg, 0, &c->device) ? usage_error("bad device '%s'", arg) : CLI_RUN;
    case 'r':
        return parse_int(arg, 1, &c->repeat) ? usage_error("bad repeat count '%s'", arg)
                                             : CLI_RUN;
    case OPT_VERIFY: c->verify = 1; return CLI_RUN;
    case 'j': c->json = CLI_JSON_LINES; return CLI_RUN;
    case OPT_JSON_ARRAY: c->json = CLI_JSON_ARRAY; return CLI_RUN;
    case OPT_PEAK_SNAPSHOT: c->peak_path = arg; return CLI_RUN;
    case OPT_EXPECTED_PEAK: c->expected_peak = 1; return CLI_RUN;
    case 'h': cli_usage(stdout); return CLI_DONE;
    case 'V': version(); return CLI_DONE;
    }
    return usage_error("%s", "bad option");
}

static int bad_option(char **argv)
{
    const char *arg = optind > 0 ? argv[optind - 1] : "?";
    if ((optopt > 0 && optopt < 256 && strchr("cdr", optopt)) || optopt == OPT_PEAK_SNAPSHOT)
        return usage_error("option '%s' needs an argument", arg);
    return usage_error("unknown option '%s'", arg);
}

int cli_parse(int argc, char **argv, replay_cli *c)
{
    int opt, rc;
    memset(c, 0, sizeof *c);
    c->repeat = 1;
    opterr = 0;
    optind = 1;
    while ((opt = getopt_long(argc, argv, "c:d:r:jhV", long_opts, NULL)) != -1) {
        if (opt == '?' || opt == ':')
            return bad_option(argv);
        if ((rc = apply(opt, optarg, c)) != CLI_RUN)
            return rc;
    }
    c->traces = argv + optind;
    c->ntraces = argc - optind;
    if (c->ntraces == 0)
        return usage_error("%s", "no trace given");
    return CLI_RUN;
}
