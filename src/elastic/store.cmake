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
