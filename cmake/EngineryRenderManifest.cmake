# Run with cmake -P after a plugin links: fills the manifest template with the library's name and sha256
# (and the plugin's target name, when given as NAME).
get_filename_component(ENGINERY_PLUGIN_LIBRARY ${LIBRARY} NAME)
file(SHA256 ${LIBRARY} ENGINERY_PLUGIN_SHA256)
if(DEFINED NAME)
  set(ENGINERY_PLUGIN_NAME ${NAME})
endif()
configure_file(${TEMPLATE} ${OUTPUT} @ONLY)
