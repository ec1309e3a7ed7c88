# enginery_add_plugin(<name> SOURCES <src>... MANIFEST <plugin.toml.in> [LINK <target>...] [OUTPUT_DIR <dir>]
#                     [NO_INSTALL])
#
# Builds lib<name>.so with hidden visibility (only the entry point, or what the sources mark with
# ENGINERY_PLUGIN_EXPORT, is exported) into <OUTPUT_DIR>/<name>/ and renders its manifest beside it after every
# link: @ENGINERY_PLUGIN_LIBRARY@ becomes the library file name, @ENGINERY_PLUGIN_SHA256@ its sha256 and
# @ENGINERY_PLUGIN_NAME@ <name>. The plugin links the host API (enginery_host_api in this tree,
# enginery::host_api from an installed package) plus LINK.
# Installed plugins go to <ENGINERY_INSTALL_PLUGIN_DIR>/<name>/ with the same manifest, unless NO_INSTALL.
#
# Works both inside the enginery tree and from find_package(enginery): the package sets
# ENGINERY_PLUGIN_EXTRA_RPATH to its installed library directory, so the plugin finds libenginery_host_api.so
# wherever it is loaded from.
set(ENGINERY_RENDER_MANIFEST_SCRIPT ${CMAKE_CURRENT_LIST_DIR}/EngineryRenderManifest.cmake)

function(enginery_add_plugin name)
  cmake_parse_arguments(ARG "NO_INSTALL" "MANIFEST;OUTPUT_DIR" "SOURCES;LINK" ${ARGN})
  if(NOT ARG_SOURCES OR NOT ARG_MANIFEST)
    message(FATAL_ERROR "enginery_add_plugin(${name}): SOURCES and MANIFEST are required")
  endif()
  if(NOT ARG_OUTPUT_DIR)
    if(DEFINED ENGINERY_PLUGIN_OUTPUT_DIR)
      set(ARG_OUTPUT_DIR ${ENGINERY_PLUGIN_OUTPUT_DIR})
    else()
      set(ARG_OUTPUT_DIR ${CMAKE_BINARY_DIR}/plugins)
    endif()
  endif()
  set(dir ${ARG_OUTPUT_DIR}/${name})
  get_filename_component(manifest_in ${ARG_MANIFEST} ABSOLUTE)
  if(TARGET enginery::host_api)
    set(host_api enginery::host_api)
  else()
    set(host_api enginery_host_api)
  endif()

  # No entry for another plugin's directory: a plugin never links another plugin. The last one is torch inside
  # site-packages, for the package layout (<site>/enginery/lib/enginery/plugins/<name>/, pyproject.toml).
  set(rpath "$ORIGIN/../../lib" "$ORIGIN/../../.." "$ORIGIN" "$ORIGIN/../../../../../torch/lib")
  if(ENGINERY_PLUGIN_EXTRA_RPATH)
    list(APPEND rpath ${ENGINERY_PLUGIN_EXTRA_RPATH})
  endif()

  add_library(${name} SHARED ${ARG_SOURCES})
  target_link_libraries(${name} PUBLIC ${host_api} ${ARG_LINK})
  set_target_properties(${name} PROPERTIES
    CXX_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN OFF
    LIBRARY_OUTPUT_DIRECTORY ${dir}
    # One RPATH for build and install trees, so installing never rewrites the file and its sha256 stays true:
    # build: plugins/<name>/ -> lib/;  install: lib/enginery/plugins/<name>/ -> lib/.
    BUILD_WITH_INSTALL_RPATH ON
    INSTALL_RPATH "${rpath}")
  add_custom_command(TARGET ${name} POST_BUILD
    COMMAND ${CMAKE_COMMAND} -DLIBRARY=$<TARGET_FILE:${name}> -DTEMPLATE=${manifest_in} -DNAME=${name}
            -DOUTPUT=${dir}/plugin.toml -P ${ENGINERY_RENDER_MANIFEST_SCRIPT}
    VERBATIM)
  set_property(TARGET ${name} APPEND PROPERTY LINK_DEPENDS ${manifest_in})
  if(COMMAND enginery_use_pch)
    enginery_use_pch(${name})
  endif()
  if(DEFINED ENGINERY_INSTALL_PLUGIN_DIR AND NOT ARG_NO_INSTALL)
    install(TARGETS ${name} LIBRARY DESTINATION ${ENGINERY_INSTALL_PLUGIN_DIR}/${name})
    install(FILES ${dir}/plugin.toml DESTINATION ${ENGINERY_INSTALL_PLUGIN_DIR}/${name})
  endif()
endfunction()
