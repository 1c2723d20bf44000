# edl-run, the launcher (owner: store/launcher engineer). Links libedl for StoreServer / connect_store;
# compiles src/common/config.cc (Config::from_env, EDL_JOB_SECRET), host_port.cc (errno_text) and
# spawn.cc (fork_exec) in, since libedl does not export them.
add_executable(edl-run
  ${CMAKE_CURRENT_SOURCE_DIR}/launcher/main.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/launcher/options.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/launcher/process.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/launcher/output.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/launcher/binding.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/launcher/supervisor.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/launcher/static_mode.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/launcher/elastic_mode.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/launcher/elastic_policy.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/launcher/elastic_observe.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/launcher/autoscaler.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/launcher/discovery.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/launcher/store_watcher.cc
  ${PROJECT_SOURCE_DIR}/src/common/config.cc
  ${PROJECT_SOURCE_DIR}/src/common/host_port.cc
  ${PROJECT_SOURCE_DIR}/src/common/spawn.cc)
target_include_directories(edl-run PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_compile_options(edl-run PRIVATE ${EDL_COMPILE_OPTIONS})
target_link_libraries(edl-run PRIVATE edl cxxopts::cxxopts Threads::Threads)
set_target_properties(edl-run PROPERTIES INSTALL_RPATH "$ORIGIN/../${CMAKE_INSTALL_LIBDIR}")
install(TARGETS edl-run RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

# Worker side of the edl-run contract (liveness pipe, SIGTERM = leave): part of libedl, called by api.cc.
target_sources(edl PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/launcher_link.cc)
