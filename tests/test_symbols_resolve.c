/* mt_module_syms / mt_demangle against libmt_symfix (tests/symbols_fixture), a real -g -O1
 * library: exact function names, file basenames, line numbers and inline chains, taken from
 * return addresses the library itself captured. */
#include <criterion/criterion.h>
#include <string.h>

#include "fixture.h"
#include "fixture_module.h"
#include "memtrace/symbols.h"

static mt_fix_module fix;

static void setup(void)
{
    cr_assert_eq(mt_fix_find_module("libmt_symfix.so", &fix), 0, "fixture library not loaded");
    cr_assert(fix.build_id_len > 0, "fixture has no build id");
}

TestSuite(symbols_resolve, .init = setup);

static mt_module_syms *open_fixture(const char *path)
{
    char err[512] = "";
    mt_module_syms *m = mt_module_syms_open(path, fix.build_id, fix.build_id_len, err, sizeof err);
    cr_assert_not_null(m, "open %s: %s", path, err);
    return m;
}

/* Resolves a return address the way mt_symbolize_trace does: at ip - 1, as a file address. */
static int resolve_ra(mt_module_syms *m, uint64_t ra, mt_sym_frame *f)
{
    cr_assert(ra >= fix.start && ra < fix.end, "return address outside the fixture");
    return mt_module_syms_resolve(m, ra - 1 - fix.bias, f, MT_SYM_MAX_INLINE);
}

static void expect_frame(const mt_sym_frame *f, const char *func, const char *file, int line)
{
    cr_expect_str_eq(f->function, func);
    cr_expect_str_eq(mt_fix_basename(f->file), file, "file %s, want %s", f->file, file);
    cr_expect_eq(f->line, (uint32_t)line, "%s: line %u, want %d", func, f->line, line);
}

Test(symbols_resolve, demangles_with_the_cxx_runtime)
{
    char *s = mt_demangle("_ZN3c1020CUDACachingAllocator6mallocEPvml");
    cr_assert_not_null(s);
    cr_expect_str_eq(s, "c10::CUDACachingAllocator::malloc(void*, unsigned long, long)");
    free(s);
    cr_expect_null(mt_demangle("main"), "a C name is not mangled");
    /* The length prefix (14) does not match the 20-character identifier: not a valid name. */
    cr_expect_null(mt_demangle("_ZN3c1014CUDACachingAllocator6mallocEPvml"));
    cr_expect_null(mt_demangle(NULL));
}

Test(symbols_resolve, plain_call_has_function_file_and_exact_line)
{
    int line = 0;
    uint64_t ra = mt_fix_call(&line);
    mt_module_syms *m = open_fixture(fix.path);
    cr_expect_eq(mt_module_syms_has_dwarf(m), 1);
    mt_sym_frame f[MT_SYM_MAX_INLINE];
    int n = resolve_ra(m, ra, f);
    cr_assert_eq(n, 1, "frames: %d", n);
    expect_frame(&f[0], "mt_fix_call", "fixture.c", line);
    cr_expect_eq(mt_module_syms_cus_decoded(m), 1, "only the CU holding the address is decoded");
    mt_module_syms_close(m);
}

Test(symbols_resolve, inlined_frames_outermost_first_each_with_its_call_site)
{
    mt_fix_inline_lines l = {0};
    uint64_t ra = mt_fix_inlined(&l);
    mt_module_syms *m = open_fixture(fix.path);
    mt_sym_frame f[MT_SYM_MAX_INLINE];
    int n = resolve_ra(m, ra, f);
    cr_assert_eq(n, 3, "frames: %d", n);
    expect_frame(&f[0], "mt_fix_inlined", "fixture.c", l.outer);
    expect_frame(&f[1], "fix_inline_mid", "fixture_inline.h", l.mid);
    expect_frame(&f[2], "fix_inline_leaf", "fixture_inline.h", l.leaf);
    /* max = 1 keeps the real function only */
    cr_expect_eq(mt_module_syms_resolve(m, ra - 1 - fix.bias, f, 1), 1);
    cr_expect_str_eq(f[0].function, "mt_fix_inlined");
    mt_module_syms_close(m);
}

