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

# The same test under every other interpreter found at configure time, so each minor version of
# pyframes_layout.h is read from a real interpreter of that version: pyenv's (3.6-3.13 on the
# machines this is built on; before 3.10 the reader must refuse) and Debian sid's 3.13, 3.14 and
# 3.15, which scripts/newer-pythons.sh (run by setup.sh) extracts into build/newer-pythons.
# MT_PYFRAMES_PYTHONS adds more: a list of interpreters. Not under the sanitizers: the instrumented probe would be loaded into interpreters
# that were not started with their runtime, and sid's run on another glibc.
if(NOT MEMTRACE_SANITIZE)
  file(GLOB mt_pyenv_pythons "$ENV{HOME}/.pyenv/versions/3.*/bin/python3")
  file(GLOB mt_newer_pythons "${PROJECT_BINARY_DIR}/newer-pythons/bin/python3.*")
  set(MT_PYFRAMES_PYTHONS "" CACHE STRING "more interpreters for test_pyframes (a list)")
  foreach(py IN LISTS mt_pyenv_pythons mt_newer_pythons MT_PYFRAMES_PYTHONS)
    if(py MATCHES "/versions/([^/]+)/bin/python3$")
      set(mt_py_name "${CMAKE_MATCH_1}")            # pyenv: the version's directory, 3.12.1
    else()
      get_filename_component(mt_py_name "${py}" NAME) # python3.14
      string(REGEX REPLACE "^python" "" mt_py_name "${mt_py_name}")
    endif()
    if(TEST test_pyframes_${mt_py_name})
      continue()
    endif()
    add_test(NAME test_pyframes_${mt_py_name}
             COMMAND ${py} ${CMAKE_CURRENT_SOURCE_DIR}/py/test_pyframes.py
                     $<TARGET_FILE:pyframes_probe>)
  endforeach()
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

# The recorder's Python frames on the GPU, one fixture per interpreter: samples/cuda_ctypes.py
# recorded under CPython 3.12, 3.14 and 3.15 (gpu-check.sh, section "pythons"; tests/data/README.md).
# Every stack live at the peak must name its Python functions and lines, with its exact bytes.
if(MT_PYTHON3)
  file(GLOB mt_ctypes_traces "${CMAKE_CURRENT_SOURCE_DIR}/data/cuda_ctypes_py*.mtrace")
  foreach(trace IN LISTS mt_ctypes_traces)
    string(REGEX REPLACE ".*cuda_ctypes_py(.*)\\.mtrace$" "\\1" mt_py_name "${trace}")
    add_test(NAME python_frames_fixture_${mt_py_name}
             COMMAND sh -c "\"$1\" export --format folded --frames python \"$2\" > \"$3\" && \
                            \"$4\" \"$5\" \"$3\" \"$6\""
                     sh $<TARGET_FILE:memtrace> ${trace}
                     ${CMAKE_CURRENT_BINARY_DIR}/cuda_ctypes_py${mt_py_name}.folded ${MT_PYTHON3}
                     ${PROJECT_SOURCE_DIR}/scripts/python_frames_check.py
                     ${CMAKE_CURRENT_SOURCE_DIR}/data/cuda_ctypes.py)
  endforeach()
endif()
