# ctest registry.out_of_tree_plugin: install this build into a fresh prefix, build examples/plugin against it
# with find_package(enginery) only, and load the result with the installed `enginery plugins`. The fixture it sets
# up (WORK_DIR/prefix, WORK_DIR/build/plugins) is what conformance.example runs the suite on.
# Inputs: BUILD_DIR, EXAMPLE_DIR, WORK_DIR, CXX_COMPILER, GENERATOR, [COMPILER_LAUNCHER].
function(run step)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${step} failed (${rc}):\n${out}\n${err}")
  endif()
  set(step_output "${out}" PARENT_SCOPE)
endfunction()

file(REMOVE_RECURSE ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)
set(build ${WORK_DIR}/build)

run("cmake --install" ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})

set(launcher)
if(COMPILER_LAUNCHER)
  set(launcher -DCMAKE_CXX_COMPILER_LAUNCHER=${COMPILER_LAUNCHER})
endif()
run("configure examples/plugin" ${CMAKE_COMMAND} -S ${EXAMPLE_DIR} -B ${build} -G ${GENERATOR}
    -DCMAKE_CXX_COMPILER=${CXX_COMPILER} -DCMAKE_PREFIX_PATH=${prefix} ${launcher})
file(STRINGS ${build}/CMakeCache.txt enginery_dir REGEX "^enginery_DIR:")
string(FIND "${enginery_dir}" "${prefix}/" at)
if(at EQUAL -1)
  message(FATAL_ERROR "find_package(enginery) did not use the installed package: ${enginery_dir}")
endif()
run("build examples/plugin" ${CMAKE_COMMAND} --build ${build})

set(library ${build}/plugins/example_plugin/libexample_plugin.so)
run("readelf" readelf -d ${library})
string(FIND "${step_output}" "${prefix}/lib" at)
if(at EQUAL -1)
  message(FATAL_ERROR "the plugin's RUNPATH does not name the installed library directory:\n${step_output}")
endif()

# Installed with a --prefix other than the configure-time one, the executable still finds its own plugins: the
# default plugin directory is resolved from the executable's path.
run("installed enginery plugins" ${CMAKE_COMMAND} -E env --unset=ENGINERY_PLUGIN_PATH ${prefix}/bin/enginery plugins)
foreach(expected "${prefix}/lib/enginery/plugins" "language_model / fsdp2 / cpu" "value_model / veomni / cpu")
  string(FIND "${step_output}" "${expected}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "the installed enginery does not find its own plugins (${expected}):\n${step_output}")
  endif()
endforeach()

run("enginery plugins" ${CMAKE_COMMAND} -E env --unset=ENGINERY_PLUGIN_PATH
    ${prefix}/bin/enginery plugins --plugin-dir ${build}/plugins)
message("${step_output}")
foreach(key "language_model / ddp / cpu" "value_model / ddp / cpu")
  string(FIND "${step_output}" "${key}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "the example plugin did not register ${key}")
  endif()
endforeach()
