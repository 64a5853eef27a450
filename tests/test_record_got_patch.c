/* GOT patching (src/record/got_patch.c): an object's calls of an imported function reach the
 * stand-in, whatever way the loader bound them, and nothing else changes. The callers are
 * dlopen()ed from tests/got_fixture (see tests/got.cmake); Criterion runs each test in its own
 * process, so every test starts unpatched. */
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "memtrace/record.h"

static mt_got_hook hooks[] = {{.name = "got_target"}, {.name = "got_unused"}};
static int hook_calls;

static int hook_target(int x)
{
    hook_calls++;
    int (*orig)(int) = (int (*)(int))hooks[0].original;
    return orig(x) + 1000;
}

typedef int (*call_fn)(int);

static void *load(const char *stem)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/libmt_got_%s.so", MT_GOTFIX_OUT, stem);
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    cr_assert(h, "dlopen %s: %s", path, dlerror());
    return h;
}

static call_fn caller(void *h)
{
    call_fn f = (call_fn)dlsym(h, "got_call");
    cr_assert(f);
    return f;
}

static mt_got_patcher *new_patcher(void)
{
    hooks[0].hook = (void *)hook_target;
    hooks[1].hook = (void *)hook_target;
    mt_got_patcher *p = mt_got_patcher_new(hooks, 2);
    cr_assert(p);
    return p;
}

/* got_call(x) = got_target(x) * 10; through the stand-in got_target(x) + 1000. */
static void expect_redirected(const char *stem)
{
    call_fn f = caller(load(stem));
    mt_got_patcher *p = new_patcher();
    cr_assert_eq(mt_got_patch_new(p, NULL, 0), 1, "one slot in %s", stem);
    cr_assert_eq(f(1), (1 + 1 + 1000) * 10);
    cr_assert_eq(f(5), (5 + 1 + 1000) * 10);
    cr_assert_eq(hook_calls, 2);
    cr_assert_eq(mt_got_patched_slots(p), 1);
    mt_got_unpatch(p);
    cr_assert_eq(f(1), 20, "unpatched: the original again");
    cr_assert_eq(hook_calls, 2);
    mt_got_patcher_free(p);
}

Test(got_patch, redirects_a_lazily_bound_slot_before_its_first_call)
{
    expect_redirected("caller_lazy");
}

Test(got_patch, redirects_a_slot_bound_at_load_behind_full_relro)
{
    expect_redirected("caller_now");
}

Test(got_patch, redirects_a_glob_dat_slot_of_code_built_without_plt)
{
    expect_redirected("caller_noplt");
}

Test(got_patch, a_lazy_slot_already_called_is_redirected_too)
{
    call_fn f = caller(load("caller_lazy"));
    cr_assert_eq(f(1), 20); /* binds the slot */
    mt_got_patcher *p = new_patcher();
    cr_assert_eq(mt_got_patch_new(p, NULL, 0), 1);
    cr_assert_eq(f(1), 10020);
    mt_got_patcher_free(p);
}

Test(got_patch, only_objects_loaded_since_the_last_call_are_examined)
{
    call_fn early = caller(load("caller_lazy"));
    mt_got_patcher *p = new_patcher();
    cr_assert_eq(mt_got_patch_new(p, NULL, 0), 1);
    cr_assert_eq(mt_got_patch_new(p, NULL, 0), 0, "nothing loaded since");
    call_fn late = caller(load("caller_lazy_late"));
    cr_assert_eq(late(2), 30, "loaded after the patch: not redirected yet");
    cr_assert_eq(mt_got_patch_new(p, NULL, 0), 1);
    cr_assert_eq(late(2), 10030);
    cr_assert_eq(early(2), 10030);
    cr_assert_eq(mt_got_patched_slots(p), 2);
    mt_got_patcher_free(p);
}

Test(got_patch, a_caller_bound_to_another_copy_is_left_alone_and_named)
{
    call_fn shared = caller(load("caller_lazy"));
    mt_got_patcher *p = new_patcher();
    cr_assert_eq(mt_got_patch_new(p, NULL, 0), 1);
    call_fn priv = caller(load("caller_private")); /* bound to libmt_got_callee2's got_target */
    char conflict[256];
    cr_assert_eq(mt_got_patch_new(p, conflict, sizeof conflict), 0);
    cr_assert(strstr(conflict, "libmt_got_caller_private.so"), "named: '%s'", conflict);
    cr_assert_eq(priv(1), 30, "its own copy, called directly: (1 + 2) * 10");
    cr_assert_eq(shared(1), 10020);
    cr_assert_eq(hook_calls, 1);
    mt_got_patcher_free(p);
}

Test(got_patch, the_function_itself_and_its_address_elsewhere_are_unchanged)
{
    void *callee = load("callee");
    int (*target)(int) = (int (*)(int))dlsym(callee, "got_target");
    void *noplt = load("caller_noplt");
    void *(*addr)(void) = (void *(*)(void))dlsym(noplt, "got_address");
    cr_assert_eq(addr(), (void *)target);
    mt_got_patcher *p = new_patcher();
    cr_assert_eq(mt_got_patch_new(p, NULL, 0), 1);
    cr_assert_eq(target(1), 2, "direct calls of the definition are not ours");
    cr_assert_eq(hooks[0].original, (void *)target);
    cr_assert_eq(addr(), (void *)hook_target, "the patched object's own view of the address");
    cr_assert_null(hooks[1].original, "a name nobody imports binds nothing");
    mt_got_patcher_free(p);
}
