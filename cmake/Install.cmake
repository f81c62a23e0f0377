# `cmake --install <build> --prefix P --component dev`: the public headers, libtether.a and
# libtether.so, the CMake package (find_package(tether): tether::tether, tether::tether_static)
# and pkg-config's tether.pc. The Python module is the "python" component, installed by the
# wheel build alone.

include(CMakePackageConfigHelpers)

set(TETHER_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/tether)
set(tether_install_targets tether_core)
if(TARGET tether_shared)
  list(APPEND tether_install_targets tether_shared)
endif()

install(TARGETS ${tether_install_targets} EXPORT tetherTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev NAMELINK_COMPONENT dev)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/cpp/include/tether DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
  COMPONENT dev FILES_MATCHING PATTERN "*.h")
install(EXPORT tetherTargets NAMESPACE tether:: DESTINATION ${TETHER_CMAKE_DIR} COMPONENT dev)

configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/tetherConfig.cmake.in
  ${PROJECT_BINARY_DIR}/tetherConfig.cmake INSTALL_DESTINATION ${TETHER_CMAKE_DIR})
# 0.x releases may change the API between minor versions.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/tetherConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/tetherConfig.cmake ${PROJECT_BINARY_DIR}/tetherConfigVersion.cmake
  DESTINATION ${TETHER_CMAKE_DIR} COMPONENT dev)

# tether.pc finds the prefix from its own place, so that it holds for any --prefix.
file(RELATIVE_PATH TETHER_PC_TO_PREFIX /p/${CMAKE_INSTALL_LIBDIR}/pkgconfig /p)
set(TETHER_PC_DL "")
foreach(lib ${CMAKE_DL_LIBS})
  string(APPEND TETHER_PC_DL " -l${lib}")
endforeach()
configure_file(${PROJECT_SOURCE_DIR}/cmake/tether.pc.in ${PROJECT_BINARY_DIR}/tether.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/tether.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT dev)
