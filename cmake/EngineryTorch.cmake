# Finds the torch enginery builds against: the one installed in a Python environment (PyPI's torch 2.x; the user's
# own), asked through that environment's interpreter, so the engines, the CLI and the Python module link exactly the
# libtorch that `import torch` loads there (docs/ARCHITECTURE.md, "Packaging").
#
# The interpreter: ENGINERY_PYTHON_EXECUTABLE when given, else the one scikit-build-core runs the build with
# (Python_EXECUTABLE), else python3 on PATH. It runs with -E: under pip's build isolation PYTHONPATH points at the
# isolated build environment only, and -E looks past it at the environment being installed into, whose torch is
# the one the package will run with. torch is therefore not a build requirement (pyproject.toml says why).
#
# Sets: ENGINERY_PYTHON_EXECUTABLE, ENGINERY_TORCH_DIR (the torch package folder), ENGINERY_TORCH_VERSION
# (torch.__version__, e.g. 2.11.0+cu130), ENGINERY_TORCH_CUDA (torch.version.cuda, empty for a CPU-only torch),
# ENGINERY_PYTHON_INCLUDE_DIR, ENGINERY_PYTHON_EXT_SUFFIX; then find_package(Torch).
include(${CMAKE_CURRENT_LIST_DIR}/EngineryTorchChecks.cmake)

set(ENGINERY_PYTHON_EXECUTABLE "" CACHE FILEPATH "Python whose torch enginery builds against (empty: search)")
set(_enginery_py "${ENGINERY_PYTHON_EXECUTABLE}")
if(NOT _enginery_py AND Python_EXECUTABLE)
  set(_enginery_py "${Python_EXECUTABLE}")
endif()
if(NOT _enginery_py)
  # A result variable of its own: find_program into _enginery_py, a normal variable already set empty above, leaves
  # it empty under CMake 4's policies.
  find_program(ENGINERY_PYTHON_ON_PATH NAMES python3 python)
  set(_enginery_py "${ENGINERY_PYTHON_ON_PATH}")
endif()

set(_enginery_probe [=[
import os, sys, sysconfig
print(sysconfig.get_paths()["include"])
print(sysconfig.get_config_var("EXT_SUFFIX"))
try:
    import torch
except Exception as e:
    print("no-torch")
    print(f"{type(e).__name__}: {e}".splitlines()[0])
    sys.exit(0)
print("torch")
print(torch.__version__)
print(torch.version.cuda or "")
print(os.path.dirname(torch.__file__))
print(torch.utils.cmake_prefix_path)
]=])
execute_process(COMMAND "${_enginery_py}" -E -c "${_enginery_probe}" RESULT_VARIABLE _rc OUTPUT_VARIABLE _out
                ERROR_VARIABLE _err OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT _rc EQUAL 0)
  message(FATAL_ERROR "enginery: could not run the Python '${_enginery_py}' (${_err}); set "
                      "-DENGINERY_PYTHON_EXECUTABLE=<the python of the environment that has torch>")
endif()
string(REPLACE "\n" ";" _out "${_out}")
list(GET _out 0 ENGINERY_PYTHON_INCLUDE_DIR)
list(GET _out 1 ENGINERY_PYTHON_EXT_SUFFIX)
list(GET _out 2 _has_torch)
if(NOT _has_torch STREQUAL "torch")
  list(GET _out 3 _why)
  enginery_missing_torch_error("${_enginery_py}" "${_why}")
endif()
list(GET _out 3 ENGINERY_TORCH_VERSION)
list(GET _out 4 ENGINERY_TORCH_CUDA)
list(GET _out 5 ENGINERY_TORCH_DIR)
list(GET _out 6 _torch_cmake_prefix)
set(ENGINERY_PYTHON_EXECUTABLE "${_enginery_py}" CACHE FILEPATH "Python whose torch enginery builds against" FORCE)
enginery_check_torch_version("${ENGINERY_TORCH_VERSION}" "${_enginery_py}")

# torch's CMake config compiles CUDA for TORCH_CUDA_ARCH_LIST, and without a visible GPU falls back to a list that
# starts at sm_50, which nvcc 13 no longer compiles. Unset: this machine's GPUs, else the data-centre and consumer
# generations PyPI's CUDA 13 torch is built for from Ampere on.
if(ENGINERY_TORCH_CUDA AND NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST} AND NOT TORCH_CUDA_ARCH_LIST)
  execute_process(COMMAND nvidia-smi --query-gpu=compute_cap --format=csv,noheader RESULT_VARIABLE _smi_rc
                  OUTPUT_VARIABLE _smi_out ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(_smi_rc EQUAL 0 AND _smi_out)
    string(REPLACE "\n" ";" _arch "${_smi_out}")
    list(REMOVE_DUPLICATES _arch)
  else()
    set(_arch "8.0;9.0;10.0;12.0")
  endif()
  set(ENV{TORCH_CUDA_ARCH_LIST} "${_arch}")
endif()

list(PREPEND CMAKE_PREFIX_PATH "${_torch_cmake_prefix}")
find_package(Torch REQUIRED)
