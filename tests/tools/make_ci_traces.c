/* make_ci_traces DIR: writes the synthetic traces of tests/support/ci_traces.h into DIR, for the
 * checks run by Python and node (JSON schema, Markdown rendering). */
#include <stdio.h>
#include <sys/stat.h>

#include "ci_traces.h"

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: make_ci_traces DIR\n");
        return 2;
    }
    mkdir(argv[1], 0755);
    return ci_traces_write(argv[1]) < 0 ? 1 : 0;
}
