# Finds the chosen dependencies (docs/ARCHITECTURE.md, "Layers": LibTorch, Gloo/NCCL through c10d, Boost.DLL, TOML++, nlohmann/json,
# CLI11, GoogleTest, OpenSSL's libcrypto) and wraps LibTorch in one interface target with the c10d defines its headers need.
include(EngineryTorch)
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

# enginery's CUDA kernels (kernels/): built where torch has CUDA and nvcc is found (torch's config needs nvcc for a
# CUDA torch anyway); elsewhere the ATen paths run. Asked for where they cannot build: one line saying why.
include(CheckLanguage)
check_language(CUDA)
enginery_cuda_kernels_default("${ENGINERY_CUDA_KERNELS}" "${ENGINERY_TORCH_VERSION}" "${ENGINERY_TORCH_CUDA}"
                              "${CMAKE_CUDA_COMPILER}" _enginery_cuda_kernels_default)
option(ENGINERY_CUDA_KERNELS "Build enginery's CUDA kernels" ${_enginery_cuda_kernels_default})
if(ENGINERY_CUDA_KERNELS)
  # torch's config already put the -gencode flags of TORCH_CUDA_ARCH_LIST (EngineryTorch.cmake) into
  # CMAKE_CUDA_FLAGS; CMake's own architecture flags would only add a second, default one.
  set(CMAKE_CUDA_ARCHITECTURES OFF)
  enable_language(CUDA)
  find_package(CUDAToolkit REQUIRED)
endif()

add_library(enginery_torch INTERFACE)
target_link_libraries(enginery_torch INTERFACE ${TORCH_LIBRARIES})
target_compile_options(enginery_torch INTERFACE ${TORCH_CXX_FLAGS})
# LibTorch's headers need C++17, and TorchConfig.cmake sets CXX_STANDARD on its own target only (not a usage
# requirement), so the requirement is exported here: every consumer of enginery::torch compiles as C++17 or newer.
target_compile_features(enginery_torch INTERFACE cxx_std_17)
# PyTorch 2.x wheels export some std::filesystem symbols from libtorch.so (remove_all among them) that crash when
# called from our code; libstdc++ first in DT_NEEDED makes the dynamic linker bind them to the real library.
target_link_options(enginery_torch INTERFACE "LINKER:--push-state,--no-as-needed,-lstdc++,--pop-state")
# c10d's headers hide the Gloo and NCCL process groups behind these macros; LibTorch's CMake config sets neither.
# Gloo's headers ship with Debian's libgloo-dev but not with PyTorch's wheels; without them the CPU process group
# is unavailable (the GPU build then runs NCCL only). Debian's are older than the Gloo inside torch 2.x: c10d's
# ProcessGroupGloo.hpp reaches Gloo's types only through pointers (and guards the newer store API), so the
# difference stays out of every layout enginery compiles; the multi-rank Gloo tests run on it.
find_path(ENGINERY_GLOO_INCLUDE_DIR gloo/config.h)
# ENGINERY_HAS_GLOO / ENGINERY_HAS_NCCL are ours: PyTorch's wheel config defines USE_C10D_GLOO even though it
# ships no Gloo headers, so the compat header keys on what we actually found.
if(ENGINERY_GLOO_INCLUDE_DIR)
  target_compile_definitions(enginery_torch INTERFACE USE_C10D_GLOO ENGINERY_HAS_GLOO)
endif()
if(ENGINERY_WITH_NCCL)
  target_compile_definitions(enginery_torch INTERFACE USE_C10D_NCCL ENGINERY_HAS_NCCL ENGINERY_WITH_CUDA)
endif()
message(STATUS "enginery: torch ${ENGINERY_TORCH_VERSION} (${ENGINERY_TORCH_DIR}), NCCL ${ENGINERY_WITH_NCCL}, "
               "CUDA kernels ${ENGINERY_CUDA_KERNELS} ($ENV{TORCH_CUDA_ARCH_LIST}), Gloo headers ${ENGINERY_GLOO_INCLUDE_DIR}")
