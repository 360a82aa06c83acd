// Seeded synthetic timing sources for the timing tests (header only, shared).
#pragma once

#include <cmath>

#include "kernelsmith/timing/stats.hpp"

namespace kernelsmith::timing::synthetic {

// Normal variates from SplitMix64 via Box-Muller: same stream on every platform.
class Normal {
 public:
  explicit Normal(std::uint64_t seed) : rng_(seed) {}
  double uniform() { return (static_cast<double>(rng_.next() >> 11) + 0.5) * 0x1.0p-53; }
  double operator()(double mean, double sigma) {
    const double u1 = uniform(), u2 = uniform();
    return mean + sigma * std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

 private:
  SplitMix64 rng_;
};

}  // namespace kernelsmith::timing::synthetic
