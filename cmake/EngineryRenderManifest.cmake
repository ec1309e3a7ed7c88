# Run with cmake -P after a plugin links: fills the manifest template with the library's name and sha256.
get_filename_component(ENGINERY_PLUGIN_LIBRARY ${LIBRARY} NAME)
file(SHA256 ${LIBRARY} ENGINERY_PLUGIN_SHA256)
configure_file(${TEMPLATE} ${OUTPUT} @ONLY)
