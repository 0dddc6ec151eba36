# The wheel's tree (scripts/package.sh --wheel; packaging/wheel/README.md). Included by
# python/CMakeLists.txt once the binding is built. An install component of its own, "wheel", that
# neither `cmake --install` nor the Debian packages install (EXCLUDE_FROM_ALL; CPack packages only
# CPACK_COMPONENTS_ALL). `cmake --install BUILD --component wheel --prefix STAGE` lays out what
# setuptools packs, as pip will put it in site-packages:
#   hvd/, horovod/   the Python packages (as python3-hvd has them), the native module in hvd/
#   hvdrun/          packaging/wheel/hvdrun: the console entry points `hvdrun` and `hvdrun-agent`
#   hvdrun/bin/      the hvdrun and hvdrun-agent binaries, which the entry points exec
#   hvdrun/lib/      libhvd.so.0, and the NCCL plugin when the build has it (libhvd loads it from
#                    its own folder); bin/../lib is where hvdrun --check-build looks for libhvd
#   pyproject.toml (from packaging/wheel/pyproject.toml.in), setup.py, README.md
# `cmake --build BUILD --target hvd_wheel` builds what the component installs, and nothing else.

set(_hvd_wheel_src "${PROJECT_SOURCE_DIR}/packaging/wheel")
set(_hvd_wheel_in "COMPONENT" "wheel" "EXCLUDE_FROM_ALL")

add_custom_target(hvd_wheel)
add_dependencies(hvd_wheel hvd_python hvdrun hvdrun-agent)  # hvd (and hvd_nccl) through hvd_python

# The metadata, with this build's version and the Python the module was built for (its ABI: the
# wheel's requires-python). package.sh also reads this file's presence as "the binding is built".
set(HVD_WHEEL_PYTHON_VERSION "${Python3_VERSION_MAJOR}.${Python3_VERSION_MINOR}")
configure_file("${_hvd_wheel_src}/pyproject.toml.in" "${PROJECT_BINARY_DIR}/wheel/pyproject.toml"
  @ONLY)
install(FILES "${PROJECT_BINARY_DIR}/wheel/pyproject.toml" "${_hvd_wheel_src}/setup.py"
  "${_hvd_wheel_src}/README.md" DESTINATION . ${_hvd_wheel_in})

install(DIRECTORY "${CMAKE_CURRENT_SOURCE_DIR}/hvd" "${CMAKE_CURRENT_SOURCE_DIR}/horovod"
  "${_hvd_wheel_src}/hvdrun" DESTINATION . ${_hvd_wheel_in}
  FILES_MATCHING PATTERN "*.py" PATTERN "__pycache__" EXCLUDE)

# The build tree's files, copied as files (install(TARGETS) would add libhvd's version links, which
# a wheel, a zip, can only hold as copies). The library under its SONAME, the name that the module
# asks the loader for.
install(FILES "$<TARGET_FILE:hvd_python>" DESTINATION hvd ${_hvd_wheel_in})
install(PROGRAMS "$<TARGET_FILE:hvdrun>" "$<TARGET_FILE:hvdrun-agent>" DESTINATION hvdrun/bin
  ${_hvd_wheel_in})
install(FILES "$<TARGET_FILE:hvd>" DESTINATION hvdrun/lib
  RENAME "libhvd.so.${PROJECT_VERSION_MAJOR}" ${_hvd_wheel_in})
if(TARGET hvd_nccl)
  install(FILES "$<TARGET_FILE:hvd_nccl>" DESTINATION hvdrun/lib ${_hvd_wheel_in})
endif()

# Then each ELF file as the Debian packages have it: stripped (CPACK_STRIP_FILES), and with its
# target's INSTALL_RPATH instead of the build tree's RUNPATH (which names build folders, and ends
# in an empty entry: the current directory). That is none for all but the NCCL plugin (the CUDA
# toolkit's folders, allreduce/CMakeLists.txt): the rest need only system libraries, and hvdrun
# loads libhvd by path (bin/../lib) for --check-build. The one exception is the native module,
# whose libhvd is not in the loader's path here: $ORIGIN/../hvdrun/lib, beside it in the same
# site-packages, found without LD_LIBRARY_PATH wherever the environment is. patchelf (Debian's;
# install-deps.sh --wheel) sets them, after the strip, as it must.
find_program(HVD_PATCHELF patchelf)
install(CODE "set(_hvd_patchelf \"${HVD_PATCHELF}\")
set(_hvd_strip \"${CMAKE_STRIP}\")" ${_hvd_wheel_in})
install(CODE [[
  function(_hvd_wheel_fix file runpath)
    if(NOT _hvd_patchelf)
      message(FATAL_ERROR "the wheel's tree needs patchelf (scripts/install-deps.sh --wheel)")
    endif()
    set(file "$ENV{DESTDIR}${CMAKE_INSTALL_PREFIX}/${file}")
    execute_process(COMMAND "${_hvd_strip}" --strip-unneeded "${file}" COMMAND_ERROR_IS_FATAL ANY)
    if(runpath)
      execute_process(COMMAND "${_hvd_patchelf}" --set-rpath "${runpath}" "${file}"
        COMMAND_ERROR_IS_FATAL ANY)
    else()
      execute_process(COMMAND "${_hvd_patchelf}" --remove-rpath "${file}" COMMAND_ERROR_IS_FATAL ANY)
    endif()
  endfunction()
]] ${_hvd_wheel_in})
# The rules that call it: one per file, with the RUNPATH it gets.
function(_hvd_wheel_elf file runpath)
  install(CODE "_hvd_wheel_fix(\"${file}\" \"${runpath}\")" ${_hvd_wheel_in})
endfunction()
function(_hvd_wheel_target_elf file target)
  _hvd_wheel_elf("${file}" "$<JOIN:$<TARGET_PROPERTY:${target},INSTALL_RPATH>,:>")
endfunction()
_hvd_wheel_elf("hvd/$<TARGET_FILE_NAME:hvd_python>" "$ORIGIN/../hvdrun/lib")
_hvd_wheel_target_elf(hvdrun/bin/hvdrun hvdrun)
_hvd_wheel_target_elf(hvdrun/bin/hvdrun-agent hvdrun-agent)
_hvd_wheel_target_elf("hvdrun/lib/libhvd.so.${PROJECT_VERSION_MAJOR}" hvd)
if(TARGET hvd_nccl)
  _hvd_wheel_target_elf("hvdrun/lib/$<TARGET_FILE_NAME:hvd_nccl>" hvd_nccl)
endif()
