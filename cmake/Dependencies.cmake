# Dependencies.cmake — finds the Debian packages tcl builds with and stops with the
# name of the package to install when one is missing (scripts/setup.sh installs them all).
find_package(PkgConfig)

function(tclc_missing what package)
  message(FATAL_ERROR "tcl: ${what} not found. Install it with:  apt-get install ${package}\n"
                      "(or run scripts/setup.sh, which installs every dependency)")
endfunction()

# Lua 5.4. The Lua module alone (TCLC_LUA_MODULE_ONLY) needs only the headers: the interpreter
# that loads it provides Lua. LuaRocks passes the headers of the Lua it installs for (LUA_INCDIR).
if(TCLC_LUA_MODULE_ONLY AND LUA_INCDIR)
  if(NOT EXISTS "${LUA_INCDIR}/lua.h")
    message(FATAL_ERROR "tcl: no lua.h in LUA_INCDIR (${LUA_INCDIR})")
  endif()
  set(LUA_INCLUDE_DIRS "${LUA_INCDIR}")
  set(LUA_FOUND TRUE)
elseif(PKG_CONFIG_FOUND)
  pkg_check_modules(LUA QUIET lua5.4)
endif()
if(NOT LUA_FOUND)
  find_path(LUA_INCLUDE_DIRS lua.h PATH_SUFFIXES lua5.4)
  find_library(LUA_LINK_LIBRARIES NAMES lua5.4)
  if(NOT LUA_INCLUDE_DIRS OR NOT LUA_LINK_LIBRARIES)
    tclc_missing("Lua 5.4 headers and library" "liblua5.4-dev")
  endif()
endif()

find_path(XXHASH_INCLUDE_DIR xxhash.h)
find_library(XXHASH_LIBRARY NAMES xxhash)
if(NOT XXHASH_INCLUDE_DIR OR NOT XXHASH_LIBRARY)
  tclc_missing("xxHash" "libxxhash-dev")
endif()

find_path(FFI_INCLUDE_DIR ffi.h PATH_SUFFIXES x86_64-linux-gnu aarch64-linux-gnu)
find_library(FFI_LIBRARY NAMES ffi)
if(NOT FFI_INCLUDE_DIR OR NOT FFI_LIBRARY)
  tclc_missing("libffi" "libffi-dev")
endif()

# zlib: reading gzip-compressed data sets (src/runtime/io/gzip_file.c).
find_package(ZLIB QUIET)
if(NOT ZLIB_FOUND)
  tclc_missing("zlib (headers and library)" "zlib1g-dev")
endif()

# LLVM's C API: the newest llvm-config wins; 15 is the oldest supported (ORC LLJIT and
# LLVMRunPasses with the new pass manager). tcl links LLVM's one shared library.
find_program(TCLC_LLVM_CONFIG NAMES llvm-config-19 llvm-config-18 llvm-config-17 llvm-config-16 llvm-config-15
                               llvm-config)
if(NOT TCLC_LLVM_CONFIG)
  tclc_missing("LLVM (llvm-config)" "llvm-19-dev")
endif()
execute_process(COMMAND ${TCLC_LLVM_CONFIG} --version OUTPUT_VARIABLE LLVM_VERSION OUTPUT_STRIP_TRAILING_WHITESPACE)
if(LLVM_VERSION VERSION_LESS 15)
  message(FATAL_ERROR "tcl: LLVM ${LLVM_VERSION} is too old (15 or newer).  apt-get install llvm-19-dev")
endif()
execute_process(COMMAND ${TCLC_LLVM_CONFIG} --includedir OUTPUT_VARIABLE LLVM_INCLUDE_DIR OUTPUT_STRIP_TRAILING_WHITESPACE)
execute_process(COMMAND ${TCLC_LLVM_CONFIG} --libdir OUTPUT_VARIABLE LLVM_LIBRARY_DIR OUTPUT_STRIP_TRAILING_WHITESPACE)
string(REGEX MATCH "^[0-9]+" LLVM_VERSION_MAJOR "${LLVM_VERSION}")
find_library(LLVM_LIBRARY NAMES LLVM-${LLVM_VERSION_MAJOR} LLVM PATHS ${LLVM_LIBRARY_DIR} NO_DEFAULT_PATH)
if(NOT LLVM_LIBRARY)
  tclc_missing("LLVM's shared library (libLLVM-${LLVM_VERSION_MAJOR}.so)" "llvm-${LLVM_VERSION_MAJOR}-dev")
endif()
message(STATUS "tcl: LLVM ${LLVM_VERSION} (${TCLC_LLVM_CONFIG}, ${LLVM_LIBRARY})")

find_package(Threads REQUIRED)

# readline: line editing at the `tcl` program's prompt (not built with TCLC_LUA_MODULE_ONLY).
if(NOT TCLC_LUA_MODULE_ONLY)
  find_library(READLINE_LIBRARY NAMES readline)
  if(NOT READLINE_LIBRARY)
    message(STATUS "tcl: readline not found; the interactive prompt has no line editing (apt-get install libreadline-dev)")
    set(READLINE_LIBRARY "")
  endif()
endif()

# Open MPI's mpi.h (optional): tcl.distributed's MPI backend (src/runtime/mpi) is compiled
# against it and loads libmpi at run time, so nothing links MPI. Without it the module says
# how to get it. Debian puts it under the library directory.
find_path(TCLC_MPI_INCLUDE_DIR mpi.h
  PATHS /usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}/openmpi/include /usr/include/${CMAKE_LIBRARY_ARCHITECTURE}/openmpi
        /usr/lib/openmpi/include /usr/include/openmpi
  NO_DEFAULT_PATH)
if(TCLC_MPI_INCLUDE_DIR)
  file(STRINGS "${TCLC_MPI_INCLUDE_DIR}/mpi.h" TCLC_MPI_IS_OPEN_MPI REGEX "define OMPI_MAJOR_VERSION")
endif()
if(TCLC_MPI_INCLUDE_DIR AND TCLC_MPI_IS_OPEN_MPI)
  message(STATUS "tcl: Open MPI headers in ${TCLC_MPI_INCLUDE_DIR} (tcl.distributed over MPI)")
else()
  set(TCLC_MPI_INCLUDE_DIR "")
  message(STATUS "tcl: Open MPI's mpi.h not found; tcl.distributed has no MPI backend (apt-get install libopenmpi-dev)")
endif()
