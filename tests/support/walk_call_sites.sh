#!/bin/sh
# walk_call_sites.sh LIB — exit 0 when the recorder's stack capture (mt_capture_stack in LIB,
# libmemtrace_inject.so) calls the unwinder's lazy walk from exactly one instruction.
# Why a test: the return address of that call is a frame of every walk, so a second copy of the
# call (the compiler duplicated it once for the timed path, src/record/cuda/stacks.c find_site)
# makes every call site two walks, and nothing else would notice.
set -eu
n=$(objdump -d --no-show-raw-insn "$1" |
    awk '/^[0-9a-f]+ <.*>:$/ { fn = $2 } fn == "<mt_capture_stack>:" && /call.*<mt_unwind_keyed_lazy>/ { n++ }
         END { print n + 0 }')
echo "mt_capture_stack calls mt_unwind_keyed_lazy from $n place(s)"
[ "$n" = 1 ]
