#!/usr/bin/env bash
# newer-pythons.sh — CPython interpreters newer than Debian 12's, for the Python frame reader's
# tests (tests/py/test_pyframes.py), without installing them.
#
#   bash scripts/newer-pythons.sh [DEST [VERSION...]]   # default: build/newer-pythons 3.13 3.14 3.15
#
# Why: the recorder reads a thread's Python frames with per-version struct offsets
# (src/record/pyframes_layout.h), so every minor version it supports must be tested against that
# version's real interpreter. Debian 12 has only 3.11; Debian unstable (sid) builds the newer ones.
# Their packages are extracted under DEST, never installed: sid's interpreter needs sid's glibc,
# so DEST/bin/python3.X runs it through sid's own dynamic loader with sid's libraries, and the
# system's glibc stays as it is. The package versions are whatever sid has today (its index is read
# each time), so the version each test ran is printed by the test itself.
# NEWER_PYTHONS_OFFLINE=1 downloads nothing and uses DEST/files and DEST/debs from an earlier run
# (the GPU machine has no network: scripts/gpu-check.sh, section "pythons", carries them there).
set -euo pipefail
cd "$(dirname "$0")/.."
DEST=${1:-build/newer-pythons}
shift || true
VERSIONS=${*:-3.13 3.14 3.15}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
mkdir -p "$DEST/debs" "$DEST/root" "$DEST/bin"
DEST=$(cd "$DEST" && pwd)

# What ctypes and the test's imports need at run time, beside the interpreter's own packages.
LIBS="libc6 libgcc-s1 libffi8 zlib1g libexpat1 libzstd1 libmpdec4 libbz2-1.0 liblzma5 libcrypt1
      libuuid1"
if [ -z "${NEWER_PYTHONS_OFFLINE:-}" ]; then
    curl -fsS --retry 3 -o "$DEST/Packages.xz" "$MIRROR/dists/sid/main/binary-amd64/Packages.xz"
    xz -dc "$DEST/Packages.xz" | awk '/^Package: /{p=$2} /^Filename: /{print p, $2}' > "$DEST/files"
    rm -f "$DEST/Packages.xz"
fi

fetch() { # package name -> extracted into root
    local file
    file=$(awk -v p="$1" '$1 == p {print $2; exit}' "$DEST/files")
    if [ -z "$file" ]; then
        echo "newer-pythons: Debian sid has no package $1" >&2
        return 1
    fi
    local deb="$DEST/debs/${file##*/}"
    [ -s "$deb" ] || curl -fsS --retry 3 -o "$deb" "$MIRROR/$file"
    dpkg-deb -x "$deb" "$DEST/root"
}

for lib in $LIBS; do fetch "$lib"; done
LOADER=$DEST/root/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2
LIBPATH=$DEST/root/usr/lib/x86_64-linux-gnu:$DEST/root/lib/x86_64-linux-gnu
for v in $VERSIONS; do
    for pkg in "python$v-minimal" "libpython$v-minimal" "libpython$v-stdlib"; do fetch "$pkg"; done
    cat > "$DEST/bin/python$v" << EOF
#!/bin/sh
# Debian sid's python$v, run with sid's glibc (scripts/newer-pythons.sh)
PYTHONHOME=$DEST/root/usr exec $LOADER --library-path $LIBPATH $DEST/root/usr/bin/python$v "\$@"
EOF
    chmod +x "$DEST/bin/python$v"
    "$DEST/bin/python$v" -c 'import ctypes, sys; print(sys.executable, sys.version.split()[0])'
done
