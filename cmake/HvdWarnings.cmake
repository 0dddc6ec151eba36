# Strict warnings for hvdrun's own targets only (third-party headers come in as SYSTEM includes).
#
# Warnings are errors only when asked for (-DHVD_WERROR=ON: development and CI, see .ci/run).
# A user's build must not fail on a warning: compilers differ, and some warn falsely. GCC 12 at
# -O3 (CMAKE_BUILD_TYPE=Release) reports -Wrestrict on std::string code that is correct (GCC bug
# 105329, fixed in GCC 13), so that one warning is off for GCC before 13 in optimised builds.
# GCC 14 at -O3 (Debian 13) reports, from inside libstdc++ after inlining, -Wmaybe-uninitialized
# on std::optional::emplace of an engaged optional's string members and -Walloc-size-larger-than
# on std::vector(n, value) for an n it cannot bound: correct code both times, so those two are off
# for GCC 14 and later in Release builds only (-O2 builds keep them).
option(HVD_WERROR "Treat warnings in hvdrun's own code as errors (for development and CI)" OFF)

function(hvd_strict_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wshadow -Wnon-virtual-dtor)
  if(HVD_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
    target_compile_options(${target} PRIVATE $<$<CONFIG:Release>:-Wno-restrict>)
  endif()
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_GREATER_EQUAL 14)
    target_compile_options(${target} PRIVATE
      $<$<CONFIG:Release>:-Wno-maybe-uninitialized> $<$<CONFIG:Release>:-Wno-alloc-size-larger-than>)
  endif()
endfunction()
