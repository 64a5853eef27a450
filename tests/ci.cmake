# memtrace in CI (check, diff, Markdown, JSON schema, the sample workflow). Synthetic traces with
# numbers known by construction (support/ci_traces.c) serve the C test test_ci_gates directly and
# the Python checks through the make_ci_traces program.
add_executable(make_ci_traces ${CMAKE_CURRENT_SOURCE_DIR}/tools/make_ci_traces.c
                              ${CMAKE_CURRENT_SOURCE_DIR}/support/ci_traces.c)
target_include_directories(make_ci_traces PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/support)
target_link_libraries(make_ci_traces PRIVATE mt_trace)
if(TARGET test_ci_gates)
  target_sources(test_ci_gates PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/support/ci_traces.c)
endif()

find_program(MT_PYTHON3_FOR_CI python3)
find_program(MT_NODE_FOR_CI node)
if(MT_PYTHON3_FOR_CI)
  # every JSON output against docs/json.md and the released schemas in tests/json
  add_test(NAME test_json_schema
           COMMAND ${MT_PYTHON3_FOR_CI} ${CMAKE_CURRENT_SOURCE_DIR}/py/check_json_schema.py
                   $<TARGET_FILE:memtrace> $<TARGET_FILE:make_ci_traces>
                   ${CMAKE_CURRENT_SOURCE_DIR}/data ${PROJECT_SOURCE_DIR}/docs/json.md
                   ${CMAKE_CURRENT_SOURCE_DIR}/json)
endif()
# The Markdown summaries rendered by markdown-it, the sample workflow parsed by `yaml` (npm
# packages pinned in tests/js/package.json; `npm ci --prefix tests/js`, which setup.sh runs and
# .ci/run requires).
if(MT_PYTHON3_FOR_CI AND MT_NODE_FOR_CI AND
   EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/js/node_modules/markdown-it/package.json AND
   EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/js/node_modules/yaml/package.json)
  add_test(NAME test_markdown_render
           COMMAND ${MT_PYTHON3_FOR_CI} ${CMAKE_CURRENT_SOURCE_DIR}/py/check_markdown.py
                   $<TARGET_FILE:memtrace> $<TARGET_FILE:make_ci_traces>
                   ${CMAKE_CURRENT_SOURCE_DIR}/data)
  add_test(NAME test_sample_workflow
           COMMAND ${MT_PYTHON3_FOR_CI} ${CMAKE_CURRENT_SOURCE_DIR}/py/check_workflow.py
                   $<TARGET_FILE:memtrace> $<TARGET_FILE:make_ci_traces>
                   ${PROJECT_SOURCE_DIR}/samples/ci/github-actions.yml)
else()
  message(STATUS "Markdown and workflow checks not registered: need node and `npm ci --prefix tests/js`")
endif()
