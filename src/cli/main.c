/* memtrace: dispatch to one subcommand. See `memtrace --help`. */
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "memtrace/compact.h"

static const struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} commands[] = {
    {"record", mt_cmd_record, "run a program and trace every GPU memory event it makes"},
    {"report", mt_cmd_report, "peaks, what was live at them and who allocated it, leaks, OOMs"},
    {"export", mt_cmd_export, "Perfetto/Chrome JSON, flame graph stacks, speedscope, HTML report"},
    {"check", mt_cmd_check, "memory budgets for CI: exit 1 when a peak or a leak is too large"},
    {"diff", mt_cmd_diff, "what changed between two runs: peaks, stacks and lines that grew"},
    {"dump", mt_cmd_dump, "every record of a trace as text, one per line"},
    {"symbolize", mt_cmd_symbolize, "resolve a trace's native frames (record does this itself)"},
};

static void usage(FILE *out)
{
    fprintf(out, "memtrace %s — a GPU memory tracer for any CUDA program\n\n"
                 "usage: memtrace <command> [options] ...\n\ncommands:\n",
            MEMTRACE_VERSION);
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(out, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fprintf(out, "\n`memtrace <command> --help` describes each one. Typical use:\n"
                 "  memtrace record -- python train.py\n"
                 "  memtrace report memtrace.python.gpu1.1234.mtrace\n"
                 "  memtrace check --max-peak 20GiB memtrace.python.gpu1.1234.mtrace   # in CI\n");
}

int mt_cli_fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("memtrace: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 2;
}

int mt_cli_is_help(const char *arg)
{
    return strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0;
}

void mt_cli_warn_incomplete(const char *cmd, const struct mt_analysis *a)
{
    if (a->damaged_chunks)
        fprintf(stderr, "memtrace: %s: warning: %s: %llu damaged chunk%s skipped (%llu bytes; the "
                        "first: %s); their records are missing (--strict makes this an error)\n",
                cmd, a->path, (unsigned long long)a->damaged_chunks,
                a->damaged_chunks == 1 ? "" : "s", (unsigned long long)a->damaged_bytes,
                a->damage_msg ? a->damage_msg : "?");
    if (a->truncated)
        fprintf(stderr, "memtrace: %s: warning: %s is truncated (%s): numbers cover what was read\n",
                cmd, a->path, a->truncated_msg ? a->truncated_msg : "?");
}

const char *mt_cli_out_name(const char *path)
{
    return strcmp(path, "-") == 0 ? "standard output" : path;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (mt_cli_is_help(argv[1])) {
        usage(stdout);
        return 0;
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("memtrace %s\n", MEMTRACE_VERSION);
        return 0;
    }
    /* A file-size limit (ulimit -f) makes a write that crosses it fail with EFBIG, which every
     * command reports, instead of killing memtrace with SIGXFSZ. Not for record: the program it
     * runs inherits the disposition (record ignores the signal itself once the program is done,
     * before it symbolizes). */
    if (strcmp(argv[1], "record") != 0) signal(SIGXFSZ, SIG_IGN);
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (strcmp(argv[1], commands[i].name) == 0) return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "memtrace: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
