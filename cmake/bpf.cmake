# Compiles bpf/<name>.bpf.c with clang -target bpf (CO-RE, vmlinux.h from the running
# kernel's BTF) and generates a libbpf skeleton header bpf/<name>.skel.h in the build tree.
find_program(BPF_CLANG NAMES clang clang-14 REQUIRED)
find_program(BPFTOOL NAMES bpftool PATHS /usr/sbin /sbin REQUIRED)

set(EACGM_BTF_FILE /sys/kernel/btf/vmlinux CACHE FILEPATH "BTF used to generate vmlinux.h")
set(EACGM_BPF_OUT ${CMAKE_BINARY_DIR}/bpf)
file(MAKE_DIRECTORY ${EACGM_BPF_OUT})

# One target owns vmlinux.h and each program's target waits for it: with the rule in both
# programs' targets, a parallel build ran it twice at once, and clang crashed reading the file
# the other run was rewriting (a clean -j2 build, 2026-11-26). Written aside, then renamed.
add_custom_command(
  OUTPUT ${EACGM_BPF_OUT}/vmlinux.h
  COMMAND ${BPFTOOL} btf dump file ${EACGM_BTF_FILE} format c > ${EACGM_BPF_OUT}/vmlinux.h.tmp
  COMMAND ${CMAKE_COMMAND} -E rename ${EACGM_BPF_OUT}/vmlinux.h.tmp ${EACGM_BPF_OUT}/vmlinux.h
  COMMENT "Generating vmlinux.h from ${EACGM_BTF_FILE}"
  VERBATIM)
add_custom_target(bpf_vmlinux DEPENDS ${EACGM_BPF_OUT}/vmlinux.h)
add_custom_target(bpf_skeletons)

# Extra clang flags after the name (host: -mcpu=v3, for the atomic exchanges of its scan);
# SOURCE path: a program kept elsewhere than bpf/ (a test workload's).
function(eacgm_bpf_skeleton name)
  cmake_parse_arguments(ARG "" "SOURCE" "" ${ARGN})
  set(src ${CMAKE_SOURCE_DIR}/bpf/${name}.bpf.c)
  if(ARG_SOURCE)
    set(src ${ARG_SOURCE})
  endif()
  set(obj ${EACGM_BPF_OUT}/${name}.bpf.o)
  set(skel ${EACGM_BPF_OUT}/${name}.skel.h)
  file(GLOB bpf_headers ${CMAKE_SOURCE_DIR}/bpf/*.h)
  add_custom_command(
    OUTPUT ${obj}
    COMMAND ${BPF_CLANG} -g -O2 -Wall -Werror -target bpf -D__TARGET_ARCH_x86 ${ARG_UNPARSED_ARGUMENTS}
            -I${EACGM_BPF_OUT} -I${CMAKE_SOURCE_DIR}/src -I${CMAKE_SOURCE_DIR}/bpf
            -c ${src} -o ${obj}
    DEPENDS ${src} ${EACGM_BPF_OUT}/vmlinux.h ${CMAKE_SOURCE_DIR}/src/events.h ${bpf_headers}
    COMMENT "Compiling BPF program ${name}.bpf.c"
    VERBATIM)
  add_custom_command(
    OUTPUT ${skel}
    COMMAND ${BPFTOOL} gen skeleton ${obj} name ${name}_bpf > ${skel}
    DEPENDS ${obj}
    COMMENT "Generating BPF skeleton ${name}.skel.h"
    VERBATIM)
  add_custom_target(bpf_${name} DEPENDS ${skel})
  add_dependencies(bpf_${name} bpf_vmlinux)
  add_dependencies(bpf_skeletons bpf_${name})
endfunction()
