# cmake -DMODE=<mode> -DCHECKS=<cmake/EngineryTorchChecks.cmake> -P torch_checks_test.cmake: calls one check with
# the inputs of a build that must be refused (CMakeLists.txt here matches the message it prints).
include(${CHECKS})
if(MODE STREQUAL "missing_torch")
  enginery_missing_torch_error("/opt/py/bin/python3" "ModuleNotFoundError: No module named 'torch'")
elseif(MODE STREQUAL "old_torch")
  enginery_check_torch_version("2.5.1+cpu" "/opt/py/bin/python3")
elseif(MODE STREQUAL "cuda_kernels_cpu_torch")
  enginery_cuda_kernels_default(ON "2.11.0+cpu" "" "/usr/local/cuda/bin/nvcc" out)
elseif(MODE STREQUAL "cuda_kernels_no_nvcc")
  enginery_cuda_kernels_default(ON "2.11.0+cu130" "13.0" "" out)
elseif(MODE STREQUAL "cuda_kernels_default")
  # Not asked for: the kernels are built exactly where they can be, and nothing fails.
  enginery_cuda_kernels_default("" "2.11.0+cpu" "" "/usr/local/cuda/bin/nvcc" cpu)
  enginery_cuda_kernels_default("" "2.11.0+cu130" "13.0" "" no_nvcc)
  enginery_cuda_kernels_default("" "2.11.0+cu130" "13.0" "/usr/local/cuda/bin/nvcc" both)
  enginery_check_torch_version("2.11.0+cu130" "/opt/py/bin/python3")
  message(STATUS "defaults: cpu-torch ${cpu}, cuda-torch-no-nvcc ${no_nvcc}, cuda-torch-nvcc ${both}")
endif()
