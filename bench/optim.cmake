# optimizer_bench: overlap of the DistributedOptimizer's bucketed allreduce with backward (bench/optimizer_bench.cc).
edl_add_bench(optimizer_bench optimizer_bench.cc)
