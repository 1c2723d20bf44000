# Store backend benchmark: memory, the embedded TCP store and a private redis-server (Redis fixture).
edl_add_bench(store_bench store_bench.cc)
target_link_libraries(store_bench PRIVATE edl_redis_fixture)
