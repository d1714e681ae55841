# doorbellConfig.cmake -- CMake package for an installed doorbell.
#
# Installed as <prefix>/lib/cmake/doorbell/doorbellConfig.cmake by
# scripts/install-prefix.sh.  Every path is relative to this file, so the
# prefix can be moved.  Provides:
#   doorbell::doorbell         the shared library (libdoorbell.so)
#   doorbell::doorbell_static  the static library (libdoorbell.a) and the
#                              system libraries Rust's std needs
# and sets doorbell_INCLUDE_DIR, doorbell_LIBRARY, doorbell_STATIC_LIBRARY.

cmake_minimum_required(VERSION 3.16)

get_filename_component(_doorbell_prefix "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)
set(doorbell_INCLUDE_DIR "${_doorbell_prefix}/include")
set(doorbell_LIBRARY "${_doorbell_prefix}/lib/libdoorbell.so")
set(doorbell_STATIC_LIBRARY "${_doorbell_prefix}/lib/libdoorbell.a")

foreach(_doorbell_file "${doorbell_INCLUDE_DIR}/doorbell.h" "${doorbell_LIBRARY}"
                       "${doorbell_STATIC_LIBRARY}")
  if(NOT EXISTS "${_doorbell_file}")
    set(doorbell_FOUND FALSE)
    set(doorbell_NOT_FOUND_MESSAGE "missing ${_doorbell_file} (run scripts/install-prefix.sh)")
    return()
  endif()
endforeach()

include(CMakeFindDependencyMacro)
set(THREADS_PREFER_PTHREAD_FLAG ON)
find_dependency(Threads)

if(NOT TARGET doorbell::doorbell)
  add_library(doorbell::doorbell SHARED IMPORTED)
  # Cargo gives a cdylib no SONAME: link it as -ldoorbell so executables
  # record "libdoorbell.so" rather than this absolute path.
  set_target_properties(doorbell::doorbell PROPERTIES
    IMPORTED_LOCATION "${doorbell_LIBRARY}"
    IMPORTED_NO_SONAME TRUE
    INTERFACE_INCLUDE_DIRECTORIES "${doorbell_INCLUDE_DIR}")
endif()

if(NOT TARGET doorbell::doorbell_static)
  add_library(doorbell::doorbell_static STATIC IMPORTED)
  # What `rustc --print native-static-libs` lists for x86_64-unknown-linux-gnu.
  set_target_properties(doorbell::doorbell_static PROPERTIES
    IMPORTED_LOCATION "${doorbell_STATIC_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${doorbell_INCLUDE_DIR}"
    INTERFACE_LINK_LIBRARIES "Threads::Threads;gcc_s;util;rt;m;dl")
endif()

unset(_doorbell_file)
unset(_doorbell_prefix)
