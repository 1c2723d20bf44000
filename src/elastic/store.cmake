# Store backends (owner: store/launcher engineer): embedded TCP store server + client, Redis, connect_store().
target_sources(edl PRIVATE
  ${CMAKE_CURRENT_SOURCE_DIR}/tcp_store_auth.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/tcp_store_frame.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/tcp_store_server.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/tcp_store_connections.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/tcp_store_commands.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/tcp_store_waits.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/tcp_store_dial.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/tcp_store_client.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/redis_store.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/store_factory.cc)
# etcd backend: etcd v3's JSON gateway over cpp-httplib (Debian builds it as a shared library with a
# pkg-config file); base64 from OpenSSL's libcrypto.
pkg_check_modules(CPPHTTPLIB REQUIRED IMPORTED_TARGET GLOBAL cpp-httplib)
find_package(OpenSSL REQUIRED)
target_sources(edl PRIVATE
  ${CMAKE_CURRENT_SOURCE_DIR}/etcd_client.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/etcd_store.cc)
target_link_libraries(edl PRIVATE PkgConfig::CPPHTTPLIB OpenSSL::Crypto)
