# Finds the chosen dependencies (docs/ARCHITECTURE.md, "Layers": LibTorch, Gloo/NCCL through c10d, Boost.DLL, TOML++, nlohmann/json,
# CLI11, GoogleTest, OpenSSL's libcrypto) and wraps LibTorch in one interface target with the c10d defines its headers need.
find_package(Torch REQUIRED)
# TOML++ is used header-only (TOML_HEADER_ONLY=1): Debian ships it as a compiled library, the GPU machine only
# has the headers we carry there (scripts/gpu/), and header-only works the same on both. Floats parse through
# std::from_chars (GCC 11+), not TOML++'s default std::stringstream: inside a PyTorch 2.x Python process the
# stream's extractor resolved to a bad address and every TOML float (optim.lr) crashed the Python module
# (docs/ARCHITECTURE.md, "Version compatibility"; found with scripts/gpu/diagnose_python_group.sh).
find_path(ENGINERY_TOMLPP_INCLUDE_DIR NAMES toml++/toml.h toml++/toml.hpp REQUIRED)
if(NOT TARGET tomlplusplus::tomlplusplus)
  add_library(tomlplusplus::tomlplusplus INTERFACE IMPORTED)
  set_target_properties(tomlplusplus::tomlplusplus PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES ${ENGINERY_TOMLPP_INCLUDE_DIR}
    INTERFACE_COMPILE_DEFINITIONS "TOML_HEADER_ONLY=1;TOML_FLOAT_CHARCONV=1")
endif()
find_package(nlohmann_json REQUIRED)
find_package(CLI11 REQUIRED)
find_package(GTest REQUIRED)
find_package(Boost REQUIRED)
# SHA-256 of plugin libraries and checkpoint files (support/sha256.cpp).
find_package(OpenSSL REQUIRED COMPONENTS Crypto)
find_package(Threads REQUIRED)

option(ENGINERY_WITH_NCCL "Build the NCCL process group path" ${TORCH_CUDA_AVAILABLE})
if(NOT DEFINED TORCH_CUDA_AVAILABLE AND TARGET torch_cuda)
  set(ENGINERY_WITH_NCCL ON)
endif()

# enginery's CUDA kernels (kernels/): built where LibTorch has CUDA and nvcc is found; elsewhere the ATen paths run.
set(_enginery_cuda_kernels_default OFF)
if(TARGET torch_cuda)
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    set(_enginery_cuda_kernels_default ON)
  endif()
endif()
option(ENGINERY_CUDA_KERNELS "Build enginery's CUDA kernels" ${_enginery_cuda_kernels_default})
if(ENGINERY_CUDA_KERNELS)
  # The architectures LibTorch is built for here (TORCH_CUDA_ARCH_LIST "9.0" -> 90), else the compiler's default.
  set(ENGINERY_CUDA_ARCHITECTURES "")
  foreach(arch IN LISTS TORCH_CUDA_ARCH_LIST)
    string(REGEX REPLACE "\\+PTX$" "" arch "${arch}")
    string(REPLACE "." "" arch "${arch}")
    list(APPEND ENGINERY_CUDA_ARCHITECTURES ${arch})
  endforeach()
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES AND ENGINERY_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES ${ENGINERY_CUDA_ARCHITECTURES})
  endif()
  enable_language(CUDA)
  find_package(CUDAToolkit REQUIRED)
endif()

add_library(enginery_torch INTERFACE)
target_link_libraries(enginery_torch INTERFACE ${TORCH_LIBRARIES})
target_compile_options(enginery_torch INTERFACE ${TORCH_CXX_FLAGS})
# PyTorch 2.x wheels export some std::filesystem symbols from libtorch.so (remove_all among them) that crash when
# called from our code; libstdc++ first in DT_NEEDED makes the dynamic linker bind them to the real library.
target_link_options(enginery_torch INTERFACE "LINKER:--push-state,--no-as-needed,-lstdc++,--pop-state")
# c10d's headers hide the Gloo and NCCL process groups behind these macros; LibTorch's CMake config sets neither.
# Gloo's headers ship with Debian's libgloo-dev but not with PyTorch's wheels; without them the CPU process group
# is unavailable (the GPU build then runs NCCL only).
find_path(ENGINERY_GLOO_INCLUDE_DIR gloo/config.h)
# ENGINERY_HAS_GLOO / ENGINERY_HAS_NCCL are ours: PyTorch's wheel config defines USE_C10D_GLOO even though it
# ships no Gloo headers, so the compat header keys on what we actually found.
if(ENGINERY_GLOO_INCLUDE_DIR)
  target_compile_definitions(enginery_torch INTERFACE USE_C10D_GLOO ENGINERY_HAS_GLOO)
endif()
if(ENGINERY_WITH_NCCL)
  target_compile_definitions(enginery_torch INTERFACE USE_C10D_NCCL ENGINERY_HAS_NCCL ENGINERY_WITH_CUDA)
endif()
# Debian's LibTorch installs the C++ API headers under a nested include directory.
if(EXISTS /usr/include/torch/csrc/api/include)
  target_include_directories(enginery_torch SYSTEM INTERFACE /usr/include/torch/csrc/api/include)
endif()
message(STATUS "enginery: LibTorch ${Torch_VERSION}, NCCL ${ENGINERY_WITH_NCCL}, CUDA kernels ${ENGINERY_CUDA_KERNELS} (${ENGINERY_CUDA_ARCHITECTURES}), Gloo headers ${ENGINERY_GLOO_INCLUDE_DIR}")
