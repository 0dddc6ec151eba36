// A shared library that the rank program needs_lib.c links against, built in its own folder and
// never on the loader's path: running needs_lib without LD_LIBRARY_PATH is the dynamic loader's
// "error while loading shared libraries" and exit 127 (tests/e2e/test_launch_mistakes.cpp).
int hvd_test_missing_lib(void) { return 0; }
