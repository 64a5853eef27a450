# GOT-patching tests (tests/test_record_got_patch.c): a callee library and callers bound to it in
# each way the loader binds imports. The test dlopen()s them at run time (never links them), so
# that it sees objects loaded before and after a patch, and a caller bound to a private copy.
set(MT_GOTFIX_DIR ${CMAKE_CURRENT_SOURCE_DIR}/got_fixture)
set(MT_GOTFIX_OUT ${CMAKE_CURRENT_BINARY_DIR}/gotlibs)
add_library(mt_got_callee SHARED ${MT_GOTFIX_DIR}/callee.c)
add_library(mt_got_callee2 SHARED ${MT_GOTFIX_DIR}/callee.c)
target_compile_definitions(mt_got_callee2 PRIVATE GOT_STEP=2)
# Two callers of the same library, loaded at different moments of a test: lazy PLT binding (the
# slot points back into the caller until the first call), as Debian's toolchain does by default.
foreach(v lazy lazy_late)
  add_library(mt_got_caller_${v} SHARED ${MT_GOTFIX_DIR}/caller.c)
  target_link_options(mt_got_caller_${v} PRIVATE -Wl,-z,lazy)
  target_link_libraries(mt_got_caller_${v} PRIVATE mt_got_callee)
endforeach()
# Full RELRO: bound at load, the GOT read-only after.
add_library(mt_got_caller_now SHARED ${MT_GOTFIX_DIR}/caller.c)
target_link_options(mt_got_caller_now PRIVATE -Wl,-z,now -Wl,-z,relro)
target_link_libraries(mt_got_caller_now PRIVATE mt_got_callee)
# -fno-plt: calls read the GLOB_DAT slot directly.
add_library(mt_got_caller_noplt SHARED ${MT_GOTFIX_DIR}/caller.c)
target_compile_options(mt_got_caller_noplt PRIVATE -fno-plt)
target_compile_definitions(mt_got_caller_noplt PRIVATE GOT_ADDRESS=1)
target_link_libraries(mt_got_caller_noplt PRIVATE mt_got_callee)
# Bound to the private copy.
add_library(mt_got_caller_private SHARED ${MT_GOTFIX_DIR}/caller.c)
target_link_libraries(mt_got_caller_private PRIVATE mt_got_callee2)
set(MT_GOTFIX_LIBS mt_got_callee mt_got_callee2 mt_got_caller_lazy mt_got_caller_lazy_late
    mt_got_caller_now mt_got_caller_noplt mt_got_caller_private)
set_target_properties(${MT_GOTFIX_LIBS} PROPERTIES
  LIBRARY_OUTPUT_DIRECTORY ${MT_GOTFIX_OUT} BUILD_RPATH "$ORIGIN")
if(TARGET test_record_got_patch)
  add_dependencies(test_record_got_patch ${MT_GOTFIX_LIBS})
  target_compile_definitions(test_record_got_patch PRIVATE MT_GOTFIX_OUT="${MT_GOTFIX_OUT}")
endif()
