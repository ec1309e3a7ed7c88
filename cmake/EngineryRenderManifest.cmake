# Run with cmake -P after a plugin links: fills the manifest template with the library's name and sha256
# (and the plugin's target name, when given as NAME).
get_filename_component(ENGINERY_PLUGIN_LIBRARY ${LIBRARY} NAME)
file(SHA256 ${LIBRARY} ENGINERY_PLUGIN_SHA256)
if(DEFINED NAME)
  set(ENGINERY_PLUGIN_NAME ${NAME})
endif()
configure_file(${TEMPLATE} ${OUTPUT} @ONLY)
# The loader refuses plugin files writable by anyone but their owner; a build under umask 002 would otherwise
# produce a plugin its own tests reject.
get_filename_component(plugin_dir ${OUTPUT} DIRECTORY)
execute_process(COMMAND chmod go-w ${LIBRARY} ${OUTPUT} ${plugin_dir} RESULT_VARIABLE chmod_result)
if(NOT chmod_result EQUAL 0)
  message(FATAL_ERROR "could not remove group/other write permission from ${plugin_dir}")
endif()
