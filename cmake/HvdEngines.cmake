# The collective engines libhvd can be built with. Each option is AUTO (default: on if found),
# ON (missing is a configure error that names what to install) or OFF.
# Results: HVD_HAVE_MPI, HVD_HAVE_GLOO, HVD_HAVE_NCCL (ON/OFF) for the rest of the build.

set(HVD_WITH_MPI AUTO CACHE STRING "Build the Open MPI backend: AUTO, ON or OFF")
set(HVD_WITH_GLOO AUTO CACHE STRING "Build the Gloo backend: AUTO, ON or OFF")
set(HVD_WITH_NCCL AUTO CACHE STRING "Build the NCCL plugin (needs the CUDA toolkit): AUTO, ON or OFF")
foreach(opt HVD_WITH_MPI HVD_WITH_GLOO HVD_WITH_NCCL)
  set_property(CACHE ${opt} PROPERTY STRINGS AUTO ON OFF)
  string(TOUPPER "${${opt}}" _value)
  if(NOT _value MATCHES "^(AUTO|ON|OFF)$")
    message(FATAL_ERROR "${opt}=${${opt}}: use AUTO, ON or OFF")
  endif()
  set(${opt} "${_value}")
endforeach()

# hvd_resolve_engine(NAME DISPLAY FOUND HOW_TO_GET): sets HVD_HAVE_<NAME> from the option and FOUND.
macro(hvd_resolve_engine name display found how_to_get)
  if(HVD_WITH_${name} STREQUAL "OFF")
    set(HVD_HAVE_${name} OFF)
  elseif(${found})
    set(HVD_HAVE_${name} ON)
  elseif(HVD_WITH_${name} STREQUAL "ON")
    message(FATAL_ERROR "HVD_WITH_${name}=ON but ${display} was not found: ${how_to_get}, "
                        "or configure with -DHVD_WITH_${name}=AUTO or OFF")
  else()
    set(HVD_HAVE_${name} OFF)
    message(STATUS "${display} not found: building without it (${how_to_get} to add it)")
  endif()
endmacro()

if(NOT HVD_WITH_MPI STREQUAL "OFF")
  find_package(MPI COMPONENTS C QUIET)
endif()
hvd_resolve_engine(MPI "Open MPI" MPI_C_FOUND "install the Debian packages libopenmpi-dev and openmpi-bin")

if(NOT HVD_WITH_GLOO STREQUAL "OFF")
  find_package(Gloo CONFIG QUIET)
endif()
hvd_resolve_engine(GLOO Gloo Gloo_FOUND "install the Debian package libgloo-dev")

# NCCL ships no CMake package: look for its header and library next to the CUDA toolkit.
set(_hvd_nccl_found FALSE)
if(NOT HVD_WITH_NCCL STREQUAL "OFF")
  find_package(CUDAToolkit QUIET)
  if(CUDAToolkit_FOUND)
    find_path(HVD_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} ENV NCCL_HOME
              PATH_SUFFIXES include)
    find_library(HVD_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} ENV NCCL_HOME
                 PATH_SUFFIXES lib lib64)
    if(HVD_NCCL_INCLUDE_DIR AND HVD_NCCL_LIBRARY)
      set(_hvd_nccl_found TRUE)
    endif()
  endif()
endif()
hvd_resolve_engine(NCCL NCCL _hvd_nccl_found
  "install the CUDA toolkit with NCCL (nvcc on PATH, nccl.h and libnccl.so beside it or under NCCL_HOME)")

foreach(name MPI GLOO NCCL)
  if(HVD_HAVE_${name})
    set(HVD_HAVE_${name}_01 1)
  else()
    set(HVD_HAVE_${name}_01 0)
  endif()
endforeach()
