/* What `memtrace record` does after the command exits: symbolize each trace on the machine that
 * recorded it, then print per file what it holds and the commands to run next. */
#ifndef MT_RECORD_SUMMARY_H
#define MT_RECORD_SUMMARY_H

/* manifest: the file the recorders appended "pid path" lines to. */
void mt_record_summarize(const char *manifest, int symbolize, int quiet);

#endif
