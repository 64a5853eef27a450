#!/bin/sh
# hot_path_span.sh LIB SRC — exit 0 when the functions marked MT_HOT_PATH in the sources under SRC
# (src/record) lie side by side in LIB (libmemtrace_inject.so): within 16 KiB, so on at most five
# pages of code. Why a test: src/record/hot_path.h says why they are kept together, and a function
# that loses its mark, or a linker that does not gather ".text.hot.*", would only show as a
# slower report on the GPU.
set -eu
# the name before the first "(" of each marked definition, attributes taken out first
names=$(grep -rh '^MT_HOT_PATH ' "$2" |
        sed -E 's/__attribute__\(\([^)]*\)\)//g; s/\(.*//; s/.*[^A-Za-z_0-9]//' | sort -u)
[ -n "$names" ] || { echo "no MT_HOT_PATH functions found under $2"; exit 1; }
nm -S --defined-only "$1" | awk -v names="$names" '
    function hex(s,   v, i) {   # mawk has no strtonum
        v = 0
        for (i = 1; i <= length(s); i++) v = v * 16 + index("0123456789abcdef", substr(s, i, 1)) - 1
        return v
    }
    BEGIN {
        n = split(names, want, /[ \n]+/)
        for (i = 1; i <= n; i++) if (want[i] != "") need[want[i]] = 1
    }
    # A static function that the compiler inlined everywhere is in its callers; one it cloned
    # under another name (f.isra.0, f.constprop.0) keeps the mark. Either is listed, not failed.
    ($3 == "t" || $3 == "T") && ($4 in need) {
        seen[$4] = 1; a = hex($1); e = a + hex($2)
        if (lo == "" || a < lo) lo = a
        if (hi == "" || e > hi) hi = e
        found++
    }
    END {
        for (f in need)
            if (!(f in seen)) print "not in the symbol table by this name (inlined or cloned): " f
        printf "%d hot-path functions span %d bytes (0x%x-0x%x)\n", found, hi - lo, lo, hi
        if (found < 10 || hi - lo > 16384) exit 1
    }'
