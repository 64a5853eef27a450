# speedscope's own importer (npm package speedscope, pinned in tests/js/package.json) imports every
# fixture's speedscope and folded exports; flamegraph.pl's line rules are checked on the way
# (tests/py/check_speedscope.py). Needs node and `npm ci --prefix tests/js` before configuring
# (scripts/setup.sh does it; .ci/run requires it).
find_program(MT_NODE node)
find_program(MT_PYTHON3_FOR_JS python3)
if(MT_NODE AND MT_PYTHON3_FOR_JS AND EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/js/node_modules/speedscope/package.json)
  add_test(NAME test_speedscope_import
           COMMAND ${MT_PYTHON3_FOR_JS} ${CMAKE_CURRENT_SOURCE_DIR}/py/check_speedscope.py
                   $<TARGET_FILE:memtrace> ${CMAKE_CURRENT_SOURCE_DIR}/data)
else()
  message(STATUS "speedscope import test not registered: needs node and `npm ci --prefix tests/js`")
endif()
