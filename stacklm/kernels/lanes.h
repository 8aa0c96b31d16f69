// The 8-lane vectors of the transformer's kernels (attention.cpp, dropout.cpp): GCC's vector
// extension over scalar_t (float: one AVX2 register; double: two), with loads and stores that
// assume no alignment. compiled.py hashes this file into the build's flags, so a change here
// rebuilds the library.

#pragma once

#include <cstdint>
#include <cstring>

namespace stacklm_lanes {

constexpr int64_t LANE_COUNT = 8;

template <typename scalar_t>
struct Lanes {
  typedef scalar_t type __attribute__((vector_size(LANE_COUNT * sizeof(scalar_t))));
};

template <typename scalar_t>
typename Lanes<scalar_t>::type load(const scalar_t* from) {
  typename Lanes<scalar_t>::type lanes;
  std::memcpy(&lanes, from, sizeof lanes);
  return lanes;
}

template <typename scalar_t>
void store(scalar_t* to, typename Lanes<scalar_t>::type lanes) {
  std::memcpy(to, &lanes, sizeof lanes);
}

}  // namespace stacklm_lanes
