# The recorder's native walk is called from one instruction (tests/support/walk_call_sites.sh says
# why): checked on the library as built, since it is the compiler that can break it.
if(TARGET memtrace_inject)
  find_program(MT_OBJDUMP objdump)
  if(MT_OBJDUMP)
    add_test(NAME recorder_walk_has_one_call_site
             COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/support/walk_call_sites.sh
                     $<TARGET_FILE:memtrace_inject>)
  endif()
endif()
