# Python frame reader (src/record/pyframes.c), driven from real interpreters through ctypes.
# Needs a python3 on PATH at configure time; without one the test is not registered.
find_program(MT_PYTHON3 python3)

add_library(pyframes_probe MODULE ${CMAKE_CURRENT_SOURCE_DIR}/py/pyframes_probe.c)
target_include_directories(pyframes_probe PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(pyframes_probe PRIVATE mt_record_core Threads::Threads)

if(MT_PYTHON3)
  add_test(NAME test_pyframes
           COMMAND ${MT_PYTHON3} ${CMAKE_CURRENT_SOURCE_DIR}/py/test_pyframes.py
                   $<TARGET_FILE:pyframes_probe>)
endif()

# The same reader with no Python at all, and with a hand-made fake 3.12 interpreter (no libpython).
add_executable(pyframes_nopython ${CMAKE_CURRENT_SOURCE_DIR}/py/pyframes_fakepy.c)
target_link_libraries(pyframes_nopython PRIVATE mt_record_core)
add_test(NAME test_pyframes_nopython COMMAND pyframes_nopython)

add_executable(pyframes_fakepy ${CMAKE_CURRENT_SOURCE_DIR}/py/pyframes_fakepy.c)
target_compile_definitions(pyframes_fakepy PRIVATE FAKE_PYTHON)
set_target_properties(pyframes_fakepy PROPERTIES ENABLE_EXPORTS ON) # dlsym(RTLD_DEFAULT) finds them
target_link_libraries(pyframes_fakepy PRIVATE mt_record_core)
add_test(NAME test_pyframes_fakepy COMMAND pyframes_fakepy)
