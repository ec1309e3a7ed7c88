# `make demo` (and the other targets that need no tests) must keep the tests of a build tree configured with them,
# and build without tests in a fresh one (issue 41). `make -n` prints the wheel build's CMake define, runs nothing.
# Run: cmake -DSOURCE=<repo> -DWORK=<scratch dir> -P make_demo_keeps_tests.cmake
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}/with-tests")
file(WRITE "${WORK}/with-tests/CMakeCache.txt" "ENGINERY_BUILD_TESTS:BOOL=ON\n")
foreach(case "with-tests;ON" "fresh;OFF")
  list(GET case 0 build)
  list(GET case 1 expected)
  foreach(target demo demo-rl bench-fidelity-cpu)
    execute_process(COMMAND make -n -C "${SOURCE}" ${target} "BUILD=${WORK}/${build}" "VENV=${WORK}/venv"
                    OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
    string(REGEX MATCH "ENGINERY_BUILD_TESTS=[A-Z]+" define "${out}")
    if(NOT define STREQUAL "ENGINERY_BUILD_TESTS=${expected}")
      message(FATAL_ERROR "make -n ${target} in a ${build} build tree: '${define}', expected "
                          "ENGINERY_BUILD_TESTS=${expected} (rc ${rc}: ${err})")
    endif()
  endforeach()
endforeach()
message(STATUS "make demo keeps a build tree's tests")
