/* mt_modules: the main program and libc are reported once with their path, range and build id;
 * a second refresh reports nothing; a dlopen()ed library appears on the next one. */
#include <criterion/criterion.h>
#include <gnu/libc-version.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "memtrace/record.h"

typedef struct seen_module {
    mt_module m;
    char path[4096];
    uint8_t build_id[64];
} seen_module;

typedef struct collected {
    seen_module mods[512];
    int n;
} collected;

static void collect(void *ctx, const mt_module *m)
{
    collected *c = ctx;
    if (c->n == 512) return;
    seen_module *s = &c->mods[c->n++];
    s->m = *m;
    snprintf(s->path, sizeof s->path, "%s", m->path);
    if (m->build_id_len <= sizeof s->build_id) memcpy(s->build_id, m->build_id, m->build_id_len);
    s->m.path = s->path;
    s->m.build_id = s->build_id;
}

static const seen_module *containing(const collected *c, const void *addr)
{
    for (int i = 0; i < c->n; i++)
        if ((uintptr_t)addr >= c->mods[i].m.start && (uintptr_t)addr < c->mods[i].m.end)
            return &c->mods[i];
    return NULL;
}

/* "Build ID: <hex>" from readelf -n, as bytes. 0 when readelf is missing or finds none. */
static uint32_t readelf_build_id(const char *path, uint8_t *out)
{
    char cmd[4200], line[512];
    snprintf(cmd, sizeof cmd, "readelf -n '%s' 2>/dev/null", path);
    FILE *p = popen(cmd, "r");
    if (!p) return 0;
    uint32_t n = 0;
    while (fgets(line, sizeof line, p)) {
        char *s = strstr(line, "Build ID: ");
        if (!s || n) continue;
        for (s += 10; s[0] && s[1] && n < 64 && sscanf(s, "%2hhx", &out[n]) == 1; s += 2)
            n++;
    }
    pclose(p);
    return n;
}

static int global_in_test;
static __attribute__((noinline)) void code_in_test(void)
{
    global_in_test++;
}

Test(record_modules, main_program_libc_and_refresh)
{
    mt_modules *mods = mt_modules_new();
    cr_assert_not_null(mods);
    collected *c = calloc(1, sizeof *c);
    int n = mt_modules_refresh(mods, collect, c);
    cr_assert_gt(n, 2);
    cr_expect_eq(n, c->n);

    /* Ids sequential from 1. */
    for (int i = 0; i < c->n; i++)
        cr_expect_eq(c->mods[i].m.id, (uint32_t)i + 1);

    char exe[4096];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    cr_assert_gt(len, 0);
    exe[len] = '\0';
    /* The test's own code and data lie in the main program's module, named by its real path. */
    const seen_module *main_mod = containing(c, (const void *)code_in_test);
    cr_assert_not_null(main_mod);
    cr_expect_str_eq(main_mod->path, exe);
    cr_expect_eq(containing(c, &global_in_test), main_mod);
    cr_expect_leq(main_mod->m.bias, main_mod->m.start);

    /* a function no sanitizer intercepts (printf under ASan would be the interceptor's) */
    const seen_module *libc = containing(c, (const void *)gnu_get_libc_version);
    cr_assert_not_null(libc);
    cr_expect_neq(strstr(libc->path, "libc.so"), NULL, "libc path: %s", libc->path);
    cr_expect_neq(libc, main_mod);

    /* Build ids as read in memory must equal what readelf reads from the files. */
    const seen_module *check[] = {main_mod, libc};
    for (int i = 0; i < 2; i++) {
        uint8_t want[64];
        uint32_t wlen = readelf_build_id(check[i]->path, want);
        if (!wlen) {
            cr_log_warn("readelf gave no build id for %s: not compared", check[i]->path);
            continue;
        }
        cr_expect_eq(check[i]->m.build_id_len, wlen, "%s", check[i]->path);
        cr_expect_eq(memcmp(check[i]->m.build_id, want, wlen), 0, "%s", check[i]->path);
    }

    /* Nothing new: nothing reported. */
    int before = c->n;
    cr_expect_eq(mt_modules_refresh(mods, collect, c), 0);
    cr_expect_eq(c->n, before);

    /* A library nobody loaded yet appears on the next refresh, once. */
    static const char *candidates[] = {"libelf.so.1", "libdwarf.so.1", "libcrypt.so.1",
                                       "libcriterion.so.3", NULL};
    void *h = NULL;
    const char *name = NULL;
    for (int i = 0; candidates[i] && !h; i++) {
        if (dlopen(candidates[i], RTLD_NOW | RTLD_NOLOAD)) continue; /* already there */
        h = dlopen(candidates[i], RTLD_NOW | RTLD_LOCAL);
        name = candidates[i];
    }
    cr_assert_not_null(h, "no test library could be loaded");
    int added = mt_modules_refresh(mods, collect, c);
    cr_expect_geq(added, 1, "%s was not reported", name);
    int found = 0;
    for (int i = before; i < c->n; i++) {
        if (!strstr(c->mods[i].path, name)) continue;
        found++;
        cr_expect_gt(c->mods[i].m.build_id_len, 0, "Debian libraries carry a build id");
        cr_expect_eq(c->mods[i].m.id, (uint32_t)i + 1);
    }
    cr_expect_eq(found, 1, "%s reported %d times", name, found);
    cr_expect_eq(mt_modules_refresh(mods, collect, c), 0);
    dlclose(h);

    free(c);
    mt_modules_free(mods);
}
