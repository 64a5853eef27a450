# The HTML report in a real browser (tests/js/html_check.mjs): Debian's Chromium, headless, driven
# over the DevTools protocol (no npm package, no browser download). Loads the report of every GPU
# fixture and of several traces at once, checks the DOM against `memtrace report --json`, clicks
# through the views, and saves screenshots under build/html-screenshots/ (CI keeps them). The
# scale test makes a 1 M-event synthetic trace (tests/tools/synth_trace.c) and measures its
# report's size and how long Chromium takes to draw it.
add_executable(synth_trace ${CMAKE_CURRENT_SOURCE_DIR}/tools/synth_trace.c
                           ${CMAKE_CURRENT_SOURCE_DIR}/support/synth_file.c)
target_include_directories(synth_trace PRIVATE ${PROJECT_SOURCE_DIR}/src
                                               ${CMAKE_CURRENT_SOURCE_DIR}/support)
target_link_libraries(synth_trace PRIVATE mt_trace)

find_program(MT_NODE_FOR_HTML node)
find_program(MT_CHROMIUM NAMES chromium chromium-browser)
# the template's script must parse: a syntax error would only show in a browser
if(MT_NODE_FOR_HTML)
  add_test(NAME test_html_js_syntax
           COMMAND ${MT_NODE_FOR_HTML} --check ${PROJECT_SOURCE_DIR}/exporters/html/report.js)
endif()
if(MT_NODE_FOR_HTML AND MT_CHROMIUM)
  set(MT_HTML_SHOTS ${CMAKE_BINARY_DIR}/html-screenshots)
  add_test(NAME test_html_browser
           COMMAND ${MT_NODE_FOR_HTML} ${CMAKE_CURRENT_SOURCE_DIR}/js/html_check.mjs fixtures
                   --memtrace $<TARGET_FILE:memtrace> --chromium ${MT_CHROMIUM}
                   --out ${MT_HTML_SHOTS} --data ${CMAKE_CURRENT_SOURCE_DIR}/data
                   --synth $<TARGET_FILE:synth_trace>)
  add_test(NAME test_html_scale
           COMMAND ${MT_NODE_FOR_HTML} ${CMAKE_CURRENT_SOURCE_DIR}/js/html_check.mjs scale
                   --memtrace $<TARGET_FILE:memtrace> --chromium ${MT_CHROMIUM}
                   --out ${MT_HTML_SHOTS} --synth $<TARGET_FILE:synth_trace> --events 1000000)
  set_tests_properties(test_html_browser test_html_scale PROPERTIES TIMEOUT 900)
else()
  message(STATUS "HTML browser tests not registered: need node and chromium (scripts/setup.sh installs them)")
endif()
# the page's data against `memtrace report --json`, for every fixture (no browser needed)
find_program(MT_PYTHON3_FOR_HTML python3)
if(MT_PYTHON3_FOR_HTML)
  add_test(NAME test_html_data
           COMMAND ${MT_PYTHON3_FOR_HTML} ${CMAKE_CURRENT_SOURCE_DIR}/py/check_html_data.py
                   $<TARGET_FILE:memtrace> $<TARGET_FILE:synth_trace> ${CMAKE_CURRENT_SOURCE_DIR}/data)
endif()
