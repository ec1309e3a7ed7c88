# LibTorch headers cost ~20 s per translation unit on the CI's 2 cores; one precompiled header shared by every
# target keeps a clean `make test` well inside its budget.
add_library(enginery_pch OBJECT ${CMAKE_CURRENT_LIST_DIR}/pch_anchor.cpp)
target_link_libraries(enginery_pch PRIVATE enginery_torch)
target_precompile_headers(enginery_pch PRIVATE
  <torch/torch.h>
  <ATen/autocast_mode.h>
  <torch/csrc/distributed/c10d/Store.hpp>
  <vector> <string> <map> <memory> <functional>)

function(enginery_use_pch target)
  if(NOT ENGINERY_NO_PCH)
    # gcc refuses a PCH built with -fPIC in a TU built with -fPIE; executables compile with -fPIC instead (a PIE
    # links fine from PIC objects) so they reuse the same header.
    get_target_property(type ${target} TYPE)
    if(type STREQUAL "EXECUTABLE")
      set_target_properties(${target} PROPERTIES POSITION_INDEPENDENT_CODE OFF)
      target_compile_options(${target} PRIVATE -fPIC)
    endif()
    target_precompile_headers(${target} REUSE_FROM enginery_pch)
  endif()
endfunction()
