# The recorder's count of calls in progress (tests/inject/inflight_test.c): built from
# src/record/cuda/inflight.c with CUPTI's headers, as libmemtrace_inject.so is; not where CUPTI is
# missing.
if(TARGET memtrace_inject)
  add_executable(test_inject_inflight ${CMAKE_CURRENT_SOURCE_DIR}/inject/inflight_test.c
                                      ${PROJECT_SOURCE_DIR}/src/record/cuda/inflight.c)
  target_include_directories(test_inject_inflight PRIVATE ${PROJECT_SOURCE_DIR}/src/record/cuda
                             ${PROJECT_SOURCE_DIR}/src/util ${CUPTI_INCLUDE_DIR} ${CUDA_INCLUDE_DIR})
  target_link_libraries(test_inject_inflight PRIVATE PkgConfig::CRITERION Threads::Threads)
  add_test(NAME test_inject_inflight COMMAND test_inject_inflight --jobs 1)
endif()
