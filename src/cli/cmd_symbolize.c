/* memtrace symbolize TRACE...: name the native frames of traces (appends MT_REC_SYMBOL chunks).
 * One line of stats per file on stdout; a file that cannot be symbolized gives one line on
 * stderr and exit status 2 (the other files are still done). */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "memtrace/symbols.h"

static void usage(FILE *out)
{
    fputs("usage: memtrace symbolize [--help] TRACE...\n\n"
          "Resolves every native frame of each trace that has no symbol yet to function, file\n"
          "and line (ELF symbol tables, DWARF of the module or of its separate debug file,\n"
          "inlined frames included) and appends the symbols to the trace. A trace cut short\n"
          "(recorder killed) is first trimmed to its last whole chunk. Running it twice adds\n"
          "nothing. Modules whose file is gone or changed (build id), or is not a regular file,\n"
          "stay unresolved. A trace that is not a regular file, is locked by another process,\n"
          "has a damaged chunk, or grows while it is read (still being recorded) is left as it\n"
          "is, with a one-line reason and exit status 2.\n",
          out);
}

int mt_cmd_symbolize(int argc, char **argv)
{
    int nfiles = 0;
    for (int i = 1; i < argc; i++) {
        if (mt_cli_is_help(argv[i])) {
            usage(stdout);
            return 0;
        }
        if (argv[i][0] == '-' && strcmp(argv[i], "-") != 0) {
            usage(stderr);
            return mt_cli_fail("symbolize: unknown option '%s'", argv[i]);
        }
        nfiles++;
    }
    if (nfiles == 0) {
        usage(stderr);
        return 2;
    }
    int status = 0;
    for (int i = 1; i < argc; i++) {
        mt_symbolize_stats st;
        char err[512];
        if (mt_symbolize_trace(argv[i], &st, err, sizeof err) != 0) {
            status = mt_cli_fail("symbolize: %s", err);
            continue;
        }
        printf("%s: %llu ips: %llu resolved, %llu with line, %llu inline frames, "
               "%llu already done, %llu outside modules; %u modules (%u missing, %u with DWARF, "
               "%llu CUs decoded); %llu symbols appended%s; %.3f s\n",
               argv[i], (unsigned long long)st.ips_total, (unsigned long long)st.ips_resolved,
               (unsigned long long)st.ips_with_line, (unsigned long long)st.inline_frames,
               (unsigned long long)st.ips_already, (unsigned long long)st.ips_no_module,
               st.modules, st.modules_missing, st.modules_dwarf,
               (unsigned long long)st.cus_decoded, (unsigned long long)st.symbols_written,
               st.truncated_bytes ? " (partial last chunk cut)" : "", st.seconds);
    }
    return status;
}
