# librotor and its installation: the C API (include/rotor/rotor.h) with every
# module it needs, as a shared library (librotor.so, only rotor_* symbols
# exported) and a static one (librotor.a, every module's objects in one
# archive); `make install PREFIX=...` installs them with the header, a
# pkg-config file (rotor.pc), a CMake package (find_package(rotor)), the
# `rotor` binary and the bundled model under share/rotor/.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(ROTOR_VERSION ${PROJECT_VERSION})
set(ROTOR_SOVERSION 0)
# The modules in librotor, in link order (capi first).
set(ROTOR_LIB_MODULES capi engine model attention kv sampling grammar tokenizer gguf ops tensor base)
set(ROTOR_CAPI_SOURCES src/capi/capi_model.cc src/capi/capi_context.cc src/capi/capi_generate.cc)
list(TRANSFORM ROTOR_CAPI_SOURCES PREPEND ${PROJECT_SOURCE_DIR}/)

add_library(rotor_shared SHARED ${ROTOR_CAPI_SOURCES})
target_include_directories(rotor_shared PRIVATE ${PROJECT_SOURCE_DIR}/src
                                       PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>)
target_link_libraries(rotor_shared PRIVATE rotor_engine fmt::fmt Threads::Threads)
target_link_options(rotor_shared PRIVATE -Wl,--version-script=${PROJECT_SOURCE_DIR}/cmake/rotor.map)
# Every symbol resolved at link time, but under sanitizers: clang leaves their
# runtime to the executable that loads the library.
if(NOT ROTOR_SANITIZED)
  target_link_options(rotor_shared PRIVATE -Wl,--no-undefined)
endif()
rotor_sanitized_o0(rotor_shared)  # as rotor_capi (ROTOR_SANITIZED_O0_MODULES)
set_target_properties(rotor_shared PROPERTIES
  OUTPUT_NAME rotor VERSION ${ROTOR_VERSION} SOVERSION ${ROTOR_SOVERSION}
  LIBRARY_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/lib
  LINK_DEPENDS ${PROJECT_SOURCE_DIR}/cmake/rotor.map)

set(rotor_objects "")
foreach(m ${ROTOR_LIB_MODULES})
  list(APPEND rotor_objects $<TARGET_OBJECTS:rotor_${m}>)
endforeach()
add_library(rotor_static STATIC ${rotor_objects})
set_target_properties(rotor_static PROPERTIES OUTPUT_NAME rotor LINKER_LANGUAGE CXX
  ARCHIVE_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/lib)

# pkg-config and CMake package files.
# rotor.pc finds the prefix from its own place (relocatable: install --prefix).
file(RELATIVE_PATH PC_PREFIX_FROM_PCDIR /p/${CMAKE_INSTALL_LIBDIR}/pkgconfig /p)
set(PC_LIBDIR "${CMAKE_INSTALL_LIBDIR}")
set(PC_INCLUDEDIR "${CMAKE_INSTALL_INCLUDEDIR}")
configure_file(${PROJECT_SOURCE_DIR}/cmake/rotor.pc.in ${PROJECT_BINARY_DIR}/rotor.pc @ONLY)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/rotorConfig.cmake.in
  ${PROJECT_BINARY_DIR}/rotorConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/rotor
  PATH_VARS CMAKE_INSTALL_INCLUDEDIR CMAKE_INSTALL_LIBDIR)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/rotorConfigVersion.cmake
  VERSION ${ROTOR_VERSION} COMPATIBILITY SameMinorVersion)

install(TARGETS rotor_shared rotor_static
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(FILES ${PROJECT_SOURCE_DIR}/include/rotor/rotor.h
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/rotor)
install(FILES ${PROJECT_BINARY_DIR}/rotor.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
install(FILES ${PROJECT_BINARY_DIR}/rotorConfig.cmake ${PROJECT_BINARY_DIR}/rotorConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/rotor)
if(TARGET rotor)
  install(TARGETS rotor RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()
install(FILES ${PROJECT_SOURCE_DIR}/models/stories260K.gguf
              ${PROJECT_SOURCE_DIR}/models/ggml-vocab-llama-spm.gguf
  DESTINATION ${CMAKE_INSTALL_DATADIR}/rotor/models)
