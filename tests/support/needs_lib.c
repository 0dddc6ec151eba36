// A rank program that needs libhvd_test_lib.so (missing_lib.c), linked without an rpath.
int hvd_test_missing_lib(void);

int main(void) { return hvd_test_missing_lib(); }
