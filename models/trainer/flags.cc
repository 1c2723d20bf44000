#include <cxxopts.hpp>
#include <iostream>

#include <edl/edl.h>

#include "trainer.h"

namespace edl::trainer {

bool parse_flags(int argc, char** argv, const std::string& default_model, TrainerOptions* o, int* exit_code) {
  cxxopts::Options opts(argv[0], "Elastic data-parallel training of an EDL reference model. Launch N copies with\n"
                                 "  edl-run -np N " + std::string(argv[0]) + " [flags]   (or elastic: --min-np/--max-np)\n");
  TrainerOptions d;
  d.model = default_model;
  // clang-format off
  opts.add_options()
    ("model", "resnet20 | mobilenetv2", cxxopts::value<std::string>()->default_value(d.model))
    ("dataset", "fashion-mnist | cifar10 | synthetic", cxxopts::value<std::string>()->default_value(d.dataset))
    ("data-path", "dataset directory (fashion-mnist default: /usr/share/datasets/fashion-mnist)", cxxopts::value<std::string>()->default_value(""))
    ("train-records", "train on the first N records (0 = all)", cxxopts::value<int64_t>()->default_value("0"))
    ("test-records", "evaluate on the first N test records (0 = all)", cxxopts::value<int64_t>()->default_value("0"))
    ("epochs", "epochs", cxxopts::value<int>()->default_value(std::to_string(d.epochs)))
    ("batch-size", "local batch per worker", cxxopts::value<int>()->default_value(std::to_string(d.batch)))
    ("lr", "learning rate at --base-size workers", cxxopts::value<double>()->default_value("0.05"))
    ("base-size", "world size --lr is tuned for", cxxopts::value<int>()->default_value("1"))
    ("lr-schedule", "cosine | step | const (per epoch)", cxxopts::value<std::string>()->default_value(d.lr_schedule))
    ("lr-scaling", "linear | sqrt | none: how the LR follows the world size", cxxopts::value<std::string>()->default_value(d.lr_scaling))
    ("warmup-steps", "LR ramp after a resize that raises it", cxxopts::value<int>()->default_value("0"))
    ("momentum-compensation", "scale momentum on resize (Lin et al. 2019)", cxxopts::value<bool>()->default_value("true"))
    ("compensation-steps", "T of the momentum compensation ramp (eq. 6); 0 = scale the momentum buffer by k at once (eq. 5, what u-form SGD such as PyTorch's does when its LR changes)", cxxopts::value<int>()->default_value("8"))
    ("momentum", "SGD momentum", cxxopts::value<double>()->default_value("0.9"))
    ("weight-decay", "L2 weight decay", cxxopts::value<double>()->default_value("0.0005"))
    ("nesterov", "Nesterov momentum", cxxopts::value<bool>()->default_value("false"))
    ("threads", "threads inside forward/backward", cxxopts::value<int>()->default_value("1"))
    ("records-per-shard", "records per data shard", cxxopts::value<int>()->default_value(std::to_string(d.records_per_shard)))
    ("augment", "CIFAR random crop + flip", cxxopts::value<bool>()->default_value("false"))
    ("checkpoint-dir", "persist commits here (whole-job restart resumes)", cxxopts::value<std::string>()->default_value(""))
    ("seed", "initialisation and shuffle seed", cxxopts::value<uint64_t>()->default_value("1"))
    ("eval-interval", "evaluate every N epochs", cxxopts::value<int>()->default_value("1"))
    ("verbose", "every rank prints", cxxopts::value<bool>()->default_value("false"))
    ("json", "append one JSON row per epoch to PATH (rank 0)", cxxopts::value<std::string>()->default_value(""))
    ("loss-log", "append one JSON row per optimizer step to PATH (rank 0): run, step, epoch_progress, loss (the "
                 "world's mean loss of the step), workers, lr, momentum_gamma", cxxopts::value<std::string>()->default_value(""))
    ("run-name", "\"run\" field of the JSON rows", cxxopts::value<std::string>()->default_value("train"))
    ("step-delay-ms", "sleep per step (demos)", cxxopts::value<double>()->default_value("0"))
    ("deterministic", "reproducible mode: fixed micro-batches summed exactly, bitwise the same result at any world size "
                      "and after failures (default: EDL_DETERMINISTIC)", cxxopts::value<bool>()->default_value(edl::deterministic() ? "true" : "false"))
    ("micro-batches", "reproducible mode: micro-batches of --batch-size records per step, over all workers",
                      cxxopts::value<int>()->default_value(std::to_string(d.micro_batches)))
    ("h,help", "print this help");
  // clang-format on
  try {
    auto r = opts.parse(argc, argv);
    if (r.count("help")) {
      std::cout << opts.help() << std::endl;
      *exit_code = 0;
      return false;
    }
    if (!r.unmatched().empty()) throw cxxopts::exceptions::exception("unexpected argument '" + r.unmatched()[0] + "'");
    o->model = r["model"].as<std::string>();
    o->dataset = r["dataset"].as<std::string>();
    o->data_path = r["data-path"].as<std::string>();
    o->train_records = r["train-records"].as<int64_t>();
    o->test_records = r["test-records"].as<int64_t>();
    o->epochs = r["epochs"].as<int>();
    o->batch = r["batch-size"].as<int>();
    o->lr = r["lr"].as<double>();
    o->base_size = r["base-size"].as<int>();
    o->lr_schedule = r["lr-schedule"].as<std::string>();
    o->lr_scaling = r["lr-scaling"].as<std::string>();
    o->warmup_steps = r["warmup-steps"].as<int>();
    o->momentum_compensation = r["momentum-compensation"].as<bool>();
    o->compensation_steps = r["compensation-steps"].as<int>();
    o->momentum = r["momentum"].as<double>();
    o->weight_decay = r["weight-decay"].as<double>();
    o->nesterov = r["nesterov"].as<bool>();
    o->threads = r["threads"].as<int>();
    o->records_per_shard = r["records-per-shard"].as<int>();
    o->augment = r["augment"].as<bool>();
    o->checkpoint_dir = r["checkpoint-dir"].as<std::string>();
    o->seed = r["seed"].as<uint64_t>();
    o->eval_every = r["eval-interval"].as<int>();
    o->verbose = r["verbose"].as<bool>();
    o->json_path = r["json"].as<std::string>();
    o->loss_log_path = r["loss-log"].as<std::string>();
    o->run_name = r["run-name"].as<std::string>();
    o->step_delay_ms = r["step-delay-ms"].as<double>();
    o->deterministic = r["deterministic"].as<bool>();
    o->micro_batches = r["micro-batches"].as<int>();
  } catch (const cxxopts::exceptions::exception& e) {
    std::cerr << argv[0] << ": " << e.what() << "\n(run with --help for usage)" << std::endl;
    *exit_code = 2;
    return false;
  }
  std::string bad;
  if (o->model != "resnet20" && o->model != "mobilenetv2") bad = "--model must be resnet20 or mobilenetv2, got '" + o->model + "'";
  else if (o->dataset != "fashion-mnist" && o->dataset != "cifar10" && o->dataset != "synthetic")
    bad = "--dataset must be fashion-mnist, cifar10 or synthetic, got '" + o->dataset + "'";
  else if (o->epochs < 1) bad = "--epochs must be >= 1";
  else if (o->batch < 1) bad = "--batch-size must be >= 1";
  else if (!(o->lr > 0)) bad = "--lr must be > 0";
  else if (o->base_size < 1) bad = "--base-size must be >= 1";
  else if (o->compensation_steps < 0) bad = "--compensation-steps must be >= 0";
  else if (o->lr_schedule != "cosine" && o->lr_schedule != "step" && o->lr_schedule != "const")
    bad = "--lr-schedule must be cosine, step or const";
  else if (o->lr_scaling != "linear" && o->lr_scaling != "sqrt" && o->lr_scaling != "none")
    bad = "--lr-scaling must be linear, sqrt or none";
  else if (o->threads < 1) bad = "--threads must be >= 1";
  else if (o->records_per_shard < 1) bad = "--records-per-shard must be >= 1";
  else if (o->train_records < 0 || o->test_records < 0) bad = "--train-records / --test-records must be >= 0";
  else if (o->eval_every < 1) bad = "--eval-interval must be >= 1";
  else if (o->warmup_steps < 0) bad = "--warmup-steps must be >= 0";
  else if (o->micro_batches < 1) bad = "--micro-batches must be >= 1";
  if (!bad.empty()) {
    std::cerr << argv[0] << ": " << bad << "\n(run with --help for usage)" << std::endl;
    *exit_code = 2;
    return false;
  }
  return true;
}

}  // namespace edl::trainer
