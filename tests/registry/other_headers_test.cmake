# ctest registry.plugin_built_against_other_headers (docs/ARCHITECTURE.md, "Version compatibility"): a plugin built
# against headers other than the host's is refused at load, by name, and never runs. As 2.4 did, the copy of the
# installed headers drops `temperature` from models::HeadOptions: a plugin built against it would read every later
# field of the host's struct at the wrong offset (in 2.x it trained on NaN). The example plugin is built out of tree
# against that copy (without the line that sets the field) and the installed `enginery plugins` must refuse it.
# Inputs: PREFIX (the install of registry.out_of_tree_plugin), WORK_DIR, CXX_COMPILER, GENERATOR, [COMPILER_LAUNCHER].
function(run step)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${step} failed (${rc}):\n${out}\n${err}")
  endif()
endfunction()

function(drop_line file line)
  file(READ ${file} text)
  string(FIND "${text}" "${line}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "${file} has no line '${line}': this test no longer changes what it means to")
  endif()
  string(REPLACE "${line}\n" "" text "${text}")
  file(WRITE ${file} "${text}")
endfunction()

file(REMOVE_RECURSE ${WORK_DIR})
set(other ${WORK_DIR}/prefix)
# The other headers: a copy of the installed ones with HeadOptions::temperature gone. Libraries and the CMake package
# are the installed ones (linked and copied), so only the headers differ.
file(COPY ${PREFIX}/include DESTINATION ${other})
file(COPY ${PREFIX}/lib/cmake DESTINATION ${other}/lib)
file(GLOB libraries ${PREFIX}/lib/libenginery_*)
foreach(library ${libraries})
  get_filename_component(name ${library} NAME)
  file(CREATE_LINK ${library} ${other}/lib/${name} SYMBOLIC)
endforeach()
drop_line(${other}/include/enginery/models/decoder_model.h "  double temperature = 1.0;")
set(example ${WORK_DIR}/example)
file(COPY ${PREFIX}/share/doc/enginery/examples/plugin/ DESTINATION ${example})
drop_line(${example}/ddp_engine.cpp "  head.temperature = enginery::batch_temperature(micro_batch);")

set(launcher)
if(COMPILER_LAUNCHER)
  set(launcher -DCMAKE_CXX_COMPILER_LAUNCHER=${COMPILER_LAUNCHER})
endif()
set(build ${WORK_DIR}/build)
run("configure the example against the other headers" ${CMAKE_COMMAND} -S ${example} -B ${build} -G ${GENERATOR}
    -DCMAKE_CXX_COMPILER=${CXX_COMPILER} -DCMAKE_PREFIX_PATH=${other} ${launcher})
run("build the example against the other headers" ${CMAKE_COMMAND} --build ${build})

execute_process(COMMAND ${CMAKE_COMMAND} -E env --unset=ENGINERY_PLUGIN_PATH ${PREFIX}/bin/enginery plugins
                        --plugin-dir ${build}/plugins
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}\n${err}")
if(rc EQUAL 0)
  message(FATAL_ERROR "enginery plugins accepted a plugin built against other headers")
endif()
foreach(expected "example_plugin" "built against other enginery headers" "rebuild it against this installation")
  string(FIND "${out}\n${err}" "${expected}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "enginery plugins does not say why it refused the plugin ('${expected}' missing)")
  endif()
endforeach()
