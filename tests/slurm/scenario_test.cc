// EDL jobs on a real Slurm cluster of emulated nodes (testing/slurm_scenarios.h, docs/launcher.md
// "Slurm"): each case starts slurmctld, three slurmd in network namespaces, munge and the job's etcd,
// submits examples/slurm/edl-job.sbatch with the synthetic worker and checks what must hold (never
// how fast: the times are slurm_bench's). Root with namespaces, Slurm, munge and etcd: otherwise
// skipped, or failed when EDL_REQUIRE_DEPS=1 (a build without the etcd:// store only warns).
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>

#include "testing/netns.h"
#include "testing/require_dep.h"
#include "testing/slurm_scenarios.h"

namespace {

bool ready() {
  std::string why = edl::testing::slurm_scenarios_unavailable();
  if (why.find("etcd:// store") != std::string::npos) {
    WARN("skipped: " << why);
    return false;
  }
  return edl::testing::require_dep("Slurm on emulated nodes", why.empty(), why);
}

edl::testing::SlurmScenarioResult run(const std::string& scenario) {
  edl::testing::SlurmScenarioOptions o;
  o.edl_run = EDL_RUN_PATH;
  o.worker = EDL_ELASTIC_WORKER_PATH;
  o.scripts = EDL_SLURM_SCRIPTS;
  o.keep_dir = std::getenv("EDL_KEEP_SLURM_LOGS") != nullptr;
  edl::testing::SlurmScenarioResult r = edl::testing::run_slurm_scenario(scenario, o);
  INFO(scenario << ": " << r.detail);
  CHECK(edl::testing::NetnsCluster::count_own() == 0);  // the harness removed its nodes
  CHECK(r.lost_steps == 0);
  CHECK(r.split_brain_steps == 0);
  CHECK(r.ok);
  return r;
}

}  // namespace

TEST_CASE("a 3-node allocation trains to the end of its data", "[slurm]") {
  if (!ready()) return;
  auto r = run("train");
  CHECK(r.final_size == 3);
}

TEST_CASE("a lost node does not end the allocation, the others train on in place", "[slurm][loss]") {
  if (!ready()) return;
  auto r = run("node_loss");
  CHECK(r.final_size == 2);
  CHECK(r.loss_to_step_ms > 0);
}

TEST_CASE("a second allocation with the same job id and store joins, the job scales up", "[slurm][join]") {
  if (!ready()) return;
  auto r = run("scale_up");
  CHECK(r.final_size == 3);
  CHECK(r.alloc_to_step_ms > 0);
}

TEST_CASE("scancel --signal=TERM of one node's step, its workers leave gracefully", "[slurm][leave]") {
  if (!ready()) return;
  auto r = run("leave");
  CHECK(r.final_size == 2);
}

TEST_CASE("a serving job preempts a training allocation, its workers leave gracefully", "[slurm][preempt]") {
  if (!ready()) return;
  auto r = run("preempt");
  CHECK(r.final_size == 2);
}

TEST_CASE("a drained node's workers leave gracefully and come back after the resume", "[slurm][drain]") {
  if (!ready()) return;
  auto r = run("drain");
  CHECK(r.final_size == 3);
}