Test(symbols_resolve, cxx_names_are_demangled)
{
    if (!mt_fix_have_cxx()) {
        cr_skip_test("no C++ compiler: the fixture has no C++ part");
    }
    int line = 0;
    uint64_t ra = mt_fix_cxx(&line);
    mt_module_syms *m = open_fixture(fix.path);
    mt_sym_frame f[MT_SYM_MAX_INLINE];
    cr_assert_eq(resolve_ra(m, ra, f), 1);
    expect_frame(&f[0], "c10::FixAllocator::malloc(void*, unsigned long, int*)",
                 "fixture_cxx.cpp", line);
    mt_module_syms_close(m);
}

Test(symbols_resolve, separate_debug_file_through_gnu_debuglink)
{
    if (!MT_SYMFIX_HAVE_OBJCOPY) cr_skip_test("no objcopy");
    int line = 0;
    uint64_t ra = mt_fix_call(&line);
    mt_module_syms *m = open_fixture(MT_SYMFIX_STRIPPED);
    cr_assert_eq(mt_module_syms_has_dwarf(m), 1);
    const char *dp = mt_module_syms_dwarf_path(m);
    cr_expect_str_eq(mt_fix_basename(dp), "libmt_symfix_stripped.so.debug", "dwarf from %s", dp);
    mt_sym_frame f[MT_SYM_MAX_INLINE];
    cr_assert_eq(resolve_ra(m, ra, f), 1);
    expect_frame(&f[0], "mt_fix_call", "fixture.c", line);
    mt_module_syms_close(m);
}

Test(symbols_resolve, symbol_table_only_names_the_function)
{
    if (!MT_SYMFIX_HAVE_OBJCOPY) cr_skip_test("no objcopy");
    int line = 0;
    uint64_t ra = mt_fix_call(&line);
    mt_module_syms *m = open_fixture(MT_SYMFIX_NODEBUG);
    cr_expect_eq(mt_module_syms_has_dwarf(m), 0);
    mt_sym_frame f[MT_SYM_MAX_INLINE];
    cr_assert_eq(resolve_ra(m, ra, f), 1);
    expect_frame(&f[0], "mt_fix_call", "", 0);
    /* inlined code is attributed to the function it was inlined into */
    mt_fix_inline_lines l;
    cr_assert_eq(resolve_ra(m, mt_fix_inlined(&l), f), 1);
    cr_expect_str_eq(f[0].function, "mt_fix_inlined");
    if (mt_fix_have_cxx()) {
        cr_assert_eq(resolve_ra(m, mt_fix_cxx(&line), f), 1);
        cr_expect_str_eq(f[0].function, "c10::FixAllocator::malloc(void*, unsigned long, int*)");
    }
    mt_module_syms_close(m);
}

Test(symbols_resolve, changed_or_missing_files_are_refused)
{
    char err[512] = "";
    uint8_t wrong[64];
    memcpy(wrong, fix.build_id, fix.build_id_len);
    wrong[0] ^= 0xff;
    cr_expect_null(mt_module_syms_open(fix.path, wrong, fix.build_id_len, err, sizeof err));
    cr_expect(strstr(err, "build id") != NULL, "err: %s", err);
    err[0] = '\0';
    cr_expect_null(mt_module_syms_open("/nonexistent/libgone.so", NULL, 0, err, sizeof err));
    cr_expect(strstr(err, "libgone.so") != NULL, "err: %s", err);
    cr_expect_null(mt_module_syms_open("", NULL, 0, err, sizeof err));
}

Test(symbols_resolve, addresses_outside_any_function_give_nothing)
{
    mt_module_syms *m = open_fixture(fix.path);
    mt_sym_frame f[MT_SYM_MAX_INLINE];
    /* file address 0 is the ELF header: no symbol, no line */
    cr_expect_eq(mt_module_syms_resolve(m, 0, f, MT_SYM_MAX_INLINE), 0);
    mt_module_syms_close(m);
}
