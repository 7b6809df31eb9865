/* main.c: xseg-replay: replays allocation traces through fresh xseg
 * allocators and prints a table or JSON (see cli.c for the usage). */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include "cli.h"
#include "report.h"
#include "run.h"

static int name_width(const replay_cli *c)
{
    int w = 5;
    for (int i = 0; i < c->ntraces; i++) {
        int n = (int)strlen(report_name(c->traces[i]));
        w = n > w ? n : w;
    }
    return w > 60 ? 60 : w;
}

static void output(const replay_cli *c, const replay_report *rep, int index)
{
    if (c->json == CLI_JSON_OFF) {
        report_text(stdout, rep, name_width(c));
    } else {
        if (c->json == CLI_JSON_ARRAY)
            fputs(index ? ",\n " : "[", stdout);
        report_json(stdout, rep, c);
        if (c->json == CLI_JSON_LINES)
            fputc('\n', stdout);
    }
    fflush(stdout);
}

/* Append the trace's --peak-snapshot line: 0, or -1 with rep->error. */
static int write_peak(const replay_cli *c, replay_report *rep)
{
    FILE *f = fopen(c->peak_path, "a");
    if (!f) {
        snprintf(rep->error, sizeof rep->error, "%s: --peak-snapshot: cannot open %s: %s",
                 rep->path, c->peak_path, strerror(errno));
        rep->stage = "peak";
        return rep->failed = 1, -1;
    }
    report_peak_json(f, rep);
    fclose(f);
    return 0;
}

static int replay_all(const replay_cli *c)
{
    static replay_report rep; /* large: kept off the stack */
    int status = 0;
    if (c->json == CLI_JSON_OFF)
        report_text_header(stdout, name_width(c));
    for (int i = 0; i < c->ntraces; i++) {
        if (run_trace(c, c->traces[i], &rep) != 0 || (c->peak_path && write_peak(c, &rep) != 0)) {
            fprintf(stderr, "xseg-replay: %s\n", rep.error);
            status = 1;
        }
        output(c, &rep, i);
        run_report_free(&rep);
    }
    if (c->json == CLI_JSON_ARRAY)
        fputs("]\n", stdout);
    return status;
}

int main(int argc, char **argv)
{
    replay_cli c;
    int rc = cli_parse(argc, argv, &c);
    if (rc != CLI_RUN)
        return rc == CLI_DONE ? 0 : 2;
    rc = run_check_allocator(&c);
    if (rc != 0)
        return rc;
    return replay_all(&c);
}
