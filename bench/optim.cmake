# optimizer_bench: overlap of the DistributedOptimizer's bucketed allreduce with backward, on loopback
# and on emulated cluster links (testing/netns, in edl_testing). Workload, ranks and the processes driver are separate files.
edl_add_bench(optimizer_bench optimizer_bench.cc optimizer_workload.cc optimizer_rank.cc optimizer_processes.cc)
