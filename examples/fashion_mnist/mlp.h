// A two-layer perceptron for 28x28 images: 784 -> hidden (ReLU) -> 10 (softmax, cross-entropy).
// Parameters and gradients live in four tensors each, so each layer's gradient can be averaged
// across ranks as its own named allreduce.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace fmnist {

struct Params {
  std::vector<float> w1, b1, w2, b2;  // hidden x in, hidden, 10 x hidden, 10
  std::vector<std::vector<float>*> tensors() { return {&w1, &b1, &w2, &b2}; }
};

class Mlp {
 public:
  Mlp(int inputs, int hidden, int outputs);

  // Xavier-uniform weights, zero biases, from `seed`.
  void init(std::uint32_t seed);

  // Forward and backward over a batch (rows of `inputs` floats). Fills grads() with the mean
  // gradient over the batch and returns the mean cross-entropy loss.
  float train_step(std::span<const float> x, std::span<const std::uint8_t> y);

  // Number of correct predictions over a batch.
  int correct(std::span<const float> x, std::span<const std::uint8_t> y);

  // SGD with momentum: velocity = momentum * velocity + grads; params -= lr * velocity.
  void apply(float lr, float momentum);

  Params& params() { return params_; }
  Params& grads() { return grads_; }
  Params& velocity() { return velocity_; }  // the momentum, for checkpoints
  std::uint64_t checksum();                 // FNV-1a over the parameter bytes

 private:
  void forward(std::span<const float> x, std::size_t batch);
  int in_, hidden_, out_;
  Params params_, grads_, velocity_;
  std::vector<float> h_, p_;  // activations of the last forward: batch x hidden, batch x out
};

}  // namespace fmnist
