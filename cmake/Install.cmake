# Install.cmake — what `cmake --install <build> [--prefix P]` puts where (included by
# CMakeLists.txt). Under the default prefix /usr/local a stock lua5.4 finds the Lua module
# without any setting: share/lua/5.4 and lib/lua/5.4 are on its default search paths.
#   bin/tcl                          the program
#   lib/libtclc.a, lib/libtclc.so*   the library (static; shared with its soname links)
#   include/tclc.h                   the embedding API
#   share/lua/5.4/...                the Lua files (the source tree's lua/, with the viewer's
#                                    .js and .css files), and in
#                                    tcl/export/runtime/ the exported runtime's C files
#   lib/lua/5.4/tcl.so               the Lua C module, for `require "tcl"` from lua5.4
#   lib/pkgconfig/tclc.pc            pkg-config name "tclc"
#   lib/cmake/tclc/                  CMake package "tclc": find_package(tclc) gives the imported
#                                    targets tclc::tclc (static) and tclc::tclc_shared
# The installed `tcl` finds its Lua files at <exe dir>/../share/lua/5.4 (src/api/lua_dir.c),
# so the tree can be moved or installed under any prefix.
# With TCLC_LUA_MODULE_ONLY (the rockspec) only the Lua files and tcl.so are installed, into
# TCLC_LUA_INSTALL_DIR and TCLC_CMOD_INSTALL_DIR (LuaRocks' LUADIR and LIBDIR).

# The whole lua/ tree, as the build tree uses it (src/api puts lua/ on package.path), so
# every require that works there works installed: lua/tcl/init.lua becomes
# share/lua/5.4/tcl/init.lua. share/lua/5.4 is a namespace shared with other Lua libraries,
# which is why tcl's own modules belong under lua/tcl/.
# The viewer's script and style (lua/tcl/viz/viewer.js, viewer.css) go with them: tcl.viz.page
# reads them from beside itself to inline them into the page.
install(DIRECTORY ${CMAKE_SOURCE_DIR}/lua/ DESTINATION ${TCLC_LUA_INSTALL_DIR}
        FILES_MATCHING PATTERN "*.lua" PATTERN "*.js" PATTERN "*.css")

# The exported runtime's C files (src/export_runtime/), which `tcl export` copies beside a
# model's generated NAME.c: tcl.export.runtime_files looks for them beside itself, in
# <Lua dir>/tcl/export/runtime (the source tree's tcl finds them in src/export_runtime/).
install(DIRECTORY ${CMAKE_SOURCE_DIR}/src/export_runtime/ DESTINATION ${TCLC_LUA_INSTALL_DIR}/tcl/export/runtime
        FILES_MATCHING PATTERN "tcl_*.[ch]")

install(TARGETS tcl_lua_module LIBRARY DESTINATION ${TCLC_CMOD_INSTALL_DIR})

if(TCLC_LUA_MODULE_ONLY)
  return() # nothing else is built
endif()

install(TARGETS tcl RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS tclc_static EXPORT tclcTargets ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
# libtclc.so.0.1.0 plus the soname link libtclc.so.0 and the development link libtclc.so
install(TARGETS tclc_shared EXPORT tclcTargets LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(FILES ${CMAKE_SOURCE_DIR}/include/tclc.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

# pkg-config file. Its prefix is computed from where the file lies (${pcfiledir}), so it
# stays right when the install prefix is chosen at install time (`--prefix`), not configure
# time. TCLC_PC_PREFIX climbs from <libdir>/pkgconfig back to the prefix.
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  set(TCLC_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
  set(TCLC_PC_LIBDIR "${CMAKE_INSTALL_LIBDIR}")
else()
  string(REGEX REPLACE "[^/]+" ".." _tclc_up "${CMAKE_INSTALL_LIBDIR}")
  string(REGEX REPLACE "/+$" "" _tclc_up "${_tclc_up}")
  set(TCLC_PC_PREFIX "\${pcfiledir}/../${_tclc_up}")
  set(TCLC_PC_LIBDIR "\${prefix}/${CMAKE_INSTALL_LIBDIR}")
endif()
if(IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  set(TCLC_PC_INCLUDEDIR "${CMAKE_INSTALL_INCLUDEDIR}")
else()
  set(TCLC_PC_INCLUDEDIR "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
endif()
# The static library's users link what it links: LLVM's shared library, libffi, threads.
get_filename_component(TCLC_PC_LLVM_DIR "${LLVM_LIBRARY}" DIRECTORY)
get_filename_component(TCLC_PC_LLVM_NAME "${LLVM_LIBRARY}" NAME_WE)
string(REGEX REPLACE "^lib" "" TCLC_PC_LLVM_NAME "${TCLC_PC_LLVM_NAME}")
configure_file(${CMAKE_SOURCE_DIR}/cmake/tclc.pc.in ${CMAKE_BINARY_DIR}/tclc.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/tclc.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# CMake package "tclc" in <libdir>/cmake/tclc, where find_package(tclc) looks under a prefix
# on CMAKE_PREFIX_PATH (or the default /usr/local):
#   tclcConfig.cmake         finds the dependencies, then loads tclcTargets.cmake
#   tclcConfigVersion.cmake  0.x: only the same minor version is compatible
#   tclcTargets*.cmake       tclc::tclc (libtclc.a with its link dependencies) and
#                            tclc::tclc_shared (libtclc.so), each with include/ and Lua's headers
# Every path in them is computed from where the files lie, so the prefix can be chosen at
# install time and moved. Threads and zlib are found again on the user's side; Lua, xxHash,
# LLVM and libffi are linked by the paths found here (Debian system paths), which the config
# checks, naming the packages to install when one is missing.
include(CMakePackageConfigHelpers)
set(TCLC_CMAKE_INSTALL_DIR "${CMAKE_INSTALL_LIBDIR}/cmake/tclc")
install(EXPORT tclcTargets NAMESPACE tclc:: DESTINATION ${TCLC_CMAKE_INSTALL_DIR})
set(TCLC_CONFIG_LIBRARIES ${LUA_LINK_LIBRARIES} ${XXHASH_LIBRARY} ${LLVM_LIBRARY} ${FFI_LIBRARY})
configure_package_config_file(${CMAKE_SOURCE_DIR}/cmake/tclcConfig.cmake.in
  ${CMAKE_BINARY_DIR}/tclcConfig.cmake INSTALL_DESTINATION ${TCLC_CMAKE_INSTALL_DIR})
write_basic_package_version_file(${CMAKE_BINARY_DIR}/tclcConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/tclcConfig.cmake ${CMAKE_BINARY_DIR}/tclcConfigVersion.cmake
  DESTINATION ${TCLC_CMAKE_INSTALL_DIR})
