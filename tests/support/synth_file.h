/* synth_file.h — a synthetic trace file that looks like a PyTorch program's: the generator behind
 * tests/tools/synth_trace (the HTML report's scale test) and tests/bench/bench_compact (the
 * analysis benchmark, README), so both measure the same file.
 *
 * The events are trace/synthetic.h's stream (4 threads, 100..900 live cudaMalloc allocations of
 * 300 sizes, ~30 µs apart per thread, FREE carrying the size). Around them: a PROCESS and a
 * DEVICE record, NVML process samples every 50 ms of trace time (the live bytes plus a 600 MiB
 * context), and stacks with names: the generator's 256 stack ids become leaves of a trie of
 * Python frames (train.py, torch's Module._call_impl, model.py's blocks), an ATen operator, the
 * caching allocator (or cuBLAS for one operator in eight) and cudaMalloc, 12 frames deep.
 * Parents always have smaller node ids than their children. The same (events, seed) always gives
 * the same file. */
#ifndef MT_TEST_SYNTH_FILE_H
#define MT_TEST_SYNTH_FILE_H

#include <stdint.h>

/* Writes `events` memory events to path (created or truncated). 0, or -1 with errno set. */
int mt_synth_file_write(const char *path, uint64_t events, uint64_t seed);
/* The same stream as a `record --tensors` trace: every event a tensor that PyTorch's caching
 * allocator reported (its `allocated` counter in aux, predicted by the format as in a real trace,
 * so the reader decodes them as fast), and the third and fourth threads' stacks a backward pass's
 * (torch::autograd::Engine) and an optimizer step's (torch/optim/adamw.py), so that the
 * analysis's categories and phases, and its pass 2, have work to do. No segments: the
 * reservation around the tensors is not modelled. */
int mt_synth_file_write_tensors(const char *path, uint64_t events, uint64_t seed);

#endif
