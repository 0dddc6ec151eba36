# Debian packages through CPack (`cpack -G DEB` in a build configured with
# -DCMAKE_INSTALL_PREFIX=/usr; scripts/package.sh does both), split as Debian splits a library:
#   hvdrun       the launcher and its agent (one binary; hvdrun-agent is the agent alone)
#   libhvd0      the shared library every rank host needs (SONAME libhvd.so.0)
#   libhvd-dev   headers, the libhvd.so link, find_package(hvd) and pkg-config files
#   libhvd-nccl  the NCCL plugin (only when the build has NCCL): it needs the CUDA toolkit's
#                libnccl and libcudart, which no Debian package provides
#   python3-hvd  the Python packages hvd.torch and horovod.torch (only when the build has the
#                binding, python/CMakeLists.txt), for Debian's python3 and python3-torch
# Depends come from what the binaries link (dpkg-shlibdeps), except for the NCCL plugin, whose
# libraries dpkg cannot attribute: it depends on libhvd0 only, and its description says where
# NCCL comes from. tests/packaging/deb_check.sh checks the result. Each description's first line
# is its synopsis (no CPACK_PACKAGE_DESCRIPTION_SUMMARY: CPack would put that line first).

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME hvdrun)
set(CPACK_PACKAGE_VENDOR "hvdrun")
set(CPACK_PACKAGE_CONTACT "hvdrun developers <hvdrun@localhost>")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGING_INSTALL_PREFIX ${CMAKE_INSTALL_PREFIX})
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)  # NAME_VERSION_ARCH.deb
set(CPACK_DEBIAN_PACKAGE_RELEASE 1)
set(CPACK_DEBIAN_PACKAGE_SECTION devel)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_STRIP_FILES ON)  # as Debian ships binaries (no debug info in a Release build anyway)
set(CPACK_DEBIAN_ENABLE_COMPONENT_DEPENDS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)  # libhvd0's shlibs file, for packages built on it

set(_hvd_components hvdrun libhvd dev)
if(HVD_HAVE_NCCL)
  list(APPEND _hvd_components nccl)
endif()
if(HVD_PYTHON_BUILT)
  list(APPEND _hvd_components python)
endif()
set(CPACK_COMPONENTS_ALL ${_hvd_components})

set(_hvd_exact "(= ${PROJECT_VERSION}-1)")

set(CPACK_DEBIAN_HVDRUN_PACKAGE_NAME hvdrun)
set(CPACK_DEBIAN_HVDRUN_PACKAGE_SECTION net)
# The rank hosts run hvdrun too (the agent); SSH to reach them. libhvd0 for --check-build and for
# the programs it launches, which link it.
set(CPACK_DEBIAN_HVDRUN_PACKAGE_DEPENDS "openssh-client")
set(CPACK_DEBIAN_HVDRUN_PACKAGE_RECOMMENDS "libhvd0")
set(CPACK_DEBIAN_HVDRUN_PACKAGE_SUGGESTS "openmpi-bin")
set(CPACK_DEBIAN_HVDRUN_DESCRIPTION
  "launcher for data-parallel training jobs over SSH (horovodrun's command line)
hvdrun starts one rank per slot on hosts reached over SSH, or in a Slurm allocation, with
output tagged per rank, no orphans and honest exit codes; hvdrun --check-ssh diagnoses every
host first. With --mpi it runs Open MPI's mpirun instead of its own agents.")

set(CPACK_DEBIAN_LIBHVD_PACKAGE_NAME libhvd0)
set(CPACK_DEBIAN_LIBHVD_PACKAGE_SECTION libs)
set(CPACK_DEBIAN_LIBHVD_DESCRIPTION
  "Horovod-style collectives for programs launched by hvdrun (shared library)
libhvd runs allreduce, allgather, broadcast, alltoall and reducescatter with named asynchronous
operations, negotiation and tensor fusion, over Open MPI (under hvdrun --mpi) or Gloo over TCP
(hvdrun's own launch). Every host that runs ranks needs it.")

set(CPACK_DEBIAN_DEV_PACKAGE_NAME libhvd-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS "libhvd0 ${_hvd_exact}")
set(CPACK_DEBIAN_DEV_PACKAGE_SHLIBDEPS OFF)  # headers and text files only
set(CPACK_DEBIAN_DEV_DESCRIPTION
  "Horovod-style collectives for programs launched by hvdrun (development files)
The C and C++ headers (hvd/hvd.h, hvd/hvd.hpp, hvd/elastic.hpp), the libhvd.so link, a CMake
package (find_package(hvd) gives hvd::hvd) and a pkg-config file (hvd).")

set(CPACK_DEBIAN_NCCL_PACKAGE_NAME libhvd-nccl)
set(CPACK_DEBIAN_NCCL_PACKAGE_SECTION libs)
set(CPACK_DEBIAN_NCCL_PACKAGE_SHLIBDEPS OFF)
# What dpkg-shlibdeps would give for its C and C++ runtime (libnccl and libcudart: the toolkit's).
set(CPACK_DEBIAN_NCCL_PACKAGE_DEPENDS "libhvd0 ${_hvd_exact}, libc6 (>= 2.34), libstdc++6 (>= 12)")
set(CPACK_DEBIAN_NCCL_DESCRIPTION
  "NCCL plugin for libhvd: collectives on GPU buffers
libhvd loads this plugin from its own directory when a program passes GPU buffers. It links
NCCL and the CUDA runtime as the CUDA toolkit installs them (no Debian package provides NCCL):
install the toolkit with NCCL on every GPU host, in the place this package was built against.")

set(CPACK_DEBIAN_PYTHON_PACKAGE_NAME python3-hvd)
set(CPACK_DEBIAN_PYTHON_PACKAGE_SECTION python)
set(CPACK_DEBIAN_PYTHON_PACKAGE_SHLIBDEPS OFF)
# The native module is built for one Python version (its file name carries the ABI tag); the C
# and C++ runtime as dpkg-shlibdeps gives them for libhvd0. tests/packaging/deb_check.sh checks
# that every library the module needs comes from one of these.
math(EXPR _hvd_py_next "${HVD_PYTHON_VERSION_MINOR} + 1")
set(CPACK_DEBIAN_PYTHON_PACKAGE_DEPENDS
  "libhvd0 ${_hvd_exact}, python3 (>= ${HVD_PYTHON_VERSION}), python3 (<< 3.${_hvd_py_next}), python3-torch, libc6 (>= 2.34), libstdc++6 (>= 12), libgcc-s1 (>= 3.0)")
set(CPACK_DEBIAN_PYTHON_PACKAGE_CONTROL_EXTRA
  "${PROJECT_SOURCE_DIR}/cmake/deb/python3-hvd/postinst;${PROJECT_SOURCE_DIR}/cmake/deb/python3-hvd/prerm")
set(CPACK_DEBIAN_PYTHON_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(CPACK_DEBIAN_PYTHON_DESCRIPTION
  "Horovod's PyTorch API on libhvd (hvd.torch, and horovod.torch for Horovod scripts)
import hvd.torch as hvd, or import horovod.torch as hvd in a script written for Horovod: the
same module, Horovod 0.28's API (allreduce and the other collectives, DistributedOptimizer,
the broadcasts) on libhvd's engine, for ranks started by hvdrun, mpirun or alone. The horovod
name is a compatibility layer, not Horovod: it refuses to load when a Horovod is installed too.")

include(CPack)
