/* memtrace/pause.h — for a program recorded by `memtrace record`: switch recording off and on.
 * The only symbol the injected recorder (libmemtrace_inject.so) exports for programs; a program
 * that is not recorded does not have it, so look it up rather than link to it. */
#ifndef MEMTRACE_PAUSE_H
#define MEMTRACE_PAUSE_H

#ifdef __cplusplus
extern "C" {
#endif

/* Defined by the recorder (libmemtrace_inject.so), not by these libraries: a program recorded by
 * `memtrace record` finds it with dlsym(RTLD_DEFAULT, "memtrace_set_paused") (Python:
 * ctypes.CDLL(None).memtrace_set_paused). 1 pauses recording, 0 resumes it; returns the previous
 * state, or -1 when the process is not being recorded. What happens while paused is not in the
 * trace (a tensor allocated before and freed during a pause looks leaked), nor are nvidia-smi's
 * numbers (the NVML sampler waits too). Made for measuring what recording costs inside one
 * process (samples/cifar.py --ab) and for leaving out phases. */
int memtrace_set_paused(int paused);

#ifdef __cplusplus
}
#endif
#endif
