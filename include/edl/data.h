// EDL data layer, the umbrella header: dataset readers, batch assembly + prefetching, and the elastic
// shard dispatcher (exactly-once records per epoch). See docs/data.md.
#pragma once

#include "edl/data/batch.h"
#include "edl/data/dataset.h"
#include "edl/data/loader.h"
#include "edl/data/shards.h"
