# What the Python module (python/) is built with, beyond EngineryTorch.cmake's interpreter and torch: torch's
# libtorch_python, and pybind11's headers — the copy torch ships, as its types are the ones we convert. Sets
# ENGINERY_PYTHON (option, default ON when everything is found).
find_library(ENGINERY_TORCH_PYTHON_LIBRARY torch_python HINTS "${ENGINERY_TORCH_DIR}/lib" NO_DEFAULT_PATH)
find_path(ENGINERY_PYBIND11_INCLUDE_DIR pybind11/pybind11.h HINTS "${ENGINERY_TORCH_DIR}/include" NO_DEFAULT_PATH)
set(_enginery_py_found TRUE)
if(NOT ENGINERY_TORCH_PYTHON_LIBRARY OR NOT ENGINERY_PYBIND11_INCLUDE_DIR)
  set(_enginery_py_found FALSE)
  set(_enginery_py_why "torch at ${ENGINERY_TORCH_DIR} has no libtorch_python or pybind11 headers")
elseif(NOT EXISTS "${ENGINERY_PYTHON_INCLUDE_DIR}/Python.h")
  set(_enginery_py_found FALSE)
  set(_enginery_py_why "no Python.h in ${ENGINERY_PYTHON_INCLUDE_DIR} (Debian: python3-dev)")
endif()

option(ENGINERY_PYTHON "Build the enginery Python module (python/)" ${_enginery_py_found})
if(ENGINERY_PYTHON AND NOT _enginery_py_found)
  message(FATAL_ERROR "ENGINERY_PYTHON is ON but ${_enginery_py_why}")
endif()
if(ENGINERY_PYTHON)
  message(STATUS "enginery: Python module for ${ENGINERY_PYTHON_EXECUTABLE}")
else()
  message(STATUS "enginery: Python module off (${_enginery_py_why})")
endif()
