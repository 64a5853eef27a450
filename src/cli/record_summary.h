/* What `memtrace record` does around the command: the libraries it injects (record_libs.c), the
 * output pattern and its directory before it starts (record_output.c); after it exits, waiting for traced processes that outlived it
 * (record_wait.c), then symbolizing each trace on the machine that recorded it and printing per
 * file what it holds and the commands to run next (record_summary.c). */
#ifndef MT_RECORD_SUMMARY_H
#define MT_RECORD_SUMMARY_H

#include <signal.h>
#include <stddef.h>

/* record_libs.c: the recorder library and CUPTI for the command (paths in out). 0, or -1 when
 * not found. */
int mt_record_find_inject(char *out, size_t len);
int mt_record_find_cupti(const char *cmd, char *out, size_t len);

/* The pattern the recorders get: pattern itself when it holds %p or %r, else with ".%p" inserted
 * before the extension of its last component. Returns 1 when it added the pid. */
int mt_record_pattern_per_process(const char *pattern, char *out, size_t len);
/* 0 when the directory of abs_pattern exists and files can be created in it (%h expanded; with
 * %c or %r in it, the part before that component); else -1 with a one-line reason in err. */
int mt_record_check_dir(const char *abs_pattern, char *err, size_t errlen);

/* 1 when process pid holds the file at path open, 0 when not (or gone), -1 when it is alive but
 * its descriptors cannot be looked at. */
int mt_trace_held_open(int pid, const char *path);
/* Waits until no process of the manifest holds its trace open, or *stop is set (Ctrl-C). Returns
 * how many still do. */
int mt_record_wait_writers(const char *manifest, int quiet, volatile sig_atomic_t *stop);

/* manifest: the file the recorders appended "pid path" lines to. A trace still held open by its
 * process is neither symbolized nor summarized (a line says so). */
void mt_record_summarize(const char *manifest, int symbolize, int quiet);

#endif
