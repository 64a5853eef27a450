/* The error text of a function that fills a caller's buffer (err, errlen) and fails. */
#include <stdarg.h>
#include <stdio.h>

#include "err_text.h"

int mt_err_text(char *err, size_t errlen, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}
