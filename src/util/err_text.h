/* Error text into a caller's buffer: the convention of every function that takes (err, errlen). */
#ifndef MT_UTIL_ERR_TEXT_H
#define MT_UTIL_ERR_TEXT_H

#include <stddef.h>

/* Formats the message into err (when err and errlen are set); returns -1, so that a failing
 * function can end with `return mt_err_text(err, errlen, ...)`. */
int mt_err_text(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
