# ctest conformance.example: the installed `enginery conformance` on the example plugin built out of tree by
# registry.out_of_tree_plugin. Passes when the suite exits 0 and every check ran except those needing fp16 (the
# example declares no fp16 capability: it has no grad scaler) or offload, either kind (it keeps its state where it
# is), or shard export (its replicas are whole: enginery.verl's full-tensor fallback serves it), or train state (its
# parameters are a plain module's, no views of shards), or the log-prob checks on its value model, or the refusal of
# an undeclared temperature (it declares one), so a check cannot pass by being skipped.
# Inputs: ENGINERY (the installed executable), PLUGIN_DIR.
execute_process(
  COMMAND ${CMAKE_COMMAND} -E env --unset=ENGINERY_PLUGIN_PATH ${ENGINERY} conformance --plugin-dir ${PLUGIN_DIR}
          --backend ddp
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "enginery conformance failed (${rc}):\n${err}")
endif()
string(REGEX MATCHALL "SKIP  [^\n]*" skips "${out}")
foreach(skip IN LISTS skips)
  if(NOT skip MATCHES "fp16" AND NOT skip MATCHES "'offload'" AND NOT skip MATCHES "'offload-modes'"
     AND NOT skip MATCHES "'shard-export'" AND NOT skip MATCHES "'train-state'"
     AND NOT skip MATCHES "a value model has no log-probs"
     AND NOT skip MATCHES "temperature_refused_when_undeclared .* the engine declares 'temperature'")
    message(FATAL_ERROR "a check the example's capabilities cover was skipped: ${skip}")
  endif()
endforeach()
string(REGEX MATCHALL "PASS  [^\n]*" passes "${out}")
list(LENGTH passes passed)
if(passed LESS 2)
  message(FATAL_ERROR "no checks passed")
endif()
