# Symbolizer tests (tests/test_symbols_*.c): a fixture shared library built -g -O1 whose
# functions return real return addresses, plus a stripped copy of it whose DWARF lives in a
# separate file found through .gnu_debuglink.
include(CheckLanguage)
check_language(CXX)
set(MT_SYMFIX_DIR ${CMAKE_CURRENT_SOURCE_DIR}/symbols_fixture)
set(MT_SYMFIX_SOURCES ${MT_SYMFIX_DIR}/fixture.c)
if(CMAKE_CXX_COMPILER)
  enable_language(CXX)
  list(APPEND MT_SYMFIX_SOURCES ${MT_SYMFIX_DIR}/fixture_cxx.cpp)
endif()
add_library(mt_symfix SHARED ${MT_SYMFIX_SOURCES})
# -O1 so that inlining and register allocation are real; no sibling calls so every captured
# return address stays inside the function that made the call.
target_compile_options(mt_symfix PRIVATE -g -O1 -fno-optimize-sibling-calls)
if(CMAKE_CXX_COMPILER)
  target_compile_definitions(mt_symfix PRIVATE MT_SYMFIX_HAVE_CXX=1)
endif()

# Copies with the same layout and build id as the original: stripped of everything, with its
# DWARF in a separate file named by .gnu_debuglink; and stripped of DWARF only (.symtab kept).
find_program(MT_OBJCOPY objcopy)
set(MT_SYMFIX_STRIPPED_DIR ${CMAKE_CURRENT_BINARY_DIR}/symfix_stripped)
if(MT_OBJCOPY)
  add_custom_command(TARGET mt_symfix POST_BUILD
    COMMAND ${CMAKE_COMMAND} -E make_directory ${MT_SYMFIX_STRIPPED_DIR}
    COMMAND ${MT_OBJCOPY} --only-keep-debug $<TARGET_FILE:mt_symfix>
            ${MT_SYMFIX_STRIPPED_DIR}/libmt_symfix_stripped.so.debug
    COMMAND ${MT_OBJCOPY} --strip-all
            --add-gnu-debuglink=${MT_SYMFIX_STRIPPED_DIR}/libmt_symfix_stripped.so.debug
            $<TARGET_FILE:mt_symfix> ${MT_SYMFIX_STRIPPED_DIR}/libmt_symfix_stripped.so
    COMMAND ${MT_OBJCOPY} --strip-debug
            $<TARGET_FILE:mt_symfix> ${MT_SYMFIX_STRIPPED_DIR}/libmt_symfix_nodebug.so
    VERBATIM)
endif()

foreach(t test_symbols_resolve test_symbols_trace)
  if(TARGET ${t})
    target_sources(${t} PRIVATE ${MT_SYMFIX_DIR}/fixture_module.c)
    target_include_directories(${t} PRIVATE ${MT_SYMFIX_DIR})
    target_link_libraries(${t} PRIVATE mt_symfix ${CMAKE_DL_LIBS})
    target_compile_definitions(${t} PRIVATE
      MT_SYMFIX_STRIPPED="${MT_SYMFIX_STRIPPED_DIR}/libmt_symfix_stripped.so"
      MT_SYMFIX_NODEBUG="${MT_SYMFIX_STRIPPED_DIR}/libmt_symfix_nodebug.so"
      MT_SYMFIX_HAVE_OBJCOPY=$<BOOL:${MT_OBJCOPY}>)
  endif()
endforeach()
