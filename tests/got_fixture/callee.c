/* The library whose function the GOT tests redirect. Built twice: GOT_STEP 1 and 2 (a second,
 * private copy of the "same" library, as a program bundling its own libcudart would have). */
#ifndef GOT_STEP
#define GOT_STEP 1
#endif
__attribute__((visibility("default"))) int got_target(int x)
{
    return x + GOT_STEP;
}
