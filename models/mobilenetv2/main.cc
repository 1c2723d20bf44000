// edl-mobilenetv2: elastic data-parallel training of mobilenetv2 (see models/trainer/trainer.h for the whole program).
//   edl-run -np 2 build/models/mobilenetv2/edl-mobilenetv2 --epochs 1 --train-records 10000
#include <cstdio>

#include <edl/error.h>

#include "trainer.h"

int main(int argc, char** argv) {
  edl::trainer::TrainerOptions options;
  int code = 0;
  if (!edl::trainer::parse_flags(argc, argv, "mobilenetv2", &options, &code)) return code;
  try {
    return edl::trainer::run_training(options);
  } catch (const edl::Error& e) {
    std::fprintf(stderr, "edl-mobilenetv2: %s\n", e.what());
    return 1;
  }
}
