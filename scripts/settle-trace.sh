# settle-trace.sh — sourced by the GPU scripts (not run on its own).
#
#   settle_trace DIR/NAME.mtrace
# `memtrace record -o DIR/NAME.mtrace` writes DIR/NAME.<pid>.mtrace: every trace's name holds the
# pid of its process, so that processes never share a file. For the scripts' single-process runs
# this renames the newest such file to DIR/NAME.mtrace (replacing it), the name they read next.
settle_trace() {
  local want=$1 newest
  newest=$(ls -t "${want%.mtrace}".[0-9]*.mtrace 2>/dev/null | head -n 1)
  [ -n "$newest" ] && mv -f "$newest" "$want"
}
