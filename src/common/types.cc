#include "common/float16.h"
#include "edl/error.h"
#include "edl/types.h"

namespace edl {

size_t dtype_size(DataType t) {
  switch (t) {
    case DataType::kFloat32: return 4;
    case DataType::kFloat64: return 8;
    case DataType::kInt32: return 4;
    case DataType::kInt64: return 8;
    case DataType::kFloat16: return 2;
    case DataType::kBFloat16: return 2;
    case DataType::kUInt8: return 1;
  }
  throw InvalidArgument("unknown DataType value " + std::to_string(static_cast<int>(t)));
}

const char* dtype_name(DataType t) {
  switch (t) {
    case DataType::kFloat32: return "float32";
    case DataType::kFloat64: return "float64";
    case DataType::kInt32: return "int32";
    case DataType::kInt64: return "int64";
    case DataType::kFloat16: return "float16";
    case DataType::kBFloat16: return "bfloat16";
    case DataType::kUInt8: return "uint8";
  }
  return "unknown";
}

const char* op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kAverage: return "average";
    case ReduceOp::kMin: return "min";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kProduct: return "product";
  }
  return "unknown";
}

// The conversions themselves are common/float16.h's: one copy for the host and the GPU kernels.
float half_to_float(uint16_t h) { return float16::half_to_float(h); }

uint16_t float_to_half(float f) { return float16::float_to_half(f); }

}  // namespace edl
