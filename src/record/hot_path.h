/* hot_path.h — MT_HOT_PATH marks the functions that every recorded allocation or free runs
 * through (the tensor stand-in, the report, the stack's capture, the ring's write), so that the
 * linker keeps them side by side. Private to src/record.
 *
 * Why: between two allocations the program runs ~10 µs of its own code (the dispatcher, the
 * interpreter, kernel launches in libraries of hundreds of MiB), which evicts the recorder's code
 * from the TLB as well as from the caches. Every 4 KiB page of code a report passes through is
 * then a page walk before its first instruction. Left where the compiler puts them (file by file)
 * these functions lie on ~10 pages of the library's code; in one section, on ~3.
 * (docs/performance.md, "The recorder's pages".)
 *
 * The default linker scripts gather ".text.hot" and ".text.hot.*" from every object before the
 * rest of .text; the section attribute changes where a function goes, not how it is compiled. */
#ifndef MT_RECORD_HOT_PATH_H
#define MT_RECORD_HOT_PATH_H

#define MT_HOT_PATH __attribute__((section(".text.hot.memtrace")))

#endif
