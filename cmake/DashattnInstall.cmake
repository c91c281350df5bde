# Install tree and the exported package: find_package(dashattn) then link dashattn::dashattn.
include(CMakePackageConfigHelpers)
set(DASHATTN_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/dashattn)

install(TARGETS dashattn_lib dashattn_tensorio EXPORT dashattnTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/core/include/dashattn DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES ${PROJECT_BINARY_DIR}/generated/dashattn/version.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/dashattn)
install(EXPORT dashattnTargets NAMESPACE dashattn:: DESTINATION ${DASHATTN_CMAKE_DIR})

configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/dashattnConfig.cmake.in
  ${PROJECT_BINARY_DIR}/dashattnConfig.cmake INSTALL_DESTINATION ${DASHATTN_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/dashattnConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/dashattnConfig.cmake ${PROJECT_BINARY_DIR}/dashattnConfigVersion.cmake
        DESTINATION ${DASHATTN_CMAKE_DIR})
