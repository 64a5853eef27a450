/* synth_trace: writes the synthetic trace of tests/support/synth_file.h (N memory events that
 * look like a PyTorch program's), for the HTML report's scale test (tests/html.cmake) and for
 * measuring it (README).
 *
 *   usage: synth_trace OUT.mtrace N_EVENTS [SEED]
 */
#include <stdio.h>
#include <stdlib.h>

#include "synth_file.h"

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: synth_trace OUT.mtrace N_EVENTS [SEED]\n");
        return 2;
    }
    uint64_t n = strtoull(argv[2], NULL, 10), seed = argc > 3 ? strtoull(argv[3], NULL, 10) : 1;
    if (mt_synth_file_write(argv[1], n, seed) < 0) {
        perror(argv[1]);
        return 1;
    }
    return 0;
}
