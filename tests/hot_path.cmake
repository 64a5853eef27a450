# The recorder's hot-path functions lie side by side in the library as built (src/record/hot_path.h
# says why; tests/support/hot_path_span.sh checks it). Not under the sanitizers, whose
# instrumentation makes the same functions several times larger, nor unoptimized.
if(TARGET memtrace_inject AND NOT MEMTRACE_SANITIZE AND NOT CMAKE_BUILD_TYPE STREQUAL "Debug")
  find_program(MT_NM nm)
  if(MT_NM)
    add_test(NAME recorder_hot_path_is_contiguous
             COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/support/hot_path_span.sh
                     $<TARGET_FILE:memtrace_inject> ${PROJECT_SOURCE_DIR}/src/record)
  endif()
endif()
