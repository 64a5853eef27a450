/* Calls got_target of another library through its GOT slot. Built lazily bound (PLT), with full
 * RELRO (bound at load, GOT read-only) and with -fno-plt (GLOB_DAT slot, no PLT). */
int got_target(int x);

__attribute__((visibility("default"))) int got_call(int x)
{
    return got_target(x) * 10;
}

#ifdef GOT_ADDRESS
/* The address as this object sees it: through the GLOB_DAT slot. Only in the -fno-plt build:
 * taking the address makes the linker route the calls through the GLOB_DAT slot too, and the
 * other builds are there to have a PLT (JUMP_SLOT) slot. */
__attribute__((visibility("default"))) void *got_address(void)
{
    return (void *)got_target;
}
#endif
