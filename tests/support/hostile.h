/* Hostile traces: small files built to make a reader do far more work than their size warrants.
 * Each is a regression case of issue 13 (tests/test_hostile.c) and a seed of the fuzzers
 * (tests/fuzz/). All are written with the ordinary writer, so they are valid traces. */
#ifndef MT_HOSTILE_H
#define MT_HOSTILE_H
#include <stddef.h>
#include <stdint.h>

/* One stack node with id `id` (2^26 - 1 made the compactor zero a 3 GiB node array) and one
 * allocation on it. */
int mt_hostile_id_bomb(const char *path, uint32_t id);
/* One allocation on each of n distinct device ordinals (0, 1, ..., and a few negative ones). */
int mt_hostile_devices(const char *path, uint32_t n);
/* One allocation on each of n_devices ordinals, then n_frees frees with device -1 of addresses
 * nothing allocated (each was looked up on every device). */
int mt_hostile_unknown_device_frees(const char *path, uint32_t n_devices, uint32_t n_frees);
/* A parent cycle of `ring` nodes (1 -> ring -> ring-1 -> ... -> 1) and `leaves` leaves hanging
 * off it, each with a live allocation at the end. */
int mt_hostile_parent_cycle(const char *path, uint32_t ring, uint32_t leaves);
/* A chain of `depth` nodes and `leaves` leaves under its deepest node, each with a live
 * allocation. */
int mt_hostile_deep_chain(const char *path, uint32_t depth, uint32_t leaves);
/* `live` allocations on device 0, then one on each of `devices` other ordinals (each of which
 * peaks then): every device's peak needs a look at what is live. */
int mt_hostile_peaks_over_a_big_live_set(const char *path, uint32_t live, uint32_t devices);
/* n POOL_RESERVED events, each for a pool handle not seen before. */
int mt_hostile_many_pools(const char *path, uint32_t n);
/* n VMM mappings, each below the previous one (every insertion at the front of a sorted list),
 * then unmapped in the same order. */
int mt_hostile_descending_maps(const char *path, uint32_t n);
/* `live` allocations in context 1, then n times: an allocation in context 2 and its context's
 * destruction. */
int mt_hostile_context_churn(const char *path, uint32_t live, uint32_t n);
/* n NVML samples stamped far in the future, then `events` allocations and frees (a sample
 * every 1000): every change was applied to every pending sample, and every sample looked at the
 * whole history of changes. */
int mt_hostile_future_samples(const char *path, uint32_t samples, uint32_t events);
/* Tensors (record --tensors): `live` activations (a Python frame Net.forward), then n times an
 * optimizer temporary (a frame under torch/optim/) and an activation: every other allocation ends
 * an optimizer step, whose promotion once walked the whole live set. */
int mt_hostile_phase_churn(const char *path, uint32_t live, uint32_t n);
/* One tensor allocated at line `line` of a Python function in `filename` (a path the by-line
 * table and the HTML report read source text from). */
int mt_hostile_python_source(const char *path, const char *filename, uint32_t line);
/* The same, recorded from realtime_ns on the wall clock (0: not known; then no source file counts
 * as modified after the recording). */
int mt_hostile_python_source_at(const char *path, const char *filename, uint32_t line,
                                uint64_t realtime_ns);
#endif
