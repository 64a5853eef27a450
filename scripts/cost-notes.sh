# cost-notes.sh — sourced by overhead.sh and api-cost.sh (not run on its own).
#
#   cost_notes MEMTRACE TRACE LABEL
# prints the recorder's self-measurements that TRACE carries as notes (callback time, stack
# capture, unwinder, NVML sampler, the writer thread, the clock), each line prefixed with "LABEL: ".
cost_notes() {
  "$1" dump "$2" 2>/dev/null | grep -o '"callbacks: [^"]*\|"tensor reports: [^"]*\|"tensor reports, whole: [^"]*\|"time stamps: [^"]*\|"hooked calls: [^"]*\|"stack capture: [^"]*\|"events: [^"]*\|"unwinder: [^"]*\|"NVML sampler: [^"]*\|"writer thread: [^"]*' \
    | sed "s/^/$3: /"
}
