// The one Catch2 v2 main for every test binary (compiled once: the v2 header is slow).
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
