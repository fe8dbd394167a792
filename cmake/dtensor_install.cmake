# Install rules and the exported package: what `cmake --install` puts where,
# and what `find_package(dtensor CONFIG)` / `pkg-config dtensor` give a user.
#
#   include/dtensor/...            public headers (<dtensor/dtensor.h> is the umbrella)
#   lib/libdtensor.so*             the library
#   lib/libdtensor-cuda.so         the CUDA module (CUDA builds), loaded at run time
#   lib/cmake/dtensor/             dtensorConfig.cmake, version file, exported targets
#   lib/pkgconfig/dtensor.pc       for pkg-config
#   bin/dtensor-run (dtensor-conv, dtensor-op, dtensor-ckpt) the tools
#   lib/libdtensor_testing.a, include/dtensor/testing.h,
#   lib/pkgconfig/dtensor-testing.pc   the multi-rank Catch2 harness, when built
#                                  (dtensor::testing; docs/testing.md)
#
# Only the PUBLIC link interface (fmt, spdlog, Threads) reaches consumers:
# gloo, oneDNN, Eigen and OpenMP are linked privately into the shared object,
# so the exported target and dtensor.pc do not mention them.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(DTENSOR_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/dtensor)

install(TARGETS dtensor EXPORT dtensorTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
# The CUDA module beside the library, where libdtensor.so looks for it. It is
# opened at run time, never linked, so it is not part of the exported targets.
if(TARGET dtensor_cuda)
  install(TARGETS dtensor_cuda LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
endif()
# Likewise the MPI module.
if(TARGET dtensor_mpi)
  install(TARGETS dtensor_mpi LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
endif()
# testing.h only with the library behind it (built when Catch2 is found).
set(_dtensor_header_excludes)
if(NOT TARGET dtensor_testing)
  set(_dtensor_header_excludes PATTERN testing.h EXCLUDE)
endif()
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/dtensor
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} FILES_MATCHING PATTERN "*.h" ${_dtensor_header_excludes})

# The tools go to bin/ and are exported too (dtensor::dtensor-run), so a
# consumer's tests can launch ranks with $<TARGET_FILE:dtensor::dtensor-run>.
#
# A tool that links the library finds it relative to itself, and with the
# same RUNPATH in the build tree as installed: the build tree holds a link to
# the library at ../${CMAKE_INSTALL_LIBDIR} from bin/, as the prefix does.
# Why not let CMake rewrite a build-tree RUNPATH at install: it edits it in
# place, so it pads the build tree's with empty entries to the installed
# one's length, and the loader reads an empty entry as the current
# directory: a tool run from the build tree looked there for every library
# (libstdc++ too) before the system's. dtensor-run links none of ours and has
# no RUNPATH at all.
set(_dtensor_tools_linking_library dtensor-conv dtensor-op dtensor-ckpt dtensor-train-unet)
# Every tool installed (tests/cli checks where each looks for libraries).
set(DTENSOR_INSTALLED_TOOLS dtensor-run ${_dtensor_tools_linking_library})
if(NOT IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  set(_build_libdir ${PROJECT_BINARY_DIR}/${CMAKE_INSTALL_LIBDIR})
  file(RELATIVE_PATH _back_to_library ${_build_libdir} ${PROJECT_BINARY_DIR})
  string(REGEX REPLACE "/$" "" _back_to_library "${_back_to_library}")
  add_custom_command(TARGET dtensor POST_BUILD
    COMMAND ${CMAKE_COMMAND} -E make_directory ${_build_libdir}
    COMMAND ${CMAKE_COMMAND} -E create_symlink ${_back_to_library}/$<TARGET_FILE_NAME:dtensor>
            ${_build_libdir}/$<TARGET_SONAME_FILE_NAME:dtensor>
    VERBATIM)
endif()
foreach(_tool IN LISTS DTENSOR_INSTALLED_TOOLS)
  if(NOT TARGET ${_tool})
    continue()
  endif()
  if(_tool IN_LIST _dtensor_tools_linking_library)
    set_target_properties(${_tool} PROPERTIES INSTALL_RPATH "$ORIGIN/../${CMAKE_INSTALL_LIBDIR}")
    if(NOT IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
      set_target_properties(${_tool} PROPERTIES BUILD_WITH_INSTALL_RPATH ON)
    endif()
  endif()
  install(TARGETS ${_tool} EXPORT dtensorTargets RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endforeach()

install(EXPORT dtensorTargets NAMESPACE dtensor:: FILE dtensorTargets.cmake
  DESTINATION ${DTENSOR_INSTALL_CMAKEDIR})

# dtensor::testing has an export file of its own: it needs Catch2, which only
# a project that uses it should have to have (dtensorConfig.cmake finds
# Catch2 before it loads this file).
if(TARGET dtensor_testing)
  install(TARGETS dtensor_testing EXPORT dtensorTestingTargets
    ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
  install(EXPORT dtensorTestingTargets NAMESPACE dtensor:: FILE dtensorTestingTargets.cmake
    DESTINATION ${DTENSOR_INSTALL_CMAKEDIR})
endif()
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/dtensorConfig.cmake.in
  ${PROJECT_BINARY_DIR}/dtensorConfig.cmake INSTALL_DESTINATION ${DTENSOR_INSTALL_CMAKEDIR})
# 0.x: a minor release may change the API, so only the same minor version matches.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/dtensorConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/dtensorConfig.cmake
  ${PROJECT_BINARY_DIR}/dtensorConfigVersion.cmake DESTINATION ${DTENSOR_INSTALL_CMAKEDIR})

# dtensor.pc locates the prefix from its own directory (${pcfiledir}), so an
# install tree moved elsewhere, or installed with `cmake --install --prefix`,
# still works.
file(RELATIVE_PATH DTENSOR_PC_TO_PREFIX
  /prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig /prefix)
configure_file(${PROJECT_SOURCE_DIR}/cmake/dtensor.pc.in ${PROJECT_BINARY_DIR}/dtensor.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/dtensor.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
if(TARGET dtensor_testing)
  configure_file(${PROJECT_SOURCE_DIR}/cmake/dtensor-testing.pc.in
    ${PROJECT_BINARY_DIR}/dtensor-testing.pc @ONLY)
  install(FILES ${PROJECT_BINARY_DIR}/dtensor-testing.pc
    DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
endif()
