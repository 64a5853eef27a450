/* libFuzzer harness, file level: the input is a whole .mtrace file (header, chunks, anything).
 * Most mutations break a CRC, so this one mostly exercises framing, resynchronisation and the
 * header checks; fuzz_trace_payload.c reaches the record decoder. Run: tests/fuzz/README.md. */
#include <stddef.h>
#include <stdint.h>
#include <unistd.h>

#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[64];
    int fd = mt_fuzz_memfile(data, size, path, sizeof path);
    if (fd < 0) return 0;
    mt_fuzz_use_trace(path);
    close(fd);
    return 0;
}
