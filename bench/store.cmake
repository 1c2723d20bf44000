# Store backend benchmark (owner: store/launcher engineer).
edl_add_bench(store_bench store_bench.cc ${PROJECT_SOURCE_DIR}/tests/store/redis_server.cc
  ${PROJECT_SOURCE_DIR}/tests/store/etcd_cluster.cc)
target_include_directories(store_bench PRIVATE ${PROJECT_SOURCE_DIR}/tests)
target_link_libraries(store_bench PRIVATE PkgConfig::HIREDIS PkgConfig::CPPHTTPLIB nlohmann_json::nlohmann_json)
