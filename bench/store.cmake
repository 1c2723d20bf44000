# Store backend benchmark: memory, the embedded TCP store, a private redis-server (Redis fixture) and a
# private 3-member etcd cluster (etcd fixture).
edl_add_bench(store_bench store_bench.cc ${PROJECT_SOURCE_DIR}/tests/store/etcd_cluster.cc)
target_link_libraries(store_bench PRIVATE edl_redis_fixture PkgConfig::CPPHTTPLIB nlohmann_json::nlohmann_json)
