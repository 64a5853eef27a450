/* The file behind an mt_out (out_file.c): the rules that keep an export from destroying data.
 * Private to the exporters. */
#ifndef MT_EXPORT_OUT_FILE_H
#define MT_EXPORT_OUT_FILE_H

#include <stddef.h>

#include "memtrace/export.h"

typedef struct mt_out_file {
    int fd;        /* where the bytes go (STDOUT_FILENO for "-") */
    int is_stdout; /* "-" */
    int in_place;  /* an existing device, pipe or terminal, written to directly */
    int unnamed;   /* fd is an O_TMPFILE: it gets its name at commit */
    int replace;   /* commit replaces an existing regular file (force) */
    char path[4096];
    char tmp[4200]; /* the temporary name while there is one, else "" */
} mt_out_file;

/* Checks path against the rules and opens where the output is written. -1 with a one-line reason
 * in err (nothing was created). */
int mt_out_file_open(mt_out_file *of, const char *path, const mt_out_options *opt, char *err,
                     size_t errlen);
/* The output is complete: flush it to disk and give it its name. -1 with errno (the name is
 * untouched then). Call only after every byte was written without error. */
int mt_out_file_commit(mt_out_file *of);
/* Closes; removes the temporary file unless it was committed. */
void mt_out_file_close(mt_out_file *of);
#endif
