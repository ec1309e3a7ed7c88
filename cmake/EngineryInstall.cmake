# Exported CMake package so a third party can find_package(enginery) and build a plugin out of tree.
# (Completed by the foundation work: config file, enginery_add_plugin for installed use.)
