# Install rules and the exported CMake package, so a third party can find_package(enginery) and build a plugin out
# of tree against the installed headers:
#
#   find_package(enginery 0.1 REQUIRED)
#   enginery_add_plugin(my_plugin SOURCES my_engine.cpp MANIFEST plugin.toml.in)
#
# Installed: include/enginery/{host_api,engine_driver,support,launch,registry,models,kernels}/*.h,
# lib/libenginery_{host_api,engine_driver,support,launch,registry,models,kernels}.so,
# lib/cmake/enginery/{engineryConfig,engineryConfigVersion,engineryTargets,EngineryPlugin,
# EngineryRenderManifest,EngineryHeaderFingerprint}.cmake, and the SDK's documents in share/doc/enginery/: PLUGIN_GUIDE.md (with the 2.x ->
# 3.0 migration), ARCHITECTURE.md, CONFORMANCE.md (conformance/README.md) and examples/plugin/ (the example plugin's sources, which
# build from there). Imported targets: enginery::torch (LibTorch as this build used it, C++17 as a usage
# requirement), enginery::host_api (the contract), enginery::engine_driver (what hosts drive engines with),
# enginery::support, enginery::launch, enginery::registry, enginery::models, enginery::kernels (which models links). The fsdp plugin's headers are not installed: its
# classes are private (docs/PLUGIN_GUIDE.md).
include(CMakePackageConfigHelpers)

set(ENGINERY_CMAKE_INSTALL_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/enginery)

set_target_properties(enginery_torch PROPERTIES EXPORT_NAME torch)
set_target_properties(enginery_host_api PROPERTIES EXPORT_NAME host_api)
set_target_properties(enginery_engine_driver PROPERTIES EXPORT_NAME engine_driver)
set_target_properties(enginery_launch PROPERTIES EXPORT_NAME launch)
set_target_properties(enginery_registry PROPERTIES EXPORT_NAME registry)
set_target_properties(enginery_support PROPERTIES EXPORT_NAME support)
if(TARGET enginery_models)
  set_target_properties(enginery_models PROPERTIES EXPORT_NAME models)
endif()
# The CUDA kernels' wrappers (kernels/fused_cuda.h): exported because enginery::models links them.
set_target_properties(enginery_kernels PROPERTIES EXPORT_NAME kernels)
# enginery_host_api links it publicly, so it travels with the export.
install(TARGETS enginery_torch EXPORT engineryTargets)

install(EXPORT engineryTargets NAMESPACE enginery:: DESTINATION ${ENGINERY_CMAKE_INSTALL_DIR})

configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/engineryConfig.cmake.in
  ${CMAKE_BINARY_DIR}/cmake/engineryConfig.cmake
  INSTALL_DESTINATION ${ENGINERY_CMAKE_INSTALL_DIR}
  PATH_VARS CMAKE_INSTALL_LIBDIR CMAKE_INSTALL_INCLUDEDIR ENGINERY_INSTALL_PLUGIN_DIR)
write_basic_package_version_file(${CMAKE_BINARY_DIR}/cmake/engineryConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES
    ${CMAKE_BINARY_DIR}/cmake/engineryConfig.cmake
    ${CMAKE_BINARY_DIR}/cmake/engineryConfigVersion.cmake
    ${CMAKE_CURRENT_LIST_DIR}/EngineryPlugin.cmake
    ${CMAKE_CURRENT_LIST_DIR}/EngineryHeaderFingerprint.cmake
    ${CMAKE_CURRENT_LIST_DIR}/EngineryRenderManifest.cmake
  DESTINATION ${ENGINERY_CMAKE_INSTALL_DIR})

# What a third party reads next to the headers (docs/PLUGIN_GUIDE.md, "What the install holds").
install(FILES ${PROJECT_SOURCE_DIR}/docs/PLUGIN_GUIDE.md DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(FILES ${PROJECT_SOURCE_DIR}/docs/ARCHITECTURE.md DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(FILES ${PROJECT_SOURCE_DIR}/conformance/README.md DESTINATION ${CMAKE_INSTALL_DOCDIR} RENAME CONFORMANCE.md)
install(FILES
    ${PROJECT_SOURCE_DIR}/examples/plugin/CMakeLists.txt
    ${PROJECT_SOURCE_DIR}/examples/plugin/README.md
    ${PROJECT_SOURCE_DIR}/examples/plugin/ddp_engine.cpp
    ${PROJECT_SOURCE_DIR}/examples/plugin/ddp_engine.h
    ${PROJECT_SOURCE_DIR}/examples/plugin/plugin.cpp
    ${PROJECT_SOURCE_DIR}/examples/plugin/plugin.toml.in
  DESTINATION ${CMAKE_INSTALL_DOCDIR}/examples/plugin)
