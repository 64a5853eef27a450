# Runs that died of torch.OutOfMemoryError, recorded on the GPU (tests/data/oom_*.mtrace, by
# samples/oom.py): the report's failed requests against what PyTorch's OOM observer said then
# (tests/data/oom_*.stats.json), by scripts/oom_check.py, as gpu-check.sh checks them there
# (under backend:cudaMallocAsync, which has no observer: what its error's message said).
find_program(MT_PYTHON3 python3)
if(MT_PYTHON3)
  foreach(mt_oom IN ITEMS "oom_frac|" "oom_dev|--driver-refused" "oom_dev_t|--driver-refused"
                          "oom_exp|--driver-refused"
                          "oom_graph_t|" "oom_bwd_t|" "ddp_oom_rank1|" "oom_ckpt_t|--recompute"
                          "oom_bwd_ta|--async" "oom_bwd_async|--async")
    string(REPLACE "|" ";" mt_oom "${mt_oom}")
    list(GET mt_oom 0 mt_oom_name)
    list(LENGTH mt_oom mt_oom_len)
    set(mt_oom_flag "")
    if(mt_oom_len GREATER 1)
      list(GET mt_oom 1 mt_oom_flag)
    endif()
    add_test(NAME oom_fixture_${mt_oom_name}
             COMMAND sh -c "\"$1\" report --json \"$2\" > \"$3\" && \"$4\" \"$5\" \"$3\" \"$6\" $7 \
                            | tee /dev/stderr | grep -qx ok"
                     sh $<TARGET_FILE:memtrace> ${CMAKE_CURRENT_SOURCE_DIR}/data/${mt_oom_name}.mtrace
                     ${CMAKE_CURRENT_BINARY_DIR}/${mt_oom_name}.report.json ${MT_PYTHON3}
                     ${PROJECT_SOURCE_DIR}/scripts/oom_check.py
                     ${CMAKE_CURRENT_SOURCE_DIR}/data/${mt_oom_name}.stats.json ${mt_oom_flag})
  endforeach()
endif()
