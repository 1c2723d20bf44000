# Store backend benchmark: memory, the embedded TCP store, a private redis-server (Redis fixture) and a
# private 3-member etcd cluster (the real-server fixtures of testing/).
edl_add_bench(store_bench store_bench.cc store_leases.cc)
target_link_libraries(store_bench PRIVATE edl_server_fixtures)
