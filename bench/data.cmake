# Data-layer benches (docs/data.md): reader throughput, and the elastic shard audit.
edl_add_bench(reader_bench reader_bench.cc)
edl_add_bench(shard_audit shard_audit.cc shard_audit_processes.cc)
edl_add_bench(shard_audit_worker shard_audit_worker.cc)
