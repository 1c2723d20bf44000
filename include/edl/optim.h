// The distributed optimizer and the rescaling hooks (docs/optim.md).
//   edl/optim/rescale.h    edl::optim: LR / warmup / momentum-compensation / batch policies, Rescaler
//   edl/optim/optimizer.h  edl::DistributedOptimizer: bucketed, overlapped gradient allreduce + SGD/Adam/AdamW
#pragma once

#include "edl/optim/optimizer.h"
#include "edl/optim/rescale.h"
