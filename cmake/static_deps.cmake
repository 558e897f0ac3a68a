# The release's libraries: every one but glibc linked statically, so that the binary runs on a
# GPU node's Ubuntu, RHEL or vendor image whatever libraries that has (as bpftrace's and Ingero's
# static builds do). Sets EACGM_LIBS (what eacgm_core links) and EACGM_OPENMP (eacgm_detect's).
#
# Debian ships static archives of libbpf, libelf, zlib, SQLite, capstone and libcap; libstdc++ and
# libgomp come from GCC's own archives (libstdc++: the eacgm target's -static-libstdc++ in
# CMakeLists.txt, which says why libgcc_s stays shared). prometheus-cpp and fmt have no static
# archive in Debian: scripts/release_deps.sh (run by scripts/setup.sh) builds them from Debian's
# source packages into EACGM_DEPS_PREFIX. glibc stays shared (its NSS and dlopen
# need it so); NVML and CUPTI are the target's own, dlopen()ed at run time.

set(EACGM_DEPS_PREFIX "${CMAKE_SOURCE_DIR}/.deps/prefix" CACHE PATH
    "where scripts/release_deps.sh installed the static prometheus-cpp core")
if(NOT EXISTS "${EACGM_DEPS_PREFIX}/lib/libprometheus-cpp-core.a" OR
   NOT EXISTS "${EACGM_DEPS_PREFIX}/lib/libfmt.a")
  message(FATAL_ERROR "${EACGM_DEPS_PREFIX} lacks the static prometheus-cpp core or fmt: run "
                      "scripts/setup.sh (it builds one with scripts/release_deps.sh), or configure "
                      "with -DEACGM_STATIC=OFF for a build against Debian's shared libraries")
endif()

set(EACGM_LIBS "")
# in link order: an archive before the ones it uses
foreach(lib bpf elf sqlite3 capstone cap z)
  find_library(EACGM_STATIC_${lib} NAMES lib${lib}.a REQUIRED)
endforeach()

# (a build directory configured before may hold the shared ones' locations)
unset(prometheus-cpp_DIR CACHE)
unset(fmt_DIR CACHE)
find_package(prometheus-cpp CONFIG REQUIRED PATHS "${EACGM_DEPS_PREFIX}" NO_DEFAULT_PATH)
find_package(fmt CONFIG REQUIRED PATHS "${EACGM_DEPS_PREFIX}" NO_DEFAULT_PATH)
foreach(target prometheus-cpp::core fmt::fmt)
  get_target_property(_eacgm_type ${target} TYPE)
  if(NOT _eacgm_type STREQUAL "STATIC_LIBRARY")
    message(FATAL_ERROR "${target} in ${EACGM_DEPS_PREFIX} is ${_eacgm_type}, not a static "
                        "library: delete ${EACGM_DEPS_PREFIX} and rerun scripts/release_deps.sh")
  endif()
endforeach()

list(APPEND EACGM_LIBS prometheus-cpp::core fmt::fmt)
foreach(lib bpf elf sqlite3 capstone cap z)
  list(APPEND EACGM_LIBS ${EACGM_STATIC_${lib}})
endforeach()
list(APPEND EACGM_LIBS m ${CMAKE_DL_LIBS} Threads::Threads)

# OpenMP: compile with -fopenmp, link GCC's libgomp.a rather than libgomp.so
execute_process(COMMAND ${CMAKE_CXX_COMPILER} -print-file-name=libgomp.a
                OUTPUT_VARIABLE EACGM_LIBGOMP_A OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT EXISTS "${EACGM_LIBGOMP_A}")
  message(FATAL_ERROR "no libgomp.a beside ${CMAKE_CXX_COMPILER} (${EACGM_LIBGOMP_A})")
endif()
add_library(eacgm_openmp_static INTERFACE)
target_compile_options(eacgm_openmp_static INTERFACE ${OpenMP_CXX_FLAGS})
target_link_libraries(eacgm_openmp_static INTERFACE ${EACGM_LIBGOMP_A} Threads::Threads
                                                    ${CMAKE_DL_LIBS})
set(EACGM_OPENMP eacgm_openmp_static)
