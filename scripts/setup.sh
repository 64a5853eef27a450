#!/usr/bin/env bash
# setup.sh — install the Debian packages memtrace needs and build it into ./build.
# The CUDA toolkit (for CUPTI headers and the libcuda link stub) is expected at /usr/local/cuda
# (or CUDA_HOME); without it everything but the recorder is built.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends \
    build-essential cmake pkg-config zlib1g-dev libdwarf-dev libelf-dev libcriterion-dev \
    python3 > /dev/null
# libdeflate: the trace reader inflates chunks with it, twice as fast as zlib (CMakeLists.txt)
$SUDO apt-get install -y -qq --no-install-recommends libdeflate-dev > /dev/null
# The HTML report's browser tests: Debian's Chromium, headless, with a font for its screenshots
# (tests/html.cmake; they leave screenshots in build/html-screenshots/)
$SUDO apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core > /dev/null
# speedscope's own importer for the export tests (tests/js/package.json pins it; the npm registry)
if ! command -v npm > /dev/null; then
    $SUDO apt-get install -y -qq --no-install-recommends npm > /dev/null
fi
npm ci --prefix tests/js --no-audit --no-fund --loglevel=error > /dev/null
# CPython 3.13, 3.14 and 3.15 from Debian sid, extracted into build/newer-pythons (not installed), so
# that the Python frame reader is tested against every version it supports (tests/pyframes.cmake)
$SUDO apt-get install -y -qq --no-install-recommends curl xz-utils > /dev/null
bash scripts/newer-pythons.sh build/newer-pythons > /dev/null ||
    echo "setup: no CPython 3.13-3.15 from Debian sid: their frame reader tests are left out" >&2
# the build, with the analysis optimized by a profile of its own runs (scripts/pgo-build.sh)
bash scripts/pgo-build.sh build
