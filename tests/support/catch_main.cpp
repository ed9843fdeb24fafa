// The one Catch2 main every test binary links (compiled once: catch.hpp's main is slow to build).
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
