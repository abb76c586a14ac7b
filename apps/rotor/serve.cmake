# rotor serve: the HTTP server as a library (the rotor binary and tests/server
# link it). Debian's cpp-httplib is a compiled library whose header must see the
# feature macros it was built with: pkg-config knows them; without pkg-config,
# those of Debian's build (OpenSSL, zlib, brotli; their -dev packages are
# dependencies of libcpp-httplib-dev).
find_package(PkgConfig QUIET)
if(PKG_CONFIG_FOUND)
  pkg_check_modules(HTTPLIB QUIET IMPORTED_TARGET GLOBAL cpp-httplib)
endif()
if(TARGET PkgConfig::HTTPLIB)
  set(ROTOR_HTTPLIB PkgConfig::HTTPLIB)
else()
  find_path(HTTPLIB_INCLUDE_DIR httplib.h REQUIRED)
  find_library(HTTPLIB_LIBRARY cpp-httplib REQUIRED)
  add_library(rotor_httplib INTERFACE)
  target_include_directories(rotor_httplib INTERFACE ${HTTPLIB_INCLUDE_DIR})
  target_compile_definitions(rotor_httplib INTERFACE CPPHTTPLIB_OPENSSL_SUPPORT
    CPPHTTPLIB_ZLIB_SUPPORT CPPHTTPLIB_BROTLI_SUPPORT)
  target_link_libraries(rotor_httplib INTERFACE ${HTTPLIB_LIBRARY})
  set(ROTOR_HTTPLIB rotor_httplib)
endif()

add_library(rotor_serve STATIC serve_api.cc serve_batcher.cc serve_metrics.cc serve_server.cc serve_slots.cc
  serve_socket.cc kv_args.cc)
target_include_directories(rotor_serve PUBLIC ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(rotor_serve PUBLIC rotor_engine nlohmann_json::nlohmann_json
  ${ROTOR_HTTPLIB} Threads::Threads rotor_web)
target_sources(rotor PRIVATE cmd_serve.cc)
target_link_libraries(rotor PRIVATE rotor_serve)
