// edl-resnet20: elastic data-parallel training of resnet20 (see models/trainer/trainer.h for the whole program).
//   edl-run -np 2 build/models/resnet20/edl-resnet20 --epochs 1 --train-records 10000
#include <cstdio>

#include <edl/error.h>

#include "trainer.h"

int main(int argc, char** argv) {
  edl::trainer::TrainerOptions options;
  int code = 0;
  if (!edl::trainer::parse_flags(argc, argv, "resnet20", &options, &code)) return code;
  try {
    return edl::trainer::run_training(options);
  } catch (const edl::Error& e) {
    std::fprintf(stderr, "edl-resnet20: %s\n", e.what());
    return 1;
  }
}
