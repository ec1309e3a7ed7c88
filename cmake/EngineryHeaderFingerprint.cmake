# enginery_header_fingerprint(<out-var> <include-root> [DEPEND]): the first 16 hex digits of a SHA-256 over the
# headers a plugin compiles against, as installed under <include-root>: host_api/, models/, support/ and the public
# kernels/ headers, each by relative path and content, in sorted order (docs/ARCHITECTURE.md, "Version
# compatibility"). The source tree and an install of it give the same value, so an in-tree plugin, an out-of-tree
# one and the host agree exactly when their headers do. DEPEND: re-run CMake when one of them changes.
set(ENGINERY_FINGERPRINT_KERNEL_HEADERS fused_cuda.h runtime_switch.h)

function(enginery_header_fingerprint out root)
  cmake_parse_arguments(ARG "DEPEND" "" "" ${ARGN})
  set(text "")
  set(files "")
  foreach(dir host_api models support)
    file(GLOB headers CONFIGURE_DEPENDS RELATIVE ${root} ${root}/${dir}/*.h)
    list(APPEND files ${headers})
  endforeach()
  foreach(header ${ENGINERY_FINGERPRINT_KERNEL_HEADERS})
    list(APPEND files kernels/${header})
  endforeach()
  list(SORT files)
  foreach(file ${files})
    file(SHA256 ${root}/${file} digest)
    string(APPEND text "${file} ${digest}\n")
    if(ARG_DEPEND)
      set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${root}/${file})
    endif()
  endforeach()
  string(SHA256 fingerprint "${text}")
  string(SUBSTRING ${fingerprint} 0 16 fingerprint)
  set(${out} ${fingerprint} PARENT_SCOPE)
endfunction()
