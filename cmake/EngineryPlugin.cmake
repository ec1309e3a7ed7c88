# enginery_add_plugin(<name> SOURCES <src>... MANIFEST <plugin.toml.in> [LINK <target>...] [OUTPUT_DIR <dir>])
#
# Builds lib<name>.so with hidden visibility (only the entry point, or what the sources mark with
# ENGINERY_PLUGIN_EXPORT, is exported) into <OUTPUT_DIR>/<name>/ and renders its manifest beside it after every
# link: @ENGINERY_PLUGIN_LIBRARY@ becomes the library file name and @ENGINERY_PLUGIN_SHA256@ its sha256.
# Installed plugins go to <libdir>/enginery/plugins/<name>/ with the same manifest.
set(ENGINERY_RENDER_MANIFEST_SCRIPT ${CMAKE_CURRENT_LIST_DIR}/EngineryRenderManifest.cmake)

function(enginery_add_plugin name)
  cmake_parse_arguments(ARG "" "MANIFEST;OUTPUT_DIR" "SOURCES;LINK" ${ARGN})
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

  add_library(${name} SHARED ${ARG_SOURCES})
  target_link_libraries(${name} PUBLIC ${ARG_LINK})
  set_target_properties(${name} PROPERTIES
    CXX_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN OFF
    LIBRARY_OUTPUT_DIRECTORY ${dir}
    # One RPATH for build and install trees, so installing never rewrites the file and its sha256 stays true:
    # build: plugins/<name>/ -> lib/;  install: lib/enginery/plugins/<name>/ -> lib/.
    BUILD_WITH_INSTALL_RPATH ON
    INSTALL_RPATH "$ORIGIN/../../lib;$ORIGIN/../../..;$ORIGIN/../enginery_fsdp;$ORIGIN")
  add_custom_command(TARGET ${name} POST_BUILD
    COMMAND ${CMAKE_COMMAND} -DLIBRARY=$<TARGET_FILE:${name}> -DTEMPLATE=${manifest_in}
            -DOUTPUT=${dir}/plugin.toml -P ${ENGINERY_RENDER_MANIFEST_SCRIPT}
    VERBATIM)
  if(COMMAND enginery_use_pch)
    enginery_use_pch(${name})
  endif()
  if(DEFINED ENGINERY_INSTALL_PLUGIN_DIR)
    install(TARGETS ${name} LIBRARY DESTINATION ${ENGINERY_INSTALL_PLUGIN_DIR}/${name})
    install(FILES ${dir}/plugin.toml DESTINATION ${ENGINERY_INSTALL_PLUGIN_DIR}/${name})
  endif()
endfunction()
