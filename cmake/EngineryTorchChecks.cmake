# The checks of the torch a build is asked to use, as functions so that tests/packaging/ can run each alone with
# `cmake -P` (docs/ARCHITECTURE.md, "Packaging"). Each fails with one line naming what was found and what to do.
set(ENGINERY_MIN_TORCH_VERSION 2.8)

# The leading space keeps CMake from wrapping the message over several lines.
function(_enginery_refuse)
  string(CONCAT text ${ARGN})
  message(FATAL_ERROR " ${text}")
endfunction()

# The interpreter has no importable torch.
function(enginery_missing_torch_error python why)
  _enginery_refuse("enginery builds against the torch of the Python it runs with, and ${python} has none "
                      "(${why}): install torch there first (pip install torch, pinned in "
                      "this project's requirements.txt), or point -DENGINERY_PYTHON_EXECUTABLE at a Python that has it")
endfunction()

# `version` is torch.__version__ (2.11.0+cu130).
function(enginery_check_torch_version version python)
  string(REGEX MATCH "^[0-9]+\\.[0-9]+" major_minor "${version}")
  if(major_minor VERSION_LESS ENGINERY_MIN_TORCH_VERSION)
    _enginery_refuse("enginery needs torch ${ENGINERY_MIN_TORCH_VERSION} or newer, and ${python} has torch "
                        "${version}: pip install 'torch>=${ENGINERY_MIN_TORCH_VERSION}' (requirements.txt pins the "
                        "tested one)")
  endif()
endfunction()

# `requested`: the value of ENGINERY_CUDA_KERNELS given on the command line ("" when not given); `torch_cuda`:
# torch.version.cuda ("" for a CPU-only torch). Sets ${out} to the option's default.
function(enginery_cuda_kernels_default requested torch_version torch_cuda nvcc out)
  if(requested AND NOT torch_cuda)
    _enginery_refuse("ENGINERY_CUDA_KERNELS=ON needs a CUDA build of torch, and torch ${torch_version} is "
                        "CPU-only: install a CUDA torch (PyPI's Linux x86_64 wheels are) or configure with "
                        "-DENGINERY_CUDA_KERNELS=OFF")
  endif()
  if(requested AND NOT nvcc)
    _enginery_refuse("ENGINERY_CUDA_KERNELS=ON needs nvcc (the CUDA toolkit ${torch_cuda} of torch "
                        "${torch_version}), and none was found: install it or set CUDACXX, or configure with "
                        "-DENGINERY_CUDA_KERNELS=OFF")
  endif()
  if(torch_cuda AND nvcc)
    set(${out} ON PARENT_SCOPE)
  else()
    set(${out} OFF PARENT_SCOPE)
  endif()
endfunction()
