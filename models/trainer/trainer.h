// The elastic training program shared by the reference-model binaries (edl-resnet20,
// edl-mobilenetv2): the complete example of how a user program puts EDL together.
//
//   edl::init()                         join the job edl-run started (or a world of 1)
//   DistributedOptimizer                gradient-ready calls from the model's backward pass start
//                                       fused allreduces that overlap the rest of backward
//   data::ShardGenerator                every record of an epoch trained exactly once, elastically
//   elastic::State + elastic::run       model, BN statistics, optimizer and shard progress are
//                                       committed every batch and restored / synced on failures
//   edl::notify_batch_end()             joins and graceful leaves take effect at batch boundaries
//
// Reproducible mode (--deterministic, or EDL_DETERMINISTIC=1): every step trains --micro-batches
// micro-batches of --batch-size records whatever the world size, each as its own backward pass, and
// the optimizer sums them exactly (docs/optim.md, "Reproducible mode"); batch-norm statistics are
// averaged over the micro-batches the same way. The final parameters and statistics are then bitwise
// the same at any world size and after any failures and joins. At the end rank 0 prints
// "CHECKSUM <16 hex digits>" (FNV-1a over the parameters, then the buffers) in every mode, so two
// runs can be compared from outside.
//
// Rank 0 prints one progress line per epoch (records done, images/s, loss, accuracy) and the test
// accuracy; other ranks are quiet unless verbose. With json_path, rank 0 appends one JSON row per
// epoch: {"run","epoch","test_acc","train_loss","train_acc","images_per_s","workers","lr"}; with
// loss_log_path one row per optimizer step (step_log.h: world-mean loss, epoch progress, workers, lr).
//
// Thread-safety: run_training is called once, from main().
#pragma once

#include <cstdint>
#include <string>

namespace edl::trainer {

struct TrainerOptions {
  std::string model = "resnet20";        // resnet20 | mobilenetv2
  std::string dataset = "fashion-mnist";  // fashion-mnist | cifar10 | synthetic
  std::string data_path;                 // fashion-mnist: directory (default Debian's); cifar10: directory of *.bin
  int64_t train_records = 0;             // use the first N training records (0 = all)
  int64_t test_records = 0;              // evaluate on the first N test records (0 = all)
  int epochs = 5;
  int batch = 64;                        // local batch per worker
  double lr = 0.05;                      // learning rate at base_size workers
  int base_size = 1;                     // world size `lr` is tuned for
  std::string lr_schedule = "cosine";    // cosine | step | const (per epoch)
  std::string lr_scaling = "linear";     // linear | sqrt | none
  int warmup_steps = 0;                  // ramp after a resize that raises the LR
  bool momentum_compensation = true;     // Lin et al. 2019 eq. 6
  int compensation_steps = 8;            // T of eq. 6; 0 = the pre-resize buffer scaled by k at once (eq. 5)
  double momentum = 0.9;
  double weight_decay = 5e-4;
  bool nesterov = false;
  int threads = 1;                       // threads inside forward / backward
  int records_per_shard = 1024;
  bool augment = false;                  // CIFAR crop + flip
  std::string checkpoint_dir;            // persist commits (whole-job restart resumes)
  uint64_t seed = 1;
  int eval_every = 1;                    // evaluate every N epochs (and always after the last)
  bool verbose = false;                  // every rank prints
  std::string json_path;                 // per-epoch rows (rank 0)
  std::string loss_log_path;             // per-step rows (rank 0), step_log.h
  std::string run_name = "train";        // "run" field of the JSON rows
  double step_delay_ms = 0;              // sleep per step (demos: slows training so events are visible)
  bool deterministic = false;            // reproducible mode (default: EDL_DETERMINISTIC)
  int micro_batches = 8;                 // reproducible mode: micro-batches of `batch` per step (the global batch)
};

// Parses argv (cxxopts; --help prints usage and returns false with *exit_code = 0; bad flags print
// the problem and return false with *exit_code = 2).
bool parse_flags(int argc, char** argv, const std::string& default_model, TrainerOptions* out, int* exit_code);

// Runs the elastic training job; returns the process exit code.
int run_training(const TrainerOptions& options);

}  // namespace edl::trainer
