# ctest registry.out_of_tree_plugin: install this build into a fresh prefix, check that the prefix holds the plugin
# SDK a third party needs and nothing private (docs/PLUGIN_GUIDE.md, "What the install holds"), build the example
# plugin's installed copy against it with find_package(enginery) only, as a C++14 project with no build type, and
# load the result with the installed `enginery plugins`. The fixture it sets up (WORK_DIR/prefix,
# WORK_DIR/build/plugins) is what conformance.example runs the suite on.
# Inputs: BUILD_DIR, WORK_DIR, CXX_COMPILER, GENERATOR, [COMPILER_LAUNCHER].
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

# The SDK's documents and the example's sources are in the prefix; the fsdp plugin's private headers are not.
set(docs ${prefix}/share/doc/enginery)
set(example_dir ${docs}/examples/plugin)
foreach(file ${docs}/PLUGIN_GUIDE.md ${docs}/CONFORMANCE.md ${docs}/ARCHITECTURE.md ${example_dir}/CMakeLists.txt
             ${example_dir}/README.md
             ${example_dir}/ddp_engine.cpp ${example_dir}/ddp_engine.h ${example_dir}/plugin.cpp
             ${example_dir}/plugin.toml.in)
  if(NOT EXISTS ${file})
    message(FATAL_ERROR "the install lacks ${file}")
  endif()
endforeach()
file(GLOB_RECURSE private RELATIVE ${prefix} ${prefix}/include/enginery/plugin/*)
if(private OR EXISTS ${prefix}/include/enginery/plugin)
  message(FATAL_ERROR "the fsdp plugin's private headers are installed: ${private}")
endif()

# Every table of the installed documents has as many cells in each row as in its header (a '|' inside `code`
# does not count), so none renders broken.
foreach(md ${docs}/PLUGIN_GUIDE.md ${docs}/CONFORMANCE.md ${example_dir}/README.md)
  # One list element per line: the characters CMake's lists treat specially go first.
  file(READ ${md} text)
  string(REPLACE ";" "," text "${text}")
  string(REPLACE "[" "(" text "${text}")
  string(REPLACE "]" ")" text "${text}")
  string(REPLACE "\\" "/" text "${text}")
  string(REPLACE "\n" ";" lines "${text}")
  set(header_cells 0)
  set(line_number 0)
  foreach(line IN LISTS lines)
    math(EXPR line_number "${line_number} + 1")
    if(NOT line MATCHES "^\\|")
      set(header_cells 0)
      continue()
    endif()
    string(REGEX REPLACE "`[^`]*`" "" outside_code "${line}")
    string(REGEX MATCHALL "\\|" bars "${outside_code}")
    list(LENGTH bars cells)
    if(header_cells EQUAL 0)
      set(header_cells ${cells})
    elseif(NOT cells EQUAL header_cells)
      message(FATAL_ERROR "${md}:${line_number}: a table row with ${cells} '|' under a header with "
                          "${header_cells}:\n${line}")
    endif()
  endforeach()
endforeach()

# The installed manifest documentation gives the api_version this host speaks (host_api/version.h).
file(READ ${prefix}/include/enginery/host_api/version.h version_h)
string(REGEX MATCH "kContractVersion = ([0-9]+)" _ "${version_h}")
set(api "${CMAKE_MATCH_1}")

# The contract is readable in one sitting: at most 600 lines as installed, comments included (issue 43; what a host
# uses to drive engines is engine_driver/, installed beside it).
file(GLOB contract ${prefix}/include/enginery/host_api/*.h)
set(contract_lines 0)
foreach(header ${contract})
  file(READ ${header} text)
  string(REGEX MATCHALL "\n" newlines "${text}")
  list(LENGTH newlines count)
  math(EXPR contract_lines "${contract_lines} + ${count}")
endforeach()
if(contract_lines GREATER 600)
  message(FATAL_ERROR "the installed contract (include/enginery/host_api) has ${contract_lines} lines, over 600")
endif()
if(NOT EXISTS ${prefix}/include/enginery/engine_driver/step_loop.h)
  message(FATAL_ERROR "the install lacks the host's engine_driver headers")
endif()
foreach(file ${prefix}/include/enginery/registry/manifest.h ${example_dir}/plugin.toml.in)
  file(READ ${file} text)
  string(REGEX MATCH "api_version = \"([0-9.]+)\"" _ "${text}")
  if(NOT CMAKE_MATCH_1 STREQUAL api)
    message(FATAL_ERROR "${file} documents api_version \"${CMAKE_MATCH_1}\", the installed host_api is ${api}")
  endif()
endforeach()

set(launcher)
if(COMPILER_LAUNCHER)
  set(launcher -DCMAKE_CXX_COMPILER_LAUNCHER=${COMPILER_LAUNCHER})
endif()
# From the prefix alone, as a C++14 project: the exported targets must raise the standard to C++17 themselves
# (host_api/batch.h does not compile as C++14), and the example must pick its own build type.
run("configure the installed examples/plugin" ${CMAKE_COMMAND} -S ${example_dir} -B ${build} -G ${GENERATOR}
    -DCMAKE_CXX_COMPILER=${CXX_COMPILER} -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_CXX_STANDARD=14
    -DCMAKE_CXX_EXTENSIONS=ON -DCMAKE_EXPORT_COMPILE_COMMANDS=ON ${launcher})
file(STRINGS ${build}/CMakeCache.txt enginery_dir REGEX "^enginery_DIR:")
string(FIND "${enginery_dir}" "${prefix}/" at)
if(at EQUAL -1)
  message(FATAL_ERROR "find_package(enginery) did not use the installed package: ${enginery_dir}")
endif()
file(STRINGS ${build}/CMakeCache.txt build_type REGEX "^CMAKE_BUILD_TYPE:")
if(NOT build_type MATCHES "=Release$")
  message(FATAL_ERROR "the example plugin set no default build type: ${build_type}")
endif()
file(READ ${build}/compile_commands.json commands)
if(NOT commands MATCHES "-std=gnu\\+\\+17" OR commands MATCHES "-std=gnu\\+\\+14")
  message(FATAL_ERROR "enginery's targets did not raise a C++14 project to C++17:\n${commands}")
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
