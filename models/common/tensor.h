// Tensor: an owning, 64-byte-aligned float32 buffer with an NHWC shape (batch, height, width, channels).
//
// Every activation in the reference models is NHWC: channels are contiguous, so 1x1 convolutions are
// plain GEMMs over (N*H*W) x C, and per-channel work (batch norm, depthwise conv, bias) vectorises
// along C. Matrices (linear layers, logits) use h = w = 1.
//
// Thread-safety: a Tensor is a plain value; concurrent writers must touch disjoint ranges.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>

namespace edl::models {

struct Shape {
  int n = 0, h = 0, w = 0, c = 0;
  size_t size() const { return static_cast<size_t>(n) * h * w * c; }
  size_t image_size() const { return static_cast<size_t>(h) * w * c; }
  bool operator==(const Shape& o) const { return n == o.n && h == o.h && w == o.w && c == o.c; }
  bool operator!=(const Shape& o) const { return !(*this == o); }
};

// Aligned float storage that only grows; resize() keeps no contents.
class FloatBuffer {
 public:
  FloatBuffer() = default;
  explicit FloatBuffer(size_t count) { resize(count); }
  FloatBuffer(FloatBuffer&&) noexcept = default;
  FloatBuffer& operator=(FloatBuffer&&) noexcept = default;

  void resize(size_t count) {
    if (count > capacity_) {
      size_t bytes = ((count * sizeof(float) + 63) / 64) * 64;
      void* p = std::aligned_alloc(64, bytes == 0 ? 64 : bytes);
      if (p == nullptr) throw std::bad_alloc();
      data_.reset(static_cast<float*>(p));
      capacity_ = count;
    }
    size_ = count;
  }
  void zero() {
    if (size_ > 0) std::memset(data_.get(), 0, size_ * sizeof(float));
  }
  float* data() { return data_.get(); }
  const float* data() const { return data_.get(); }
  size_t size() const { return size_; }

 private:
  struct Free {
    void operator()(float* p) const { std::free(p); }
  };
  std::unique_ptr<float, Free> data_;
  size_t size_ = 0;
  size_t capacity_ = 0;
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(Shape s) { reshape(s); }

  // Sets the shape; storage grows when needed, contents are unspecified afterwards.
  void reshape(Shape s) {
    shape_ = s;
    buf_.resize(s.size());
  }
  void zero() { buf_.zero(); }

  const Shape& shape() const { return shape_; }
  size_t size() const { return shape_.size(); }
  float* data() { return buf_.data(); }
  const float* data() const { return buf_.data(); }
  float* image(int i) { return buf_.data() + static_cast<size_t>(i) * shape_.image_size(); }
  const float* image(int i) const { return buf_.data() + static_cast<size_t>(i) * shape_.image_size(); }

 private:
  Shape shape_;
  FloatBuffer buf_;
};

}  // namespace edl::models
