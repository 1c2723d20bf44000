# Data-layer benches (docs/data.md): reader throughput, and the elastic shard audit.
edl_add_bench(reader_bench reader_bench.cc)
