// The one Catch2 main for every test binary (compiled once: v2's single header is slow).
#if HVD_CATCH_MAJOR == 3
#include <catch2/catch_session.hpp>

int main(int argc, char* argv[]) { return Catch::Session().run(argc, argv); }
#else
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
#endif
