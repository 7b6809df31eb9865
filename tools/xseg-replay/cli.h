/* cli.h: the command line of xseg-replay: options and usage text. */
#ifndef XSEG_REPLAY_CLI_H
#define XSEG_REPLAY_CLI_H

#include <stdio.h>

enum { CLI_JSON_OFF = 0, CLI_JSON_LINES = 1, CLI_JSON_ARRAY = 2 };

typedef struct replay_cli {
    int json;            /* CLI_JSON_* */
    int verify;
    int device;
    int repeat;          /* >= 1 */
    const char *conf;    /* NULL: the XSEG_CONF environment */
    const char *peak_path; /* --peak-snapshot: NULL when not asked */
    int expected_peak;   /* --expected-peak: each trace's peak is the allocator's hint */
    char **traces;
    int ntraces;
} replay_cli;

enum { CLI_RUN = 0, CLI_DONE = 1, CLI_USAGE = 2 };

/* Parse argv.  CLI_RUN: go on; CLI_DONE: --help / --version printed, exit 0;
 * CLI_USAGE: message printed on stderr, exit 2. */
int cli_parse(int argc, char **argv, replay_cli *c);
void cli_usage(FILE *f);

#endif
