/* textbuf.c: the bounded text appender (see textbuf.h). */
#include "textbuf.h"

#include <stdarg.h>
#include <stdio.h>

void xtb_put(xtb *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    size_t room = b->len < b->cap ? b->cap - b->len : 0;
    int n = vsnprintf(room ? b->p + b->len : NULL, room, fmt, ap);
    va_end(ap);
    if (n > 0)
        b->len += (size_t)n;
}
