/* main.c: xseg-top: lists the processes whose allocators publish live stats
 * (conf key stats_shm) and shows them per device, refreshing like top; or
 * prints one sample as JSON or in the Prometheus textfile format.  Options
 * and the refresh loop (terminal mode, 'q' to quit) live here. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "top.h"

typedef struct cli {
    top_opts o;
    int once, json, prom;
    double interval;
    int interval_set;
    long iterations;       /* 0: until 'q' or a signal */
    const char *output;    /* --output FILE: written atomically */
} cli;

static volatile sig_atomic_t g_stop;
static struct termios g_saved;
static int g_raw;

static void usage(FILE *out)
{
    fputs("usage: xseg-top [options]\n"
          "  Live view of the xseg allocators of every process that runs with\n"
          "  XSEG_CONF=stats_shm:on (files " XSEG_SHM_DEFAULT_DIR "/" XSEG_SHM_PREFIX "<pid>).\n"
          "  -d, --interval SEC   refresh period (default 1); with --once, take two\n"
          "                       samples SEC apart so that rates are shown\n"
          "  -n, --iterations N   stop after N refreshes\n"
          "  -1, --once           print one sample and exit\n"
          "  -j, --json           with --once: JSON for scripts\n"
          "  -p, --prometheus     one sample in the Prometheus textfile-collector format\n"
          "  -o, --output FILE    write the sample to FILE (atomically: FILE.tmp, rename)\n"
          "      --dir DIR        directory of the files (default $" XSEG_SHM_DIR_ENV
          " or " XSEG_SHM_DEFAULT_DIR ")\n"
          "      --no-clean       leave files of dead processes in place\n"
          "  -h, --help           this text\n"
          "Keys while running: q quits.\n",
          out);
}

static int parse_args(int argc, char **argv, cli *c)
{
    const char *env = getenv(XSEG_SHM_DIR_ENV);
    *c = (cli){.o = {env && *env ? env : XSEG_SHM_DEFAULT_DIR, 1}, .interval = 1.0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *next = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-1") || !strcmp(a, "--once"))
            c->once = 1;
        else if (!strcmp(a, "-j") || !strcmp(a, "--json"))
            c->json = 1;
        else if (!strcmp(a, "-p") || !strcmp(a, "--prometheus"))
            c->prom = 1;
        else if (!strcmp(a, "--no-clean"))
            c->o.clean = 0;
        else if ((!strcmp(a, "-d") || !strcmp(a, "--interval")) && next) {
            c->interval = strtod(argv[++i], NULL);
            c->interval_set = 1;
        } else if ((!strcmp(a, "-n") || !strcmp(a, "--iterations")) && next)
            c->iterations = strtol(argv[++i], NULL, 10);
        else if ((!strcmp(a, "-o") || !strcmp(a, "--output")) && next)
            c->output = argv[++i];
        else if (!strcmp(a, "--dir") && next)
            c->o.dir = argv[++i];
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            exit(0);
        } else {
            fprintf(stderr, "xseg-top: unknown or incomplete option '%s'\n", a);
            usage(stderr);
            return -1;
        }
    }
    if (c->interval <= 0 || c->interval > 3600) {
        fprintf(stderr, "xseg-top: --interval must be in (0, 3600] seconds\n");
        return -1;
    }
    if (c->json || c->prom || c->output)
        c->once = 1;
    return 0;
}

static void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR && !g_stop)
        ;
}

static int scan(const cli *c, top_sample *s)
{
    if (top_scan(&c->o, s) == 0)
        return 0;
    fprintf(stderr, "xseg-top: cannot read %s: %s\n", c->o.dir, strerror(errno));
    return -1;
}

/* 0, or -1 when the text could not be made (the reason is on stderr). */
static int render_once(const cli *c, FILE *out, const top_sample *s)
{
    if (c->prom)
        return top_render_prom(out, s);
    if (c->json)
        top_render_json(out, s, &c->o);
    else
        top_render_text(out, s, &c->o);
    return 0;
}

/* Write to FILE.tmp and rename it over FILE (textfile collectors must never
 * see a half-written file). */
static int write_output(const cli *c, const top_sample *s)
{
    if (!c->output) {
        int rc = render_once(c, stdout, s);
        return fflush(stdout) == 0 && rc == 0 ? 0 : 1;
    }
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", c->output);
    FILE *f = fopen(tmp, "w");
    if (!f) {
        fprintf(stderr, "xseg-top: cannot write %s: %s\n", tmp, strerror(errno));
        return 1;
    }
    if (render_once(c, f, s) != 0) {
        fclose(f);
        unlink(tmp);
        return 1;
    }
    if (fclose(f) != 0 || rename(tmp, c->output) != 0) {
        fprintf(stderr, "xseg-top: cannot write %s: %s\n", c->output, strerror(errno));
        unlink(tmp);
        return 1;
    }
    return 0;
}

static int run_once(const cli *c)
{
    top_sample prev = {0}, s = {0};
    int rc = 1;
    if (c->interval_set) {
        if (scan(c, &prev) != 0)
            goto out;
        sleep_s(c->interval);
    }
    if (scan(c, &s) != 0)
        goto out;
    top_rates(&s, c->interval_set ? &prev : NULL);
    rc = write_output(c, &s);
out:
    top_sample_free(&prev);
    top_sample_free(&s);
    return rc;
}

static void restore_tty(void)
{
    if (g_raw)
        tcsetattr(STDIN_FILENO, TCSANOW, &g_saved);
    g_raw = 0;
}

static void on_signal(int sig)
{
    (void)sig;
    g_stop = 1;
}

static void raw_tty(void)
{
    struct termios t;
    if (!isatty(STDIN_FILENO) || tcgetattr(STDIN_FILENO, &g_saved) != 0)
        return;
    t = g_saved;
    t.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
    t.c_cc[VMIN] = 0;
    t.c_cc[VTIME] = 0;
    if (tcsetattr(STDIN_FILENO, TCSANOW, &t) == 0) {
        g_raw = 1;
        atexit(restore_tty);
    }
}

/* Wait up to `s` seconds for a key; 1 when 'q' was pressed. */
static int wait_key(double s)
{
    if (!g_raw) {
        sleep_s(s);
        return 0;
    }
    fd_set in;
    FD_ZERO(&in);
    FD_SET(STDIN_FILENO, &in);
    struct timeval tv = {(time_t)s, (suseconds_t)((s - (double)(time_t)s) * 1e6)};
    char ch = 0;
    if (select(STDIN_FILENO + 1, &in, NULL, NULL, &tv) > 0 && read(STDIN_FILENO, &ch, 1) == 1)
        return ch == 'q' || ch == 'Q';
    return 0;
}

static int run_live(const cli *c)
{
    top_sample a = {0}, b = {0}, *cur = &a, *prev = NULL;
    int tty = isatty(STDOUT_FILENO);
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    raw_tty();
    for (long n = 0; !g_stop && (!c->iterations || n < c->iterations); n++) {
        if (scan(c, cur) != 0)
            break;
        top_rates(cur, prev);
        if (tty)
            fputs("\033[H\033[2J", stdout);
        top_render_text(stdout, cur, &c->o);
        fflush(stdout);
        prev = cur;
        cur = cur == &a ? &b : &a;
        if ((!c->iterations || n + 1 < c->iterations) && wait_key(c->interval))
            break;
    }
    restore_tty();
    top_sample_free(&a);
    top_sample_free(&b);
    return 0;
}

int main(int argc, char **argv)
{
    cli c;
    if (parse_args(argc, argv, &c) != 0)
        return 2;
    return c.once ? run_once(&c) : run_live(&c);
}
