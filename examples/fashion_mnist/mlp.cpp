#include "mlp.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace fmnist {

Mlp::Mlp(int inputs, int hidden, int outputs) : in_(inputs), hidden_(hidden), out_(outputs) {
  for (Params* p : {&params_, &grads_, &velocity_}) {
    p->w1.assign(static_cast<std::size_t>(hidden) * inputs, 0.0f);
    p->b1.assign(static_cast<std::size_t>(hidden), 0.0f);
    p->w2.assign(static_cast<std::size_t>(outputs) * hidden, 0.0f);
    p->b2.assign(static_cast<std::size_t>(outputs), 0.0f);
  }
}

void Mlp::init(std::uint32_t seed) {
  std::mt19937 rng(seed);
  auto fill = [&rng](std::vector<float>& w, int fan_in, int fan_out) {
    const float limit = std::sqrt(6.0f / static_cast<float>(fan_in + fan_out));
    std::uniform_real_distribution<float> u(-limit, limit);
    for (float& v : w) v = u(rng);
  };
  fill(params_.w1, in_, hidden_);
  fill(params_.w2, hidden_, out_);
  std::fill(params_.b1.begin(), params_.b1.end(), 0.0f);
  std::fill(params_.b2.begin(), params_.b2.end(), 0.0f);
}

void Mlp::forward(std::span<const float> x, std::size_t batch) {
  const auto in = static_cast<std::size_t>(in_), hid = static_cast<std::size_t>(hidden_),
             out = static_cast<std::size_t>(out_);
  h_.resize(batch * hid);
  p_.resize(batch * out);
  for (std::size_t b = 0; b < batch; ++b) {
    const float* xb = x.data() + b * in;
    for (std::size_t j = 0; j < hid; ++j) {
      const float* w = params_.w1.data() + j * in;
      float s = params_.b1[j];
      for (std::size_t k = 0; k < in; ++k) s += w[k] * xb[k];
      h_[b * hid + j] = s > 0 ? s : 0;
    }
    float* z = p_.data() + b * out;
    float top = -1e30f;
    for (std::size_t o = 0; o < out; ++o) {
      const float* w = params_.w2.data() + o * hid;
      float s = params_.b2[o];
      for (std::size_t j = 0; j < hid; ++j) s += w[j] * h_[b * hid + j];
      z[o] = s;
      top = std::max(top, s);
    }
    float sum = 0;
    for (std::size_t o = 0; o < out; ++o) sum += (z[o] = std::exp(z[o] - top));
    for (std::size_t o = 0; o < out; ++o) z[o] /= sum;
  }
}

float Mlp::train_step(std::span<const float> x, std::span<const std::uint8_t> y) {
  const std::size_t batch = y.size();
  const auto in = static_cast<std::size_t>(in_), hid = static_cast<std::size_t>(hidden_),
             out = static_cast<std::size_t>(out_);
  forward(x, batch);
  for (std::vector<float>* g : grads_.tensors()) std::fill(g->begin(), g->end(), 0.0f);
  float loss = 0;
  std::vector<float> dh(hid);
  const float scale = 1.0f / static_cast<float>(batch);
  for (std::size_t b = 0; b < batch; ++b) {
    const float* p = p_.data() + b * out;
    loss -= std::log(std::max(p[y[b]], 1e-12f));
    std::fill(dh.begin(), dh.end(), 0.0f);
    for (std::size_t o = 0; o < out; ++o) {
      const float dz = (p[o] - (o == y[b] ? 1.0f : 0.0f)) * scale;
      grads_.b2[o] += dz;
      float* gw = grads_.w2.data() + o * hid;
      const float* w = params_.w2.data() + o * hid;
      for (std::size_t j = 0; j < hid; ++j) {
        gw[j] += dz * h_[b * hid + j];
        dh[j] += dz * w[j];
      }
    }
    const float* xb = x.data() + b * in;
    for (std::size_t j = 0; j < hid; ++j) {
      if (h_[b * hid + j] <= 0) continue;  // ReLU
      grads_.b1[j] += dh[j];
      float* gw = grads_.w1.data() + j * in;
      const float d = dh[j];
      for (std::size_t k = 0; k < in; ++k) gw[k] += d * xb[k];
    }
  }
  return loss * scale;
}

int Mlp::correct(std::span<const float> x, std::span<const std::uint8_t> y) {
  forward(x, y.size());
  const auto out = static_cast<std::size_t>(out_);
  int right = 0;
  for (std::size_t b = 0; b < y.size(); ++b) {
    const float* p = p_.data() + b * out;
    right += static_cast<int>(std::max_element(p, p + out) - p) == y[b];
  }
  return right;
}

void Mlp::apply(float lr, float momentum) {
  auto p = params_.tensors();
  auto g = grads_.tensors();
  auto v = velocity_.tensors();
  for (std::size_t t = 0; t < p.size(); ++t) {
    for (std::size_t i = 0; i < p[t]->size(); ++i) {
      (*v[t])[i] = momentum * (*v[t])[i] + (*g[t])[i];
      (*p[t])[i] -= lr * (*v[t])[i];
    }
  }
}

std::uint64_t Mlp::checksum() {
  std::uint64_t h = 1469598103934665603ull;
  for (std::vector<float>* t : params_.tensors()) {
    const auto* bytes = reinterpret_cast<const unsigned char*>(t->data());
    for (std::size_t i = 0; i < t->size() * sizeof(float); ++i) {
      h = (h ^ bytes[i]) * 1099511628211ull;
    }
  }
  return h;
}

}  // namespace fmnist
