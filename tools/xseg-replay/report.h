/* report.h: xseg-replay's output: a human-readable table or JSON. */
#ifndef XSEG_REPLAY_REPORT_H
#define XSEG_REPLAY_REPORT_H

#include <stdio.h>
#include "run.h"

/* Human table: header, then one row (and detail lines) per trace.
 * name_width: the widest trace name to show. */
void report_text_header(FILE *f, int name_width);
void report_text(FILE *f, const replay_report *rep, int name_width);
/* The name shown for a trace: its file name without directories. */
const char *report_name(const char *path);

/* One JSON object (no newline). */
void report_json(FILE *f, const replay_report *rep, const replay_cli *c);
/* The --peak-snapshot line of a trace (peak.h), with its newline; nothing
 * when no snapshot was kept. */
void report_peak_json(FILE *f, const replay_report *rep);

#endif
