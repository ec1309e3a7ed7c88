# Finds what the Python module (python/) is built with: a Python interpreter whose `torch` imports and is the
# LibTorch this tree builds against (the module hands at::Tensor and c10d groups to that torch's objects, so any
# other version would break at the first call), its headers and extension suffix, torch's libtorch_python, and
# pybind11's headers (the copy torch ships first, as its types are what we convert). Sets ENGINERY_PYTHON (option,
# default ON when everything is found) and ENGINERY_PYTHON_EXECUTABLE.
#
# The interpreter: ENGINERY_PYTHON_EXECUTABLE when given, else the first of `python3` on PATH and /usr/bin/python3
# that imports torch (a pyenv python3 first on PATH often has no torch, Debian's python3-torch lives in
# /usr/bin/python3's dist-packages).
set(ENGINERY_PYTHON_EXECUTABLE "" CACHE FILEPATH "Python whose torch the enginery module is built for (empty: search)")

set(_enginery_py_candidates ${ENGINERY_PYTHON_EXECUTABLE})
if(NOT ENGINERY_PYTHON_EXECUTABLE)
  find_program(_enginery_path_python3 NAMES python3)
  list(APPEND _enginery_py_candidates ${_enginery_path_python3} /usr/bin/python3)
endif()

set(_enginery_py_probe [=[
import os, sysconfig, torch
print(os.path.dirname(torch.__file__))
print(sysconfig.get_paths()["include"])
print(sysconfig.get_config_var("EXT_SUFFIX"))
print(torch.__version__.split("+")[0])
]=])
set(_enginery_py_found FALSE)
set(_enginery_py_why "no python3 that imports torch")
foreach(_py IN LISTS _enginery_py_candidates)
  if(NOT EXISTS "${_py}")
    continue()
  endif()
  execute_process(COMMAND "${_py}" -c "${_enginery_py_probe}" RESULT_VARIABLE _rc OUTPUT_VARIABLE _out
                  ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT _rc EQUAL 0)
    continue()
  endif()
  string(REPLACE "\n" ";" _out "${_out}")
  list(GET _out 0 _torch_dir)
  list(GET _out 1 _py_include)
  list(GET _out 2 _py_suffix)
  list(GET _out 3 _py_torch_version)
  # Major.minor must match the LibTorch of find_package(Torch): Debian's python3-torch says 1.13.0a0 for 1.13.1.
  string(REGEX MATCH "^[0-9]+\\.[0-9]+" _py_torch_mm "${_py_torch_version}")
  string(REGEX MATCH "^[0-9]+\\.[0-9]+" _lib_torch_mm "${Torch_VERSION}")
  if(_lib_torch_mm AND NOT _py_torch_mm STREQUAL _lib_torch_mm)
    set(_enginery_py_why "${_py} imports torch ${_py_torch_version}, the build uses LibTorch ${Torch_VERSION}")
    continue()
  endif()
  find_library(ENGINERY_TORCH_PYTHON_LIBRARY torch_python HINTS "${_torch_dir}/lib" NO_DEFAULT_PATH)
  find_path(ENGINERY_PYBIND11_INCLUDE_DIR pybind11/pybind11.h HINTS "${_torch_dir}/include")
  if(NOT ENGINERY_TORCH_PYTHON_LIBRARY OR NOT ENGINERY_PYBIND11_INCLUDE_DIR OR NOT EXISTS "${_py_include}/Python.h")
    set(_enginery_py_why "${_py}: libtorch_python, pybind11 headers or Python.h missing (pybind11-dev, python3-dev)")
    continue()
  endif()
  set(_enginery_py_found TRUE)
  set(ENGINERY_PYTHON_EXECUTABLE "${_py}" CACHE FILEPATH "Python whose torch the enginery module is built for" FORCE)
  set(ENGINERY_PYTHON_INCLUDE_DIR "${_py_include}")
  set(ENGINERY_PYTHON_EXT_SUFFIX "${_py_suffix}")
  break()
endforeach()

option(ENGINERY_PYTHON "Build the enginery Python module (python/)" ${_enginery_py_found})
if(ENGINERY_PYTHON AND NOT _enginery_py_found)
  message(FATAL_ERROR "ENGINERY_PYTHON is ON but ${_enginery_py_why}; set ENGINERY_PYTHON_EXECUTABLE or install "
                      "python3-torch pybind11-dev python3-dev (scripts/install_deps.sh)")
endif()
if(ENGINERY_PYTHON)
  message(STATUS "enginery: Python module for ${ENGINERY_PYTHON_EXECUTABLE} (torch ${_py_torch_version})")
else()
  message(STATUS "enginery: Python module off (${_enginery_py_why})")
endif()
