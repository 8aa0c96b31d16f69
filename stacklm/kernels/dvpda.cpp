// The whole-sequence dVPDA (full stack, bottom replaceable) and its exact backward, on CPU.
//
// The same dynamic program and numerics as ``pda.py`` with ``ShiftedLogContraction``
// (``shifted.py``); ``dvpda.py`` states the recurrences. Every step is written once, over a value
// type V: every op runs it on groups of LANE_COUNT batch elements, V = Lane<T> (lanes.h), one
// lane per element, every table stored [position][lane], so that each operation of the DP is one
// vector operation over the group: the whole-sequence ops and the one-step ops (``dvpda_step``,
// which a stack RNN calls once per step, its tables kept in lanes from step to step) alike. A
// group of fewer elements pads its lanes with log weights 0 and drops what they give. One group
// per task (at::parallel_for).
//
// Per element, column t (t = 0 … n) has rows(t) = m + (t+1)·N rows: the m rows of η[t], then
// N rows (i, a) per row i = −1 … t−1 (row index m + (i+1)·N + a in every column). Every
// column is stored transposed, [c][row], at offset(t) of one flat table:
//   gamma:   log η[t][j, c] in the η rows; log γ[i→t][a, c] in the γ rows of column 0 only
//            (the shares carry the γ rows of later columns: nothing reads their logs)
//   shares:  Ŝ = γ[i→t][a, c] α[i][a] / α[t][c] ∈ [0, 1] (η rows: exp(log η − log α))
//   pops:    at offset(t−2), rows(t−2) rows of step t, of which it uses m + 1 per target: in
//            the η rows the pop's real total P = Σ_{k,u} Ŝ_k ŵ (the γ rows' totals are kept
//            only in scratch, in cache), in row m the inverse of the γ rows' total relative to κ
//            (their shares Ŝ of column t over it are their sums, from which the backward takes
//            the replace and pop terms' adjoints without an exp or a log)
// and alpha (n+1, N) holds log α[t]. All O(n²·N²): what the backward needs. The shares are
// also the weights of log α[t]'s log-sum-exp over the γ rows.
// Step t of the forward, from column t−1 (Ĝ = exp(γ − log α[t−1] − ρ), ρ the row maximum):
//   products = log(Ĝ R̂) + ρ + offset, R̂ = exp(log α[t−1] + [Δ^R | Δ⁻] − offset), offset exact
//     -> the replace term (every row) and γ'_t[k][(u,y), r] (γ rows)
//   ŵ[k,(u,y),r] = exp(log α[k][u,y] + γ'_t[k][(u,y),r] − L[y,r]), L the exact log-sum over (k, u)
//   pop[row,(r,y)] = log Σ_{k,u} Ŝ_k[row,(u,y)] ŵ[k,(u,y),r] + L[y,r] − log α(row)
//   η rows of column t = replace ⊕ pop ⊕ log v_t + log(α[t−1] Δ⁺), in log space
//   γ rows of column t, in real space relative to κ, the largest of the present offsets:
//     α(row) γ[row→t] / exp(κ) = exp(offset − κ) Σ_c Ŝ R̂ + exp(L − κ) P (+ α[t−1] Δ⁺_t for the new rows),
//     log α[t] = κ + log of their sum, Ŝ of column t = each over the sum
//   (the scaled forward algorithm of HMMs, one scale per configuration: no exp or log per row).
// The backward runs the steps in reverse with the adjoints of every log value; each
// log-sum-exp passes g·exp(term − result), computed from the same shifted products.

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "lanes.h"

// glibc's vector math library (libmvec) has SIMD versions of exp and log; declaring them lets
// the loops marked `omp simd` below call them (its headers declare them only with -ffast-math,
// whose finite-math assumption this kernel cannot use: log 0 = −∞ is everywhere).
extern "C" {
__attribute__((simd("notinbranch"))) float expf(float);
__attribute__((simd("notinbranch"))) double exp(double);
__attribute__((simd("notinbranch"))) float logf(float);
__attribute__((simd("notinbranch"))) double log(double);
}

namespace {

using stacklm_lanes::LANE_COUNT;

struct Sizes {
  int64_t batch, steps, states, symbols, configs, vector;

  int64_t rows(int64_t t) const { return vector + (t + 1) * configs; }
  // N · Σ_{s<t} rows(s)
  int64_t offset(int64_t t) const { return configs * (t * vector + configs * t * (t + 1) / 2); }
  int64_t table() const { return offset(steps + 1); }
};

template <typename T>
constexpr T NEG = -std::numeric_limits<T>::infinity();

// x = mantissa · 2^exponent with mantissa ∈ [0.5, 1) for x > 0 (subnormals too), by the bits of
// x, so that a loop of them vectorizes: log x = log mantissa + exponent · ln 2 without a log.
// The mantissa is undefined for x = 0.
template <typename T>
struct Exponent;

template <>
struct Exponent<float> {
  using Bits = uint32_t;
  using Signed = int32_t;
  static constexpr int mantissa_bits = 23, bias = 126, subnormal_shift = 24;
  static constexpr Bits mantissa_mask = 0x007FFFFFu, half = 0x3F000000u;
};

template <>
struct Exponent<double> {
  using Bits = uint64_t;
  using Signed = int64_t;
  static constexpr int mantissa_bits = 52, bias = 1022, subnormal_shift = 54;
  static constexpr Bits mantissa_mask = 0x000FFFFFFFFFFFFFull, half = 0x3FE0000000000000ull;
};

// A value of the DP: Lane<T>, one lane per element of a group. Scalar is T, Signed and Bits are
// the integers of T's width (one per lane), Mask what a comparison gives.
template <typename T>
using Lane = typename stacklm_lanes::Lanes<T>::type;

template <typename V>
struct Values;

template <typename T>
struct LaneValues {
  using Scalar = T;
  using Signed = Lane<typename Exponent<T>::Signed>;
  using Bits = Lane<typename Exponent<T>::Bits>;
  using Mask = Signed;
  static Signed to_signed(Lane<T> x) { return __builtin_convertvector(x, Signed); }
  static Lane<T> of_signed(Signed x) { return __builtin_convertvector(x, Lane<T>); }
};

template <>
struct Values<Lane<float>> : LaneValues<float> {};
template <>
struct Values<Lane<double>> : LaneValues<double> {};

template <typename V>
using ScalarOf = typename Values<V>::Scalar;
template <typename V>
using MaskOf = typename Values<V>::Mask;

// x in every lane.
template <typename V, typename S>
inline V splat(S x) {
  return V{} + static_cast<std::remove_cvref_t<decltype(V{}[0])>>(x);
}

template <typename V>
inline V log_zero() {
  return splat<V>(NEG<ScalarOf<V>>);
}

// Whether any lane of a comparison holds.
template <typename M>
inline bool any(M mask) {
  bool found = false;
  for (int64_t lane = 0; lane < LANE_COUNT; ++lane) found |= mask[lane] != 0;
  return found;
}

// Lane by lane, what std::max and std::min return (the first argument on a tie).
template <typename V>
inline V larger(V a, V b) {
  return a < b ? b : a;
}

template <typename V>
inline V smaller(V a, V b) {
  return b < a ? b : a;
}

template <typename V>
inline V magnitude(V x) {
  return x < 0 ? -x : x;
}

// f of every lane, in one `omp simd` loop (libmvec's vector exp and log).
template <typename V, typename Function>
inline V each_lane(V x, Function f) {
  using T = ScalarOf<V>;
  T in[LANE_COUNT], out[LANE_COUNT];
  std::memcpy(in, &x, sizeof x);
#pragma omp simd
  for (int64_t lane = 0; lane < LANE_COUNT; ++lane) out[lane] = f(in[lane]);
  V result;
  std::memcpy(&result, out, sizeof result);
  return result;
}

template <typename V>
inline V log_of(V x) {
  return each_lane(x, [](ScalarOf<V> value) { return std::log(value); });
}

// exp over the whole range (subnormal results kept), for the few exps per configuration.
template <typename V>
inline V exp_exact(V x) {
  return each_lane(x, [](ScalarOf<V> value) { return std::exp(value); });
}

template <typename V>
inline V split_exponent(V x, V& exponent) {
  using T = ScalarOf<V>;
  using E = Exponent<T>;
  using Bits = typename Values<V>::Bits;
  using Signed = typename Values<V>::Signed;
  const auto subnormal = x < std::numeric_limits<T>::min();
  const V scaled = subnormal ? x * T(typename E::Bits(1) << E::subnormal_shift) : x;
  const auto bits = std::bit_cast<Bits>(scaled);
  // Integers of the float's own width: a float's exponent through int64 costs lane widening
  // and a conversion that AVX2 lacks.
  const auto biased = std::bit_cast<Signed>(bits >> E::mantissa_bits);
  exponent = Values<V>::of_signed(subnormal ? biased - (E::bias + E::subnormal_shift) : biased - E::bias);
  return std::bit_cast<V>((bits & E::mantissa_mask) | E::half);
}

template <typename T>
constexpr T LN2 = T(0.693147180559945309417232121458176568);

// exp: glibc's for double; for float, Cephes' expf (S. L. Moshier, Cephes Mathematical
// Library: range reduction by ln 2 in two parts, then a degree-5 polynomial; within 2 ulp),
// written out so that GCC inlines and vectorizes it: a loop calling libmvec keeps nothing in
// registers across the call (every vector register is the caller's to save). Takes
// x ≥ −87.33 (exp_flushed's floor) and gives +∞ above float's range.
template <typename V>
inline V exp_of(V x) {
  if constexpr (std::is_same_v<ScalarOf<V>, double>) {
    return exp_exact(x);
  } else {
    using Signed = typename Values<V>::Signed;
    x = x < 89.0f ? x : splat<V>(89.0f);
    constexpr float shifter = 12582912.0f;  // 1.5 · 2^23: adding it rounds to an integer in the low bits
    const V shifted = x * 1.44269504088896341f + shifter;
    const V n = shifted - shifter;
    Signed power = std::bit_cast<Signed>(shifted) - std::bit_cast<int32_t>(shifter);
    const V r = (x - n * 0.693359375f) - n * -2.12194440e-4f;
    V p = splat<V>(1.9875691500e-4f);
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * (r * r) + r + 1.0f;
    const auto above = power > 127;  // 2^128 is no float: 2 · 2^127
    power = above ? splat<Signed>(127) : power;
    p = above ? p + p : p;
    return p * std::bit_cast<V>((power + 127) << 23);
  }
}

// exp(x), or 0 where that is below the smallest normal number. glibc's vector exp (libmvec)
// computes every lane below about −87.3 (float) or −708.4 (double), −∞ included, with the
// scalar exp, lane by lane: about 20 times the time of a vector lane, and the DP's terms
// below their maximum are often that small. So a lane below `floor` is computed at `floor`
// and multiplied by 0. `floor` comes from exp_floor(), hidden from the optimizer: with a
// constant, GCC folds exp(floor) and computes exp(x) on every lane again; the two tests on x
// are written differently for the same reason (GCC merges x >= floor ? exp(max(x, floor)) : 0
// into exp(x)). x − floor ≥ 0 exactly where x ≥ floor (gradual underflow); NaN gives 0.
// In float, exp_of is inline (above), for which the floor also keeps 2^n a normal number.
template <typename V>
inline V exp_flushed(V x, ScalarOf<V> floor) {
  const V keep = x - floor >= 0 ? splat<V>(1) : splat<V>(0);
  return exp_of(x >= floor ? x : splat<V>(floor)) * keep;
}

template <typename T>
inline T exp_floor() {
  T floor = std::is_same_v<T, float> ? T(-87) : T(-708);
  asm("" : "+m"(floor));
  return floor;
}

// The products below are sums of a few weighted columns. Bound by stores, they add up to four
// columns per pass over the output (one store per four multiply-adds); columns of weight 0
// (in every lane) are left out.
template <typename V>
struct WeightedColumns {
  std::vector<V> weights;
  std::vector<const V*> columns;
  std::vector<int64_t> indices;  // the caller's index of each column kept
  int64_t count = 0;

  // Room for `capacity` columns (allocated once per size), none kept.
  void reset(int64_t capacity) {
    if (static_cast<int64_t>(weights.size()) < capacity) {
      weights.resize(capacity);
      columns.resize(capacity);
      indices.resize(capacity);
    }
    count = 0;
  }
  void add(V weight, const V* column, int64_t index) {
    if (!any(weight != 0)) return;
    weights[count] = weight;
    columns[count] = column;
    indices[count] = index;
    ++count;
  }
  int64_t size() const { return count; }
};

// out[row] = Σ_i weights[i] · columns[i][row] for row < size (0 without columns). The first pass
// over the output stores and the later ones add, so the output needs no fill beforehand.
template <typename V>
void weighted_sum(int64_t size, const WeightedColumns<V>& terms, V* __restrict out) {
  const V* w = terms.weights.data();
  const V* const* c = terms.columns.data();
  const int64_t count = terms.size();
  const auto pass = [size, out](bool first, auto term) {
    if (first) {
#pragma omp simd
      for (int64_t row = 0; row < size; ++row) out[row] = term(row);
    } else {
#pragma omp simd
      for (int64_t row = 0; row < size; ++row) out[row] += term(row);
    }
  };
  if (count == 0) std::fill(out, out + size, V{});
  int64_t i = 0;
  for (; i + 4 <= count; i += 4) {
    const V w0 = w[i], w1 = w[i + 1], w2 = w[i + 2], w3 = w[i + 3];
    const V *__restrict c0 = c[i], *__restrict c1 = c[i + 1], *__restrict c2 = c[i + 2], *__restrict c3 = c[i + 3];
    pass(i == 0, [=](int64_t row) { return w0 * c0[row] + w1 * c1[row] + w2 * c2[row] + w3 * c3[row]; });
  }
  if (count - i == 3) {
    const V w0 = w[i], w1 = w[i + 1], w2 = w[i + 2];
    const V *__restrict c0 = c[i], *__restrict c1 = c[i + 1], *__restrict c2 = c[i + 2];
    pass(i == 0, [=](int64_t row) { return w0 * c0[row] + w1 * c1[row] + w2 * c2[row]; });
  } else if (count - i == 2) {
    const V w0 = w[i], w1 = w[i + 1];
    const V *__restrict c0 = c[i], *__restrict c1 = c[i + 1];
    pass(i == 0, [=](int64_t row) { return w0 * c0[row] + w1 * c1[row]; });
  } else if (count - i == 1) {
    const V w0 = w[i];
    const V* __restrict c0 = c[i];
    pass(i == 0, [=](int64_t row) { return w0 * c0[row]; });
  }
}

// The adjoint of a product term left ⊙ Σ_i weights[i] · columns[i], in one pass over the rows:
//   results[i] = Σ_row left[row] · columns[i][row],   out[row] += left[row] · Σ_i weights[i] · columns[i][row].
// Four columns per pass (a group of fewer is padded with weight 0 and the column ``left``, already
// loaded).
template <typename V>
void product_adjoint(int64_t size, const V* __restrict left, const WeightedColumns<V>& terms, V* results,
                     V* __restrict out) {
  const int64_t count = terms.size();
  for (int64_t first = 0; first < count; first += 4) {
    V w[4];
    const V* c[4];
    for (int64_t i = 0; i < 4; ++i) {
      const bool kept = first + i < count;
      w[i] = kept ? terms.weights[first + i] : V{};
      c[i] = kept ? terms.columns[first + i] : left;
    }
    const V w0 = w[0], w1 = w[1], w2 = w[2], w3 = w[3];
    const V *__restrict c0 = c[0], *__restrict c1 = c[1], *__restrict c2 = c[2], *__restrict c3 = c[3];
    V totals[4] = {};
    for (int64_t row = 0; row < size; ++row) {
      const V l = left[row], v0 = c0[row], v1 = c1[row], v2 = c2[row], v3 = c3[row];
      totals[0] += l * v0;
      totals[1] += l * v1;
      totals[2] += l * v2;
      totals[3] += l * v3;
      out[row] += l * (w0 * v0 + w1 * v1 + w2 * v2 + w3 * v3);
    }
    for (int64_t i = 0; i < 4 && first + i < count; ++i) results[first + i] = totals[i];
  }
}

// Σ_row values[row] for row < size.
template <typename V>
V sum_rows(int64_t size, const V* __restrict values) {
  V total{};
  for (int64_t row = 0; row < size; ++row) total += values[row];
  return total;
}

// Quantities of step t that the forward computes and the backward recomputes.
template <typename V>
struct Step {
  using Mask = MaskOf<V>;
  std::vector<V> ghat, rho, row_scale, rhat, right_offset, total, weights, mantissas, pop_offset, pushed_offset, dots;
  std::vector<V> row_unscale;                         // 2^e per row, undoing Ĝ's scaling: 2^e · total = Σ_c Ŝ R̂
  std::vector<Mask> right_present, pop_present;       // whether each offset is that of a nonempty sum
  std::vector<V> symbol_values, symbol_sums;          // scratch of pop_weights
  std::vector<V> column_high, column_sums;            // scratch of exp_columns
  std::vector<V> padding;                             // POP_BLOCK rows the pop's padded blocks write to
  std::vector<V> push_terms, push_sums;               // the terms of log(α[t−1] Δ⁺_t) relative to their maximum, their sums
  std::vector<V> pop_total;                           // P [(r, y)][row], rows(t−2) rows per target
  WeightedColumns<V> terms;
};

// For each column j of values [c][j] (rows × columns): high_j = max_c value (0 if every value
// is −∞), values ← exp(value − high_j), sums_j = Σ_c of them, so that the column's log-sum is
// log(sums_j) + high_j. Vectorized over j: a short step's scalar exps were much of its time.
template <typename V>
void exp_columns(int64_t rows, int64_t columns, V* __restrict values, V* __restrict high, V* __restrict sums) {
  using T = ScalarOf<V>;
  std::fill(high, high + columns, log_zero<V>());
  for (int64_t c = 0; c < rows; ++c) {
    const V* __restrict row = values + c * columns;
#pragma omp simd
    for (int64_t j = 0; j < columns; ++j) high[j] = row[j] > high[j] ? row[j] : high[j];
  }
  for (int64_t j = 0; j < columns; ++j) {
    high[j] = high[j] == NEG<T> ? V{} : high[j];
    sums[j] = V{};
  }
  const T floor = exp_floor<T>();
  for (int64_t c = 0; c < rows; ++c) {
    V* __restrict row = values + c * columns;
#pragma omp simd
    for (int64_t j = 0; j < columns; ++j) {
      row[j] = exp_flushed(row[j] - high[j], floor);
      sums[j] += row[j];
    }
  }
}

// Ĝ_{t−1}, R̂, the products' real totals [j][row], and log(α[t−1] Δ⁺_t), given the shares Ŝ of
// column t−1 and log α(row) (row_weights). Ĝ comes from the shares without an exp: Ŝ[c][row] =
// exp(log γ + log α(row) − log α[t−1][c]), so with the row's largest share M = mantissa · 2^e,
// Ĝ = Ŝ · 2^−e (exact) = exp(log γ − log α[t−1][c] − ρ) for ρ = e·ln 2 − log α(row). A row whose
// shares are all 0 (its weight α(row) is 0, or its terms of every log α[t−1][c] are below the
// exp floor, as the pop already reads them) has Ĝ = 0 and ρ = 0: the replace term leaves it out.
template <typename V>
void products(const Sizes& z, int64_t t, const V* shares, const std::vector<V>& row_weights, const V* alpha,
              const V* push, const V* replace, const V* pop, Step<V>& s) {
  using T = ScalarOf<V>;
  using E = Exponent<T>;
  using Bits = typename Values<V>::Bits;
  const int64_t N = z.configs, Q = z.states, J = N + Q, R = z.rows(t - 1);
  const V* previous = shares + z.offset(t - 1);
  const V* shift = alpha + (t - 1) * N;
  s.rho.assign(R, V{});  // the rows' largest shares first
  for (int64_t c = 0; c < N; ++c) {
    const V* __restrict column = previous + c * R;
    V* __restrict high = s.rho.data();
#pragma omp simd
    for (int64_t row = 0; row < R; ++row) high[row] = column[row] > high[row] ? column[row] : high[row];
  }
  s.row_scale.resize(R);
  s.row_unscale.resize(R);
  {
    V* __restrict rho = s.rho.data();
    V* __restrict scale = s.row_scale.data();
    V* __restrict unscale = s.row_unscale.data();
    const V* __restrict weight = row_weights.data();
#pragma omp simd
    for (int64_t row = 0; row < R; ++row) {
      const V high = rho[row];
      V exponent;
      split_exponent(high, exponent);
      // 2^−e a normal number (M may be subnormal)
      exponent = larger(smaller(exponent, splat<V>(T(E::bias))), splat<V>(-T(E::bias)));
      const auto power = (E::bias + 1) - Values<V>::to_signed(exponent);
      const auto present = high > 0;
      scale[row] = present ? std::bit_cast<V>(std::bit_cast<Bits>(power) << E::mantissa_bits) : V{};
      const auto inverse_power = (E::bias + 1) + Values<V>::to_signed(exponent);
      unscale[row] = present ? std::bit_cast<V>(std::bit_cast<Bits>(inverse_power) << E::mantissa_bits) : V{};
      rho[row] = present ? exponent * LN2<T> - weight[row] : V{};
    }
  }
  s.ghat.resize(N * R);
  for (int64_t c = 0; c < N; ++c) {
    const V* __restrict column = previous + c * R;
    const V* __restrict scale = s.row_scale.data();
    V* __restrict out = s.ghat.data() + c * R;
#pragma omp simd
    for (int64_t row = 0; row < R; ++row) out[row] = column[row] * scale[row];
  }
  // R̂ = exp(log α[t−1] + [Δ^R | Δ⁻] − offset), offset the exact log-sum of each column.
  s.rhat.resize(N * J);
  s.right_offset.resize(J);
  s.right_present.resize(J);
  s.column_high.resize(J);
  s.column_sums.resize(J);
  for (int64_t c = 0; c < N; ++c) {
    V* row = s.rhat.data() + c * J;
    for (int64_t j = 0; j < N; ++j) row[j] = shift[c] + replace[c * N + j];
    for (int64_t r = 0; r < Q; ++r) row[N + r] = shift[c] + pop[c * Q + r];
  }
  V* sums = s.column_sums.data();
  exp_columns(N, J, s.rhat.data(), s.column_high.data(), sums);
  for (int64_t j = 0; j < J; ++j) {
    const auto present = sums[j] > 0;
    s.right_offset[j] = present ? log_of(sums[j]) + s.column_high[j] : s.column_high[j];
    s.right_present[j] = present;
    sums[j] = present ? T(1) / sums[j] : V{};
  }
  for (int64_t c = 0; c < N; ++c) {
    V* __restrict row = s.rhat.data() + c * J;
#pragma omp simd
    for (int64_t j = 0; j < J; ++j) row[j] *= sums[j];
  }
  s.total.resize(J * R);
  for (int64_t j = 0; j < J; ++j) {
    s.terms.reset(N);
    for (int64_t c = 0; c < N; ++c) s.terms.add(s.rhat[c * J + j], s.ghat.data() + c * R, c);
    weighted_sum(R, s.terms, s.total.data() + j * R);
  }
  // log(α[t−1] Δ⁺_t)[target] = log Σ_c push_terms[c][target] + high; −∞ when every term is.
  s.push_terms.resize(N * N);
  s.push_sums.resize(N);
  for (int64_t c = 0; c < N; ++c)
    for (int64_t target = 0; target < N; ++target) s.push_terms[c * N + target] = shift[c] + push[c * N + target];
  exp_columns(N, N, s.push_terms.data(), s.column_high.data(), s.push_sums.data());
  s.pushed_offset.resize(N);
  for (int64_t target = 0; target < N; ++target)
    s.pushed_offset[target] = s.push_sums[target] > 0 ? log_of(s.push_sums[target]) + s.column_high[target]
                                                      : log_zero<V>();
}

// ŵ[r][k·N + (u,y)] for k = 0 … t−2 and L[y][r] (pop_offset), from γ'_t in the products.
// (k, u, y) runs over k·N + u·S + y, a contiguous range of rows of column t−1: the sums and
// maxima over (k, u) per symbol y run over its blocks of S.
template <typename V>
void pop_weights(const Sizes& z, int64_t t, const V* alpha, Step<V>& s) {
  using T = ScalarOf<V>;
  const int64_t N = z.configs, Q = z.states, S = z.symbols, m = z.vector, R = z.rows(t - 1), KN = (t - 1) * N;
  s.weights.resize(Q * KN);
  s.mantissas.resize(KN);
  s.symbol_values.resize(S);
  s.symbol_sums.resize(S);
  s.pop_offset.assign(S * Q, log_zero<V>());
  s.pop_present.assign(S * Q, MaskOf<V>{});
  V* per_symbol = s.symbol_values.data();
  V* sums = s.symbol_sums.data();
  const T floor = exp_floor<T>();
  for (int64_t r = 0; r < Q; ++r) {
    V* __restrict weight = s.weights.data() + r * KN;
    V* __restrict mantissa = s.mantissas.data();
    // log α[k][u,y] + γ'_t[k][(u,y), r] = log mantissa + weight, γ' from the real total of row
    // m + N + k·N + b of product column N + r as mantissa · 2^exponent (as in forward_step):
    // ŵ = mantissa · exp(weight − max weight), one exp and no log.
    const V* __restrict total = s.total.data() + (N + r) * R + m + N;
    const V* __restrict rho = s.rho.data() + m + N;
    const V offset = s.right_offset[N + r];
#pragma omp simd
    for (int64_t index = 0; index < KN; ++index) {
      V exponent;
      mantissa[index] = split_exponent(total[index], exponent);
      const V scale = alpha[index] + (exponent * LN2<T> + rho[index] + offset);
      weight[index] = total[index] > 0 ? scale : log_zero<V>();
    }
    // per_symbol[y] = max over (k, u) of weight (0 if every one is −∞).
    std::fill(per_symbol, per_symbol + S, log_zero<V>());
    for (int64_t first = 0; first < KN; first += S)
      for (int64_t y = 0; y < S; ++y) per_symbol[y] = larger(per_symbol[y], weight[first + y]);
    for (int64_t y = 0; y < S; ++y) per_symbol[y] = per_symbol[y] == NEG<T> ? V{} : per_symbol[y];
    for (int64_t first = 0; first < KN; first += S)
#pragma omp simd
      for (int64_t y = 0; y < S; ++y)
        weight[first + y] = mantissa[first + y] * exp_flushed(weight[first + y] - per_symbol[y], floor);
    // L[y][r] = log Σ_{k,u} ŵ + max, and ŵ scaled to sum to 1 per y.
    std::fill(sums, sums + S, V{});
    for (int64_t first = 0; first < KN; first += S)
      for (int64_t y = 0; y < S; ++y) sums[y] += weight[first + y];
    for (int64_t y = 0; y < S; ++y) {
      const V sum = sums[y];
      const auto present = sum > 0;
      s.pop_offset[y * Q + r] = present ? log_of(sum) + per_symbol[y] : per_symbol[y];
      s.pop_present[y * Q + r] = present;
      per_symbol[y] = present ? T(1) / sum : V{};
    }
    for (int64_t first = 0; first < KN; first += S)
      for (int64_t y = 0; y < S; ++y) weight[first + y] *= per_symbol[y];
  }
}

// The pop's contraction over (k, u) runs in blocks of POP_BLOCK states u (the exposed element's)
// by POP_BLOCK states r (after the pop), for one symbol y and one column k: one pass over the
// rows of column k reads POP_BLOCK shares and updates POP_BLOCK totals, where a pass per (r, y)
// read each share Q times. States past Q are padded with weight 0, reading a kept column and
// writing to rows of `padding`.
constexpr int64_t POP_BLOCK = 3;
static_assert(POP_BLOCK == 3, "the passes below are written out for blocks of three states");

template <typename V>
struct PopBlock {
  V weights[POP_BLOCK][POP_BLOCK];  // [r][u]: ŵ[r][k·N + (u, y)]
  int64_t count_r, count_u;
};

template <typename V>
__attribute__((always_inline)) inline PopBlock<V> pop_block(const Sizes& z, int64_t t, const Step<V>& s, int64_t k, int64_t y, int64_t first_r,
                      int64_t first_u) {
  const int64_t Q = z.states, S = z.symbols, KN = (t - 1) * z.configs;
  PopBlock<V> block;
  block.count_r = std::min(POP_BLOCK, Q - first_r);
  block.count_u = std::min(POP_BLOCK, Q - first_u);
  for (int64_t i = 0; i < POP_BLOCK; ++i)
    for (int64_t j = 0; j < POP_BLOCK; ++j)
      block.weights[i][j] = i < block.count_r && j < block.count_u
                                ? s.weights[(first_r + i) * KN + k * z.configs + (first_u + j) * S + y]
                                : V{};
  return block;
}

// pop total[(r, y)] = Σ_k Σ_u ŵ[r][k, (u, y)] Ŝ_k[(u, y)], over the rows of each column k.
// Column k is the first to hold its rows rows(k−1) … rows(k) − 1: its first block of states u
// stores them, so the totals need no fill beforehand.
template <typename V>
void pop_forward(const Sizes& z, int64_t t, const V* shares, Step<V>& s, V* pop_total) {
  const int64_t N = z.configs, Q = z.states, S = z.symbols, R2 = z.rows(t - 2);
  s.padding.resize(POP_BLOCK * R2);
  for (int64_t k = 0; k < t - 1; ++k) {
    const int64_t Rk = z.rows(k), fresh = k > 0 ? z.rows(k - 1) : 0;
    const V* share = shares + z.offset(k);
    for (int64_t y = 0; y < S; ++y)
      for (int64_t first_r = 0; first_r < Q; first_r += POP_BLOCK)
        for (int64_t first_u = 0; first_u < Q; first_u += POP_BLOCK) {
          const PopBlock<V> block = pop_block(z, t, s, k, y, first_r, first_u);
          const V* in[POP_BLOCK];
          V* out[POP_BLOCK];
          for (int64_t i = 0; i < POP_BLOCK; ++i) {
            in[i] = share + ((i < block.count_u ? first_u + i : first_u) * S + y) * Rk;
            out[i] = i < block.count_r ? pop_total + ((first_r + i) * S + y) * R2 : s.padding.data() + i * R2;
          }
          const V(&w)[POP_BLOCK][POP_BLOCK] = block.weights;
          const V *__restrict c0 = in[0], *__restrict c1 = in[1], *__restrict c2 = in[2];
          V *__restrict o0 = out[0], *__restrict o1 = out[1], *__restrict o2 = out[2];
          const V w00 = w[0][0], w01 = w[0][1], w02 = w[0][2], w10 = w[1][0], w11 = w[1][1], w12 = w[1][2],
                  w20 = w[2][0], w21 = w[2][1], w22 = w[2][2];
          const int64_t added = first_u == 0 ? fresh : Rk;  // rows below it add, the rest store
#pragma omp simd
          for (int64_t row = 0; row < added; ++row) {
            const V v0 = c0[row], v1 = c1[row], v2 = c2[row];
            o0[row] += w00 * v0 + w01 * v1 + w02 * v2;
            o1[row] += w10 * v0 + w11 * v1 + w12 * v2;
            o2[row] += w20 * v0 + w21 * v1 + w22 * v2;
          }
#pragma omp simd
          for (int64_t row = added; row < Rk; ++row) {
            const V v0 = c0[row], v1 = c1[row], v2 = c2[row];
            o0[row] = w00 * v0 + w01 * v1 + w02 * v2;
            o1[row] = w10 * v0 + w11 * v1 + w12 * v2;
            o2[row] = w20 * v0 + w21 * v1 + w22 * v2;
          }
        }
  }
}

// The adjoint of pop_forward given ∂/∂(pop total) scaled_pop [(r, y)][row]: the shares' gradient
// Ŝ ⊙ Σ_r ŵ scaled goes straight to log γ of column k, and ∂/∂ŵ = Σ_row Ŝ scaled times ŵ to
// γ'_t, the row of column t−1 that holds (k, (u, y)) in product column N + r.
template <typename V>
void pop_backward(const Sizes& z, int64_t t, const V* shares, const V* scaled_pop, Step<V>& s, V* grad_gamma,
                  V* grad_products) {
  const int64_t N = z.configs, Q = z.states, S = z.symbols, m = z.vector, R = z.rows(t - 1), R2 = z.rows(t - 2);
  s.padding.resize(POP_BLOCK * R2);
  for (int64_t k = 0; k < t - 1; ++k) {
    const int64_t Rk = z.rows(k);
    const V* share = shares + z.offset(k);
    V* grad_k = grad_gamma + z.offset(k);
    for (int64_t y = 0; y < S; ++y)
      for (int64_t first_r = 0; first_r < Q; first_r += POP_BLOCK)
        for (int64_t first_u = 0; first_u < Q; first_u += POP_BLOCK) {
          const PopBlock<V> block = pop_block(z, t, s, k, y, first_r, first_u);
          const V* left[POP_BLOCK];
          const V* right[POP_BLOCK];
          V* out[POP_BLOCK];
          for (int64_t i = 0; i < POP_BLOCK; ++i) {
            const int64_t u = i < block.count_u ? first_u + i : first_u;
            left[i] = share + (u * S + y) * Rk;
            out[i] = i < block.count_u ? grad_k + (u * S + y) * Rk : s.padding.data() + i * R2;
            right[i] = scaled_pop + ((i < block.count_r ? first_r + i : first_r) * S + y) * R2;
          }
          const V(&w)[POP_BLOCK][POP_BLOCK] = block.weights;
          const V w00 = w[0][0], w01 = w[0][1], w02 = w[0][2], w10 = w[1][0], w11 = w[1][1], w12 = w[1][2],
                  w20 = w[2][0], w21 = w[2][1], w22 = w[2][2];
          const V *__restrict l0 = left[0], *__restrict l1 = left[1], *__restrict l2 = left[2];
          const V *__restrict v0 = right[0], *__restrict v1 = right[1], *__restrict v2 = right[2];
          V *__restrict o0 = out[0], *__restrict o1 = out[1], *__restrict o2 = out[2];
          // dots[r][u] = Σ_row Ŝ_u scaled_r
          V dots[POP_BLOCK][POP_BLOCK] = {};
          for (int64_t at = 0; at < Rk; ++at) {
            const V a0 = l0[at], a1 = l1[at], a2 = l2[at], b0 = v0[at], b1 = v1[at], b2 = v2[at];
            dots[0][0] += a0 * b0;
            dots[0][1] += a1 * b0;
            dots[0][2] += a2 * b0;
            dots[1][0] += a0 * b1;
            dots[1][1] += a1 * b1;
            dots[1][2] += a2 * b1;
            dots[2][0] += a0 * b2;
            dots[2][1] += a1 * b2;
            dots[2][2] += a2 * b2;
            o0[at] += a0 * (w00 * b0 + w10 * b1 + w20 * b2);
            o1[at] += a1 * (w01 * b0 + w11 * b1 + w21 * b2);
            o2[at] += a2 * (w02 * b0 + w12 * b1 + w22 * b2);
          }
          for (int64_t i = 0; i < block.count_r; ++i)
            for (int64_t j = 0; j < block.count_u; ++j) {
              const int64_t r = first_r + i, b = (first_u + j) * S + y;
              grad_products[(N + r) * R + m + (k + 1) * N + b] += w[i][j] * dots[i][j];
            }
        }
  }
}

// log α of every row index: 0 for η rows, 𝟙[q0, ⊥] for row −1, log α[i][a] for row (i, a).
template <typename V>
void row_weights(const Sizes& z, const V* alpha, int64_t columns, std::vector<V>& out) {
  const int64_t N = z.configs, m = z.vector;
  out.resize(z.rows(z.steps));  // rows past rows(columns) are not read
  std::fill(out.begin(), out.begin() + m, V{});
  for (int64_t a = 0; a < N; ++a) out[m + a] = a == 0 ? V{} : log_zero<V>();
  for (int64_t i = 0; i < columns; ++i)
    for (int64_t a = 0; a < N; ++a) out[m + (i + 1) * N + a] = alpha[i * N + a];
}

template <typename V>
void make_shares(const Sizes& z, int64_t t, const V* gamma, const V* alpha, const std::vector<V>& weights,
                 V* shares) {
  using T = ScalarOf<V>;
  const int64_t N = z.configs, R = z.rows(t);
  const V* weight = weights.data();
  const T floor = exp_floor<T>();
  for (int64_t c = 0; c < N; ++c) {
    const V shift = alpha[t * N + c];
    const V* column = gamma + z.offset(t) + c * R;
    V* out = shares + z.offset(t) + c * R;
    const auto present = shift != NEG<T>;
    if (!any(present)) {
      std::fill(out, out + R, V{});
      continue;
    }
    // log γ and log α(row) are never +∞, so a −∞ in either gives exp(−∞) = 0.
#pragma omp simd
    for (int64_t row = 0; row < R; ++row)
      out[row] = present ? exp_flushed(column[row] + weight[row] - shift, floor) : V{};
  }
}

// Column 0: η[0] = log v₀ at (q0, ⊥), row −1 = the fictitious push of ⊥ in q0; α[0] = 𝟙[q0, ⊥].
template <typename V>
void initialize_element(const Sizes& z, const V* bottom, V* gamma, V* shares, V* alpha) {
  const int64_t N = z.configs, m = z.vector, R = z.rows(0);
  std::vector<V> weights;
  row_weights(z, alpha, 0, weights);
  std::fill(gamma, gamma + N * R, log_zero<V>());
  for (int64_t j = 0; j < m; ++j) gamma[j] = bottom[j];
  gamma[m] = V{};
  for (int64_t a = 0; a < N; ++a) alpha[a] = a == 0 ? V{} : log_zero<V>();
  make_shares(z, 0, gamma, alpha, weights, shares);
}

// The scale of target (r, y)'s γ rows in column t: κ, the largest of the present terms' log
// offsets (−∞ in a lane without any), and each term's factor exp(offset − κ) (0 where absent; the
// push term's over its sum), all 0 where no lane has a term. The forward and the backward take
// them from the same step quantities, so both get the same values.
template <typename V>
struct ColumnScale {
  V kappa, replaced, popped, pushed;
};

template <typename V>
ColumnScale<V> column_scale(const Sizes& z, const Step<V>& s, int64_t target, bool has_pop) {
  using T = ScalarOf<V>;
  using Mask = MaskOf<V>;
  const int64_t Q = z.states, S = z.symbols, r = target / S, y = target % S;
  const V replaced_offset = s.right_offset[target], pushed_offset = s.pushed_offset[target];
  const V popped_offset = has_pop ? s.pop_offset[y * Q + r] : V{};
  const Mask has_replaced = s.right_present[target];
  const Mask has_popped = has_pop ? s.pop_present[y * Q + r] : Mask{};
  const auto has_pushed = pushed_offset != NEG<T>;
  ColumnScale<V> scale{has_replaced ? replaced_offset : log_zero<V>(), V{}, V{}, V{}};
  scale.kappa = has_popped ? larger(scale.kappa, popped_offset) : scale.kappa;
  scale.kappa = has_pushed ? larger(scale.kappa, pushed_offset) : scale.kappa;
  if (!any(scale.kappa != NEG<T>)) return scale;
  scale.replaced = has_replaced ? exp_exact(replaced_offset - scale.kappa) : V{};
  scale.popped = has_popped ? exp_exact(popped_offset - scale.kappa) : V{};
  scale.pushed = has_pushed ? exp_exact(pushed_offset - scale.kappa) / s.push_sums[target] : V{};
  return scale;
}

// Step t ≥ 1 of one group: column t of gamma and shares, step t's pops (η rows: P; row m: the
// inverse of the γ rows' total) at offset(t−2), α[t] and the reading r_t (N·m), from columns
// 0 … t−1 and the actions of step t.
template <typename V>
void forward_step(const Sizes& z, int64_t t, const V* step_push, const V* step_replace, const V* step_pop,
                  const V* step_pushed, V* reading, V* gamma, V* shares, V* pops, V* alpha, Step<V>& s,
                  std::vector<V>& weights) {
  using T = ScalarOf<V>;
  const int64_t N = z.configs, Q = z.states, S = z.symbols, m = z.vector;
  const int64_t R = z.rows(t - 1), Rt = z.rows(t), R2 = t >= 2 ? z.rows(t - 2) : 0;
  row_weights(z, alpha, t, weights);  // rows i ≤ t−1 enter with weight α[i]
  products(z, t, shares, weights, alpha, step_push, step_replace, step_pop, s);
  const int64_t saved = t >= 2 ? z.offset(t - 2) : 0;
  V* step_pops = pops + saved;
  s.pop_total.resize(N * R2);  // scratch of every step: stays in cache
  V* pop_total = s.pop_total.data();
  if (t >= 2) {
    pop_weights(z, t, alpha, s);
    pop_forward(z, t, shares, s, pop_total);
  }
  V* column = gamma + z.offset(t);
  V* current_alpha = alpha + t * N;
  const T floor = exp_floor<T>();
  const int64_t eta_end = std::min(m, R2);  // η rows among the pop's rows (all of them for t ≥ 2)
  for (int64_t target = 0; target < N; ++target) {
    const int64_t r = target / S, y = target % S;
    V* out = column + target * Rt;
    const V* replaced_total = s.total.data() + target * R;
    const V* popped_total = pop_total + target * R2;
    V* saved_pop = step_pops + target * R2;
    const V* rho = s.rho.data();
    const V* weight = weights.data();
    const V replaced_offset = s.right_offset[target];
    const V popped_offset = R2 > 0 ? s.pop_offset[y * Q + r] : V{};
    // η rows, in log space. Offsets, ρ and L are finite; a total of 0 marks an empty sum (−∞).
    // Each term is its total's mantissa times exp of its log scale (offsets and the total's
    // exponent), taken relative to the larger scale. An absent term gets mantissa 0 and the
    // other term's scale, so that every value stays finite and the larger scale is a present
    // term's. The terms' weights are taken relative to the largest term for the backward.
#pragma omp simd
    for (int64_t row = 0; row < eta_end; ++row) {
      const V replaced_value = replaced_total[row], popped_value = popped_total[row], row_weight = weight[row];
      V replaced_exponent, popped_exponent;
      const V replaced_mantissa = split_exponent(replaced_value, replaced_exponent);
      const V popped_mantissa = split_exponent(popped_value, popped_exponent);
      const auto has_replaced = replaced_value > 0;
      const auto has_popped = (popped_value > 0) & (row_weight != NEG<T>);
      V replaced_scale = rho[row] + replaced_offset + replaced_exponent * LN2<T>;
      V popped_scale = popped_offset - row_weight + popped_exponent * LN2<T>;  // +∞ where weight is −∞
      popped_scale = has_popped ? popped_scale : replaced_scale;
      replaced_scale = has_replaced ? replaced_scale : popped_scale;
      const V difference = replaced_scale - popped_scale;
      const V smaller_term = exp_flushed(-magnitude(difference), floor);
      const auto replaced_high = difference >= 0;
      const V replaced_present = has_replaced ? replaced_mantissa : V{};
      const V popped_present = has_popped ? popped_mantissa : V{};
      const V replaced_term = replaced_high ? replaced_present : replaced_present * smaller_term;
      const V popped_term = replaced_high ? popped_present * smaller_term : popped_present;
      const V base = replaced_high ? replaced_scale : popped_scale;
      const V sum = replaced_term + popped_term;  // 0, or at least the larger mantissa, 0.5
      const auto present = sum > 0;
      const V log_sum = log_of(present ? sum : splat<V>(1));
      out[row] = present ? base + log_sum : log_zero<V>();
      saved_pop[row] = popped_value;
    }
    // t = 1: the η rows have only the replace term.
#pragma omp simd
    for (int64_t row = R2; row < m; ++row) {
      V exponent;
      const V mantissa = split_exponent(replaced_total[row], exponent);
      const V replaced = log_of(mantissa) + (exponent * LN2<T> + rho[row] + replaced_offset);
      out[row] = replaced_total[row] > 0 ? replaced : log_zero<V>();
    }
    // ⊕ log v_t + log(α[t−1] Δ⁺_t), the m rows in vector lanes.
    const V pushed_offset = s.pushed_offset[target];
#pragma omp simd
    for (int64_t row = 0; row < m; ++row) {
      const V kept = out[row], pushed = step_pushed[row] + pushed_offset;
      const V high = larger(kept, pushed), low = smaller(kept, pushed);
      const V sum = T(1) + exp_flushed(low - high, floor);  // −∞ − −∞ is NaN, flushed to 0
      out[row] = high == NEG<T> ? log_zero<V>() : high + log_of(sum);
    }
    // γ rows, in real space: the terms of log α[t] = log Σ_row α(row) γ[row→t] are
    //   α(row) γ_replace = exp(offset) · 2^e · total = exp(offset) Σ_c Ŝ[row, c] R̂[c, target]
    //   α(row) γ_pop = exp(L[y, r]) · P[row, (r, y)],   α[t−1][a] Δ⁺[a → target] (the push rows),
    // each of the two sums over rows at most 1 (Ŝ sums to 1 over the rows of a column, R̂ and
    // ŵ over theirs), so relative to κ, the largest present offset, no term overflows and
    // their total is at least about 1: the shares Ŝ of column t are the terms over their total,
    // flushed to 0 below the smallest normal number (as the exps of the log-space terms were).
    // log γ of these rows is not kept: every reader takes the shares. A lane without any term
    // (κ = −∞) has factors 0, so its terms, their total and its shares are 0 and log α[t] −∞.
    const ColumnScale<V> scale = column_scale(z, s, target, R2 > 0);
    const V kappa = scale.kappa, replaced_factor = scale.replaced, popped_factor = scale.popped;
    V* share = shares + z.offset(t) + target * Rt;
    if (R2 > m) saved_pop[m] = V{};  // 1 / the column's total, where some lane has one (below)
    if (!any(kappa != NEG<T>)) {
      current_alpha[target] = log_zero<V>();
      std::fill(share, share + Rt, V{});
      continue;
    }
    constexpr T smallest = std::numeric_limits<T>::min();
    const V* unscale = s.row_unscale.data();
#pragma omp simd
    for (int64_t row = m; row < R2; ++row) {
      const V replaced_term = replaced_factor * (unscale[row] * replaced_total[row]);
      const V popped_term = weight[row] != NEG<T> ? popped_factor * popped_total[row] : V{};
      share[row] = replaced_term + popped_term;
    }
#pragma omp simd
    for (int64_t row = std::max(m, R2); row < R; ++row) share[row] = replaced_factor * (unscale[row] * replaced_total[row]);
#pragma omp simd
    for (int64_t a = 0; a < N; ++a) share[R + a] = scale.pushed * s.push_terms[a * N + target];
    const V total = sum_rows(Rt - m, share + m);
    const auto kept = total > 0;
    if (!any(kept)) {
      current_alpha[target] = log_zero<V>();
      std::fill(share, share + Rt, V{});
      continue;
    }
    current_alpha[target] = kept ? kappa + log_of(total) : log_zero<V>();
    const V inverse = T(1) / (kept ? total : splat<V>(1));
    if (R2 > m) saved_pop[m] = kept ? inverse : V{};
#pragma omp simd
    for (int64_t row = m; row < Rt; ++row) {
      const V value = share[row] * inverse;
      share[row] = kept & (value >= smallest) ? value : V{};
    }
    for (int64_t j = 0; j < m; ++j) share[j] = kept ? exp_flushed(out[j] - current_alpha[target], floor) : V{};
  }
  V high = log_zero<V>();
  for (int64_t c = 0; c < N; ++c) high = larger(high, current_alpha[c]);
  const auto some = high != NEG<T>;
  V normalizer = log_zero<V>();
  if (any(some)) {
    V sum{};
    for (int64_t c = 0; c < N; ++c) sum += exp_flushed(current_alpha[c] - high, floor);  // 0 in a lane without any
    normalizer = some ? log_of(sum) + high : log_zero<V>();
  }
  for (int64_t c = 0; c < N; ++c)
    for (int64_t j = 0; j < m; ++j)
      reading[c * m + j] = normalizer == NEG<T> ? V{} : exp_flushed(column[c * Rt + j] - normalizer, floor);
}

template <typename V>
void forward_element(const Sizes& z, const V* push, const V* replace, const V* pop, const V* pushed,
                     const V* bottom, V* readings, V* gamma, V* shares, V* pops, V* alpha) {
  const int64_t N = z.configs, Q = z.states, m = z.vector;
  initialize_element(z, bottom, gamma, shares, alpha);
  Step<V> s;
  std::vector<V> weights;
  for (int64_t t = 1; t <= z.steps; ++t)
    forward_step(z, t, push + (t - 1) * N * N, replace + (t - 1) * N * N, pop + (t - 1) * N * Q,
                 pushed + (t - 1) * m, readings + (t - 1) * N * m, gamma, shares, pops, alpha, s, weights);
}

// Scratch of the backward steps of one group.
template <typename V>
struct BackwardScratch {
  Step<V> step;
  std::vector<V> weights, grad_products, scaled_pop, grad_pushed_offset;
  std::vector<V> eta_popped, eta_popped_kept, eta_pushed, eta_zeros;  // per η row: its ∂/∂(pop total), 1 where kept, its push term's gradient
};

// Step t ≥ 1 of one group in reverse: given ∂r_t and the adjoints of column t and
// α[t] (complete once steps t+1 … n have run), the gradients of step t's actions (added to
// step_grad_*), and the adjoints it passes to columns 0 … t−1 and α[0 … t−1].
template <typename V>
void backward_step(const Sizes& z, int64_t t, const V* grad_reading, const V* step_push, const V* step_replace,
                   const V* step_pop, const V* step_pushed, const V* reading, const V* gamma, const V* shares,
                   const V* pops, const V* alpha, V* grad_gamma, V* grad_alpha, V* step_grad_push,
                   V* step_grad_replace, V* step_grad_pop, V* step_grad_pushed, BackwardScratch<V>& scratch) {
  using T = ScalarOf<V>;
  const int64_t N = z.configs, Q = z.states, S = z.symbols, m = z.vector, J = N + Q;
  Step<V>& s = scratch.step;
  std::vector<V>& weights = scratch.weights;
  std::vector<V>& grad_products = scratch.grad_products;
  std::vector<V>& scaled_pop = scratch.scaled_pop;
  std::vector<V>& grad_pushed_offset = scratch.grad_pushed_offset;
  row_weights(z, alpha, t, weights);
  grad_pushed_offset.resize(N);
  scratch.eta_popped.resize(m);
  scratch.eta_zeros.assign(m, V{});
  scratch.eta_popped_kept.resize(m);
  scratch.eta_pushed.resize(m);
  const int64_t R = z.rows(t - 1), Rt = z.rows(t), R2 = t >= 2 ? z.rows(t - 2) : 0;
  const V* column = gamma + z.offset(t);
  V* grad_column = grad_gamma + z.offset(t);
  const V* current_alpha = alpha + t * N;
  V* grad_current_alpha = grad_alpha + t * N;
  const T floor = exp_floor<T>();
  // Readings: r = exp(log η − log Z); a lane without any configuration has readings 0.
  {
    V high = log_zero<V>();
    for (int64_t c = 0; c < N; ++c) high = larger(high, current_alpha[c]);
    const auto some = high != NEG<T>;
    if (any(some)) {
      V sum{};
      for (int64_t c = 0; c < N; ++c) sum += exp_flushed(current_alpha[c] - high, floor);
      V grad_normalizer{};
      for (int64_t c = 0; c < N; ++c)
        for (int64_t j = 0; j < m; ++j) {
          V g = grad_reading[c * m + j] * reading[c * m + j];
          grad_column[c * Rt + j] += g;
          grad_normalizer -= g;
        }
      for (int64_t c = 0; c < N; ++c)
        grad_current_alpha[c] += some ? grad_normalizer * (exp_flushed(current_alpha[c] - high, floor) / sum) : V{};
    }
  }
  // log α[t] = log-sum over γ rows of log α(row) + γ; each term's weight is its share Ŝ,
  // computed in the forward relative to the largest term (as autograd through a shifted
  // log-sum-exp does), never as exp(term − log α[t]): log α[t] is rounded at its magnitude,
  // which reaches thousands.
  for (int64_t target = 0; target < N; ++target) {
    V g = grad_current_alpha[target];
    if (!any(g != 0)) continue;
    V* out = grad_column + target * Rt;
    const V* share = shares + z.offset(t) + target * Rt;
    V* grad_rows = grad_alpha - N;  // row (i, a) at m + (i+1)·N + a -> α[i][a], i ≥ 0
#pragma omp simd
    for (int64_t row = m + N; row < Rt; ++row) {
      V value = g * share[row];
      out[row] += value;
      grad_rows[row - m] += value;
    }
    for (int64_t row = m; row < m + N; ++row) out[row] += g * share[row];
  }
  products(z, t, shares, weights, alpha, step_push, step_replace, step_pop, s);
  if (t >= 2) pop_weights(z, t, alpha, s);
  const int64_t saved = t >= 2 ? z.offset(t - 2) : 0;
  const V* step_pops = pops + saved;
  // The target loop below writes every row of the replace columns and of scaled_pop; the pop
  // columns get pop_backward's sums at their γ rows only.
  grad_products.resize(J * R);
  std::fill(grad_products.begin() + N * R, grad_products.end(), V{});
  scaled_pop.resize(N * R2);
  std::fill(grad_pushed_offset.begin(), grad_pushed_offset.end(), V{});
  for (int64_t target = 0; target < N; ++target) {
    const int64_t r = target / S, y = target % S;
    const V* values = column + target * Rt;
    const V* grads = grad_column + target * Rt;
    for (int64_t a = 0; a < N; ++a) step_grad_push[a * N + target] += grads[R + a];
    const V* replaced_total = s.total.data() + target * R;
    const V* saved_pop = step_pops + target * R2;
    V* grad_replaced = grad_products.data() + target * R;
    V* scaled = scaled_pop.data() + target * R2;
    // The γ rows with a pop term: the adjoint of each term's real total is g · (its factor)/(the
    // row's sum relative to κ), times 2^e for the replace total (see forward_step). Every
    // gradient g of such a row is its share Ŝ_t times a factor (α[t]'s log-sum-exp, the pops and
    // products of later steps all pass Ŝ_t ⊙ …), and Ŝ_t = sum / total: g / sum = (g / Ŝ_t) / total,
    // 0 where Ŝ_t was flushed. A term whose total is 0 gets 0 (the pop's: 0 where α(row) is 0;
    // where P is 0 every product Ŝ ŵ that pop_backward multiplies it by is 0).
    const ColumnScale<V> factors = column_scale(z, s, target, R2 > 0);
    const V* unscale = s.row_unscale.data();
    const V* weight = weights.data();
    const V* share = shares + z.offset(t) + target * Rt;
    const V inverse_total = R2 > m ? saved_pop[m] : V{};
#pragma omp simd
    for (int64_t row = m; row < R2; ++row) {
      const V quotient = grads[row] / share[row];
      const V per_sum = share[row] > 0 ? quotient * inverse_total : V{};
      grad_replaced[row] = replaced_total[row] > 0 ? per_sum * (factors.replaced * unscale[row]) : V{};
      scaled[row] = weight[row] != NEG<T> ? per_sum * factors.popped : V{};
    }
    // The other rows pass g to the log of their replace total (divided by the total below).
#pragma omp simd
    for (int64_t row = std::max(m, R2); row < R; ++row) grad_replaced[row] = replaced_total[row] > 0 ? grads[row] : V{};
    // η rows, with the push of v_t as a third term, in log space, the m rows at once (vector
    // lanes, where each row took two scalar logs and three exps). A row whose gradient is 0,
    // whose value is −∞ or whose terms are all −∞ passes 0. R2 > 0 (t ≥ 2) puts every η row
    // among the pop's rows.
    const V popped_offset = R2 > 0 ? s.pop_offset[y * Q + r] : V{};
    V* popped_grads = scratch.eta_popped.data();
    V* popped_kept = scratch.eta_popped_kept.data();
    const V* popped_or_zero = R2 > 0 ? saved_pop : scratch.eta_zeros.data();  // t = 1: no pop
    const V *row_weights = weights.data(), *rho = s.rho.data();
    const V replaced_offset = s.right_offset[target], pushed_offset = s.pushed_offset[target];
    V* pushed_grads = scratch.eta_pushed.data();
#pragma omp simd
    for (int64_t row = 0; row < m; ++row) {
      const V g = grads[row], value = values[row], replaced_value = replaced_total[row], row_weight = row_weights[row];
      const V popped_value = popped_or_zero[row];
      const auto has_replaced = replaced_value > 0, has_popped = (popped_value > 0) & (row_weight != NEG<T>);
      const V replaced_log = log_of(has_replaced ? replaced_value : splat<V>(1)) + rho[row] + replaced_offset;
      const V popped_log = log_of(has_popped ? popped_value : splat<V>(1)) + popped_offset - row_weight;
      const V replaced = has_replaced ? replaced_log : log_zero<V>(), popped = has_popped ? popped_log : log_zero<V>();
      const V term = step_pushed[row] + pushed_offset;
      const V high = larger(replaced, larger(popped, term));
      const auto used = (g != 0) & (value != NEG<T>) & (high != NEG<T>);  // & : every operand is loaded
      const V base = used ? high : V{};
      const V replaced_term = exp_flushed(replaced - base, floor), popped_term = exp_flushed(popped - base, floor);
      const V term_share = exp_flushed(term - base, floor);
      const V scale = g / (used ? replaced_term + popped_term + term_share : splat<V>(1));
      grad_replaced[row] = used ? scale * replaced_term : V{};
      popped_kept[row] = used & has_popped ? splat<V>(1) : V{};
      popped_grads[row] = scale * popped_term / popped_value;
      pushed_grads[row] = used & (term != NEG<T>) ? scale * term_share : V{};
    }
    for (int64_t row = 0; row < m; ++row) {
      if (R2 > 0) scaled[row] = popped_kept[row] > 0 ? popped_grads[row] : V{};
      step_grad_pushed[row] += pushed_grads[row];
      grad_pushed_offset[target] += pushed_grads[row];
    }
  }
  // log(α[t−1] Δ⁺_t): each term's share of its sum, from the products' terms.
  for (int64_t target = 0; target < N; ++target) {
    const V g = grad_pushed_offset[target];
    grad_pushed_offset[target] =
        (g != 0) & (s.pushed_offset[target] != NEG<T>) ? g / s.push_sums[target] : V{};
  }
  for (int64_t c = 0; c < N; ++c) {
    const V* terms = s.push_terms.data() + c * N;
    V* out = step_grad_push + c * N;
    V total{};
    for (int64_t target = 0; target < N; ++target) {
      const V value = grad_pushed_offset[target] * terms[target];
      out[target] += value;
      total += value;
    }
    grad_alpha[(t - 1) * N + c] += total;
  }
  if (t >= 2) pop_backward(z, t, shares, scaled_pop.data(), s, grad_gamma, grad_products.data());
  // The products over column t−1: ∂Ĝ = (g/total) R̂ᵀ, ∂R̂ = Ĝᵀ (g/total). The γ rows m … R2 − 1
  // of the replace columns hold g/total already; the pop columns are 0 above row m + N.
  V* grad_previous = grad_gamma + z.offset(t - 1);
  const auto divide = [&](int64_t j, int64_t begin, int64_t end) {
    V* __restrict g = grad_products.data() + j * R;
    const V* __restrict total = s.total.data() + j * R;
#pragma omp simd
    for (int64_t row = begin; row < end; ++row) {
      const V quotient = g[row] / total[row];
      g[row] = total[row] > 0 ? quotient : V{};
    }
  };
  for (int64_t j = 0; j < N; ++j) {
    divide(j, 0, m);
    divide(j, std::max(m, R2), R);
  }
  for (int64_t j = N; j < J; ++j) divide(j, m + N, R);
  for (int64_t c = 0; c < N; ++c) {
    s.terms.reset(J);
    for (int64_t j = 0; j < J; ++j) s.terms.add(s.rhat[c * J + j], grad_products.data() + j * R, j);
    s.dots.resize(s.terms.size());
    product_adjoint(R, s.ghat.data() + c * R, s.terms, s.dots.data(), grad_previous + c * R);
    for (int64_t i = 0; i < s.terms.size(); ++i) {
      const int64_t j = s.terms.indices[i];
      const V value = s.terms.weights[i] * s.dots[i];
      if (j < N)
        step_grad_replace[c * N + j] += value;
      else
        step_grad_pop[c * Q + j - N] += value;
    }
  }
}

template <typename V>
void backward_element(const Sizes& z, const V* grad_readings, const V* push, const V* replace, const V* pop,
                      const V* pushed, const V* readings, const V* gamma, const V* shares, const V* pops,
                      const V* alpha, V* grad_push, V* grad_replace, V* grad_pop, V* grad_pushed, V* grad_bottom) {
  const int64_t N = z.configs, Q = z.states, m = z.vector, n = z.steps;
  std::vector<V> grad_gamma(z.table(), V{}), grad_alpha((n + 1) * N, V{});
  BackwardScratch<V> scratch;
  for (int64_t t = n; t >= 1; --t) {
    const int64_t NN = (t - 1) * N * N, NQ = (t - 1) * N * Q, Nm = (t - 1) * N * m;
    backward_step(z, t, grad_readings + Nm, push + NN, replace + NN, pop + NQ, pushed + (t - 1) * m, readings + Nm,
                  gamma, shares, pops, alpha, grad_gamma.data(), grad_alpha.data(), grad_push + NN,
                  grad_replace + NN, grad_pop + NQ, grad_pushed + (t - 1) * m, scratch);
  }
  // Column 0: only the η rows at (q0, ⊥) depend on an input, log v₀.
  for (int64_t j = 0; j < m; ++j) grad_bottom[j] = grad_gamma[j];
}

void check(const at::Tensor& tensor, int64_t dims, const char* name) {
  TORCH_CHECK(tensor.device().is_cpu(), name, " must be on the CPU");
  TORCH_CHECK(tensor.dim() == dims, name, " must have ", dims, " dimensions");
  TORCH_CHECK(tensor.is_contiguous(), name, " must be contiguous");
}

// The sizes of the whole-sequence ops' logits (B, n, N·(2N + Q) + m), m = `vector`.
Sizes sizes_of(const at::Tensor& logits, int64_t vector, int64_t states, int64_t symbols) {
  check(logits, 3, "logits");
  Sizes z;
  z.batch = logits.size(0);
  z.steps = logits.size(1);
  z.states = states;
  z.symbols = symbols;
  z.configs = states * symbols;
  z.vector = vector;
  TORCH_CHECK(states > 0 && symbols > 0 && logits.size(2) == z.configs * (2 * z.configs + states) + vector,
              "logits must be (B, n, N·(2N + Q) + m) with N = Q·S configurations");
  return z;
}

// The whole-sequence ops' groups: elements g·LANE_COUNT … of the batch, one per lane.
int64_t group_count(int64_t batch) { return (batch + LANE_COUNT - 1) / LANE_COUNT; }

// Rows first, first + 1, … (one per lane) of a (B, size) tensor's data `from`, as `size`
// positions of lanes; a lane past the batch holds 0 (a log weight of 1, harmless; its results
// are dropped).
template <typename T>
std::vector<Lane<T>> gather(const T* from, int64_t batch, int64_t size, int64_t first) {
  const int64_t count = std::min(LANE_COUNT, batch - first);
  const T* rows[LANE_COUNT];
  for (int64_t lane = 0; lane < count; ++lane) rows[lane] = from + (first + lane) * size;
  std::vector<Lane<T>> lanes(size);
  // Position by position: each vector is written whole, once.
  for (int64_t position = 0; position < size; ++position) {
    Lane<T> values{};
    for (int64_t lane = 0; lane < count; ++lane) values[lane] = rows[lane][position];
    lanes[position] = values;
  }
  return lanes;
}

// The inverse of gather: the lanes of the batch's rows first, first + 1, … into `to`.
template <typename T>
void scatter(const std::vector<Lane<T>>& lanes, int64_t batch, int64_t size, int64_t first, T* to) {
  const int64_t count = std::min(LANE_COUNT, batch - first);
  T* rows[LANE_COUNT];
  for (int64_t lane = 0; lane < count; ++lane) rows[lane] = to + (first + lane) * size;
  for (int64_t position = 0; position < size; ++position) {
    const Lane<T> values = lanes[position];
    for (int64_t lane = 0; lane < count; ++lane) rows[lane][position] = values[lane];
  }
}

// Group g's part of a table of lanes, (groups, size, LANE_COUNT) (or (groups, …, LANE_COUNT)).
template <typename T>
Lane<T>* lanes_of(const at::Tensor& table, int64_t g) {
  const int64_t size = table.numel() / std::max<int64_t>(table.size(0), 1) / LANE_COUNT;
  return reinterpret_cast<Lane<T>*>(table.data_ptr<T>()) + g * size;
}

// log σ(x) = min(x, 0) − log(1 + exp(−|x|)) (= −softplus(−x), as torch.nn.functional.logsigmoid
// computes it), lane by lane; log(1 + z) with Goldberg's correction, log(u)·z/(u − 1) for
// u = 1 + z rounded, within a few ulp of log1p (z itself where u rounds to 1).
template <typename V>
inline V log_sigmoid_of(V x) {
  using T = ScalarOf<V>;
  const V z = exp_exact(-magnitude(x));
  const V u = T(1) + z, d = u - T(1);
  const V log1p = d == 0 ? z : log_of(u) * (z / d);
  return smaller(x, V{}) - log1p;
}

// σ(−x) = d log σ(x) / dx, lane by lane.
template <typename V>
inline V sigmoid_of_negative(V x) {
  using T = ScalarOf<V>;
  const V z = exp_exact(-magnitude(x));
  return (x < 0 ? splat<V>(1) : z) / (T(1) + z);
}

// One group's actions of `steps` steps, each kind contiguous and in lanes: push, replace
// (steps, N, N), pop (steps, N, Q), pushed (steps, m). Every op reads them from packed logits:
// element b's step s is the row at b·batch_stride + s·step_stride, N·(2N + Q) logits, per
// configuration c its N push, N replace and Q pop log weights (``NondeterministicActions.from_logits``),
// the layout the controllers' linear layers give (no copy); the pushed vector's part, log v_t or
// x_t with log v_t = log σ(x_t), may follow in the same row. A lane past the batch holds 0, as
// gather pads.
template <typename T>
struct Transitions {
  std::vector<Lane<T>> push, replace, pop, pushed;

  // visit(lanes, step, position in the step's row) for every transition of every step.
  template <typename Visit>
  void each(const Sizes& z, int64_t steps, Visit visit) {
    const int64_t N = z.configs, Q = z.states, width = 2 * N + Q;
    for (int64_t s = 0; s < steps; ++s)
      for (int64_t c = 0; c < N; ++c) {
        const int64_t row = c * width, at = s * N + c;
        for (int64_t j = 0; j < N; ++j) visit(push[at * N + j], s, row + j);
        for (int64_t j = 0; j < N; ++j) visit(replace[at * N + j], s, row + N + j);
        for (int64_t k = 0; k < Q; ++k) visit(pop[at * Q + k], s, row + 2 * N + k);
      }
  }

  void resize(const Sizes& z, int64_t steps) {
    push.resize(steps * z.configs * z.configs);
    replace.resize(steps * z.configs * z.configs);
    pop.resize(steps * z.configs * z.states);
    pushed.resize(steps * z.vector);
  }

  // The transitions of elements first, first + 1, … from `logits`, and log v_t from `pushed_from`
  // (element b's step s at b·pushed_stride + s·step_stride), as log σ of what is there where
  // `log_sigmoid`.
  void gather(const Sizes& z, const T* logits, const T* pushed_from, int64_t batch_stride, int64_t pushed_stride,
              int64_t step_stride, int64_t steps, int64_t first, bool log_sigmoid) {
    const int64_t count = std::min(LANE_COUNT, z.batch - first);
    resize(z, steps);
    const T* rows[LANE_COUNT];
    for (int64_t lane = 0; lane < count; ++lane) rows[lane] = logits + (first + lane) * batch_stride;
    each(z, steps, [&](Lane<T>& lanes, int64_t s, int64_t position) {
      Lane<T> values{};
      for (int64_t lane = 0; lane < count; ++lane) values[lane] = rows[lane][s * step_stride + position];
      lanes = values;
    });
    for (int64_t s = 0; s < steps; ++s)
      for (int64_t j = 0; j < z.vector; ++j) {
        const Lane<T> values = pushed_lanes(z, pushed_from, pushed_stride, s * step_stride + j, first);
        pushed[s * z.vector + j] = log_sigmoid ? log_sigmoid_of(values) : values;
      }
  }

  // The lanes of position `position` of elements first, first + 1, … (element b's at b·stride).
  static Lane<T> pushed_lanes(const Sizes& z, const T* from, int64_t stride, int64_t position, int64_t first) {
    const int64_t count = std::min(LANE_COUNT, z.batch - first);
    Lane<T> values{};
    for (int64_t lane = 0; lane < count; ++lane) values[lane] = from[(first + lane) * stride + position];
    return values;
  }

  // Zeros of the same sizes, for the gradients.
  void zero(const Sizes& z, int64_t steps) {
    push.assign(steps * z.configs * z.configs, Lane<T>{});
    replace.assign(steps * z.configs * z.configs, Lane<T>{});
    pop.assign(steps * z.configs * z.states, Lane<T>{});
    pushed.assign(steps * z.vector, Lane<T>{});
  }

  // The inverse of gather, for gradients (of the log weights) into rows of the same layout:
  // the pushed part's gradient is that of log v_t, times σ(−x_t) where `log_sigmoid`, x_t read
  // from `pushed_from` (the logits gather read).
  void scatter(const Sizes& z, T* logits, T* pushed_to, const T* pushed_from, int64_t batch_stride,
               int64_t pushed_stride, int64_t step_stride, int64_t steps, int64_t first, bool log_sigmoid) {
    const int64_t count = std::min(LANE_COUNT, z.batch - first);
    T* rows[LANE_COUNT];
    for (int64_t lane = 0; lane < count; ++lane) rows[lane] = logits + (first + lane) * batch_stride;
    each(z, steps, [&](Lane<T>& lanes, int64_t s, int64_t position) {
      const Lane<T> values = lanes;
      for (int64_t lane = 0; lane < count; ++lane) rows[lane][s * step_stride + position] = values[lane];
    });
    for (int64_t lane = 0; lane < count; ++lane) rows[lane] = pushed_to + (first + lane) * pushed_stride;
    for (int64_t s = 0; s < steps; ++s)
      for (int64_t j = 0; j < z.vector; ++j) {
        const int64_t position = s * step_stride + j;
        Lane<T> values = pushed[s * z.vector + j];
        if (log_sigmoid) values *= sigmoid_of_negative(pushed_lanes(z, pushed_from, pushed_stride, position, first));
        for (int64_t lane = 0; lane < count; ++lane) rows[lane][position] = values[lane];
      }
  }
};

// logits (B, n, N·(2N + Q) + m), contiguous: per step the transitions' log weights in the
// layout of Transitions, then the pushed vector's part, log v_t, or x_t with log v_t = log σ(x_t)
// where `log_sigmoid`; bottom (B, m): log v₀. Returns readings (B, n, N·m) and what the backward
// needs, in lanes: gamma, shares, pops (G, table, LANE_COUNT), alpha (G, n+1, N, LANE_COUNT), for
// G = ⌈B / LANE_COUNT⌉ groups.
std::vector<at::Tensor> dvpda_forward(const at::Tensor& logits, const at::Tensor& bottom, int64_t states,
                                      int64_t symbols, bool log_sigmoid) {
  check(bottom, 2, "bottom");
  TORCH_CHECK(bottom.scalar_type() == logits.scalar_type(), "the dVPDA kernel needs one dtype for every input");
  const Sizes z = sizes_of(logits, bottom.size(1), states, symbols);
  TORCH_CHECK(bottom.size(0) == z.batch, "bottom must be (B, m)");
  const int64_t groups = group_count(z.batch);
  auto options = logits.options();
  auto readings = at::empty({z.batch, z.steps, z.configs * z.vector}, options);
  auto gamma = at::empty({groups, z.table(), LANE_COUNT}, options);
  auto shares = at::empty({groups, z.table(), LANE_COUNT}, options);
  auto pops = at::empty({groups, z.table(), LANE_COUNT}, options);
  auto alpha = at::empty({groups, z.steps + 1, z.configs, LANE_COUNT}, options);
  AT_DISPATCH_FLOATING_TYPES(logits.scalar_type(), "dvpda_forward", [&] {
    using V = Lane<scalar_t>;
    const int64_t width = logits.size(2), readings_size = z.steps * z.configs * z.vector;
    const scalar_t* from = logits.data_ptr<scalar_t>();
    const scalar_t* pushed_from = from + width - z.vector;
    at::parallel_for(0, groups, 1, [&](int64_t begin, int64_t end) {
      Transitions<scalar_t> transitions;
      for (int64_t g = begin; g < end; ++g) {
        const int64_t first = g * LANE_COUNT;
        transitions.gather(z, from, pushed_from, z.steps * width, z.steps * width, width, z.steps, first, log_sigmoid);
        const auto bottom_lanes = gather(bottom.data_ptr<scalar_t>(), z.batch, z.vector, first);
        std::vector<V> reading_lanes(readings_size);
        forward_element<V>(z, transitions.push.data(), transitions.replace.data(), transitions.pop.data(),
                           transitions.pushed.data(), bottom_lanes.data(), reading_lanes.data(),
                           lanes_of<scalar_t>(gamma, g), lanes_of<scalar_t>(shares, g), lanes_of<scalar_t>(pops, g),
                           lanes_of<scalar_t>(alpha, g));
        scatter(reading_lanes, z.batch, readings_size, first, readings.data_ptr<scalar_t>());
      }
    });
  });
  return {readings, gamma, shares, pops, alpha};
}

// The gradients of the forward's logits (B, n, N·(2N + Q) + m; the pushed part's that of x_t
// where `log_sigmoid`) and of bottom (B, m), given those of the readings.
std::vector<at::Tensor> dvpda_backward(const at::Tensor& grad_readings, const at::Tensor& logits,
                                       const at::Tensor& readings, const at::Tensor& gamma, const at::Tensor& shares,
                                       const at::Tensor& pops, const at::Tensor& alpha, int64_t states,
                                       int64_t symbols, bool log_sigmoid) {
  check(grad_readings, 3, "grad_readings");
  check(readings, 3, "readings");
  const int64_t configs = states * symbols;
  TORCH_CHECK(configs > 0 && readings.size(2) % configs == 0, "readings must be (B, n, N·m)");
  const Sizes z = sizes_of(logits, readings.size(2) / configs, states, symbols);
  TORCH_CHECK(grad_readings.sizes() == readings.sizes(), "grad_readings must be the readings' shape");
  const int64_t groups = group_count(z.batch);
  for (const at::Tensor* table : {&gamma, &shares, &pops})
    TORCH_CHECK(table->dim() == 3 && table->size(0) == groups && table->size(1) == z.table() &&
                    table->size(2) == LANE_COUNT && table->is_contiguous(),
                "the tables must be the forward's");
  auto grad_logits = at::empty(logits.sizes(), logits.options());
  auto grad_bottom = at::empty({z.batch, z.vector}, logits.options());
  AT_DISPATCH_FLOATING_TYPES(logits.scalar_type(), "dvpda_backward", [&] {
    using V = Lane<scalar_t>;
    const int64_t width = logits.size(2), readings_size = z.steps * z.configs * z.vector;
    const scalar_t* from = logits.data_ptr<scalar_t>();
    const scalar_t* pushed_from = from + width - z.vector;
    scalar_t* to = grad_logits.data_ptr<scalar_t>();
    at::parallel_for(0, groups, 1, [&](int64_t begin, int64_t end) {
      Transitions<scalar_t> transitions, grads;
      for (int64_t g = begin; g < end; ++g) {
        const int64_t first = g * LANE_COUNT;
        transitions.gather(z, from, pushed_from, z.steps * width, z.steps * width, width, z.steps, first, log_sigmoid);
        const auto grad_reading_lanes = gather(grad_readings.data_ptr<scalar_t>(), z.batch, readings_size, first);
        const auto reading_lanes = gather(readings.data_ptr<scalar_t>(), z.batch, readings_size, first);
        grads.zero(z, z.steps);
        std::vector<V> grad_bottom_lanes(z.vector, V{});
        backward_element<V>(z, grad_reading_lanes.data(), transitions.push.data(), transitions.replace.data(),
                            transitions.pop.data(), transitions.pushed.data(), reading_lanes.data(),
                            lanes_of<scalar_t>(gamma, g), lanes_of<scalar_t>(shares, g), lanes_of<scalar_t>(pops, g),
                            lanes_of<scalar_t>(alpha, g), grads.push.data(), grads.replace.data(), grads.pop.data(),
                            grads.pushed.data(), grad_bottom_lanes.data());
        grads.scatter(z, to, to + width - z.vector, pushed_from, z.steps * width, z.steps * width, width, z.steps,
                      first, log_sigmoid);
        scatter(grad_bottom_lanes, z.batch, z.vector, first, grad_bottom.data_ptr<scalar_t>());
      }
    });
  });
  return {grad_logits, grad_bottom};
}

// The same DP one step per call, for a controller that computes the actions of step t from
// the reading of step t − 1 (a stack RNN). The tables of capacity n, in lanes as the
// whole-sequence forward's (gamma, shares, pops: (G, table,
// LANE_COUNT), alpha: (G, n + 1, N, LANE_COUNT), G = ⌈B / LANE_COUNT⌉), are filled one column
// per call; the backward of step t adds into the adjoint tables grad_gamma and grad_alpha (the
// same shapes) and must run after those of steps t + 1 … n. A step's transitions come as the
// controller's logits (B, N·(2N + Q)), per configuration c the N push, N replace and Q pop
// logits of c (``NondeterministicActions.from_logits``), rows of any stride: the (B, N·(2N + Q))
// columns of the controller's output need no copy, and their gradient is one tensor. Each call
// moves only its step's logits, v_t and reading in and out of lanes.
Sizes step_sizes(const at::Tensor& logits, const at::Tensor& pushed, const at::Tensor& alpha, int64_t t) {
  Sizes z;
  z.batch = logits.size(0);
  TORCH_CHECK(alpha.dim() == 4 && alpha.size(0) == group_count(z.batch) && alpha.size(3) == LANE_COUNT &&
                  alpha.is_contiguous(),
              "alpha must be (⌈B / ", LANE_COUNT, "⌉, n + 1, N, ", LANE_COUNT, ")");
  z.configs = alpha.size(2);
  z.vector = pushed.size(1);
  z.steps = alpha.size(1) - 1;
  const int64_t per_configuration = z.configs > 0 ? logits.size(1) / z.configs : 0;
  z.states = per_configuration - 2 * z.configs;
  TORCH_CHECK(z.configs > 0 && logits.size(1) == z.configs * per_configuration && z.states > 0 &&
                  z.configs % z.states == 0,
              "logits must be (B, N·(2N + Q)) with N = Q·S configurations");
  z.symbols = z.configs / z.states;
  TORCH_CHECK(t >= 1 && t <= z.steps, "step ", t, " is outside the tables' capacity of ", z.steps, " steps");
  return z;
}

void check_logits(const at::Tensor& logits) {
  TORCH_CHECK(logits.device().is_cpu(), "logits must be on the CPU");
  TORCH_CHECK(logits.dim() == 2, "logits must have 2 dimensions");
  TORCH_CHECK(logits.stride(1) == 1, "logits must be contiguous within a row");
}

void check_tables(const Sizes& z, std::initializer_list<const at::Tensor*> tables) {
  for (const at::Tensor* table : tables)
    TORCH_CHECK(table->dim() == 3 && table->size(0) == group_count(z.batch) && table->size(1) == z.table() &&
                    table->size(2) == LANE_COUNT && table->is_contiguous(),
                "the tables must be (⌈B / ", LANE_COUNT, "⌉, table, ", LANE_COUNT, ") for ", z.steps, " steps");
}

// Column 0 of tables for `capacity` steps, from log v₀ (B, m): gamma, shares, pops,
// alpha, in lanes.
std::vector<at::Tensor> dvpda_start(const at::Tensor& bottom, int64_t capacity, int64_t states, int64_t symbols) {
  check(bottom, 2, "bottom");
  Sizes z;
  z.batch = bottom.size(0);
  z.states = states;
  z.symbols = symbols;
  z.configs = states * symbols;
  z.vector = bottom.size(1);
  z.steps = capacity;
  const int64_t groups = group_count(z.batch);
  auto options = bottom.options();
  std::vector<at::Tensor> tables;
  for (int64_t i = 0; i < 3; ++i) tables.push_back(at::empty({groups, z.table(), LANE_COUNT}, options));
  tables.push_back(at::empty({groups, z.steps + 1, z.configs, LANE_COUNT}, options));
  AT_DISPATCH_FLOATING_TYPES(bottom.scalar_type(), "dvpda_start", [&] {
    at::parallel_for(0, groups, 1, [&](int64_t begin, int64_t end) {
      for (int64_t g = begin; g < end; ++g) {
        const auto bottom_lanes = gather(bottom.data_ptr<scalar_t>(), z.batch, z.vector, g * LANE_COUNT);
        initialize_element<Lane<scalar_t>>(z, bottom_lanes.data(), lanes_of<scalar_t>(tables[0], g),
                                           lanes_of<scalar_t>(tables[1], g), lanes_of<scalar_t>(tables[3], g));
      }
    });
  });
  return tables;
}

// The group that a step call visits i-th of [begin, end). A call walks its groups once, each
// one's tables (about 8 MB at n = 32) in turn, so the next call finds in cache only the last
// one's: successive calls walk in alternating directions, each starting where the one before it
// ended (forward steps ascending for odd t; a step's backward opposite to its forward, which at
// t = n runs just before it).
int64_t visited(bool ascending, int64_t begin, int64_t end, int64_t i) { return ascending ? i : begin + end - 1 - i; }

// Step t: logits (B, N·(2N + Q)) and pushed (B, m) log weights; writes column t into the
// tables and returns r_t (B, N·m).
at::Tensor dvpda_step(int64_t t, const at::Tensor& logits, const at::Tensor& pushed, at::Tensor gamma,
                      at::Tensor shares, at::Tensor pops,
                      at::Tensor alpha) {
  check_logits(logits);
  check(pushed, 2, "pushed");
  for (const at::Tensor& tensor : {pushed, gamma, shares, pops, alpha})
    TORCH_CHECK(tensor.scalar_type() == logits.scalar_type(), "the dVPDA kernel needs one dtype for every input");
  const Sizes z = step_sizes(logits, pushed, alpha, t);
  check_tables(z, {&gamma, &shares, &pops});
  auto reading = at::empty({z.batch, z.configs * z.vector}, logits.options());
  AT_DISPATCH_FLOATING_TYPES(logits.scalar_type(), "dvpda_step", [&] {
    using V = Lane<scalar_t>;
    const int64_t row_stride = logits.stride(0), Nm = z.configs * z.vector;
    at::parallel_for(0, group_count(z.batch), 1, [&](int64_t begin, int64_t end) {
      Step<V> s;
      Transitions<scalar_t> transitions;
      std::vector<V> weights, reading_lanes(Nm);
      for (int64_t i = begin; i < end; ++i) {
        const int64_t g = visited(t % 2 == 1, begin, end, i), first = g * LANE_COUNT;
        transitions.gather(z, logits.data_ptr<scalar_t>(), pushed.data_ptr<scalar_t>(), row_stride, z.vector, 0, 1,
                           first, false);
        forward_step<V>(z, t, transitions.push.data(), transitions.replace.data(), transitions.pop.data(),
                        transitions.pushed.data(), reading_lanes.data(), lanes_of<scalar_t>(gamma, g),
                        lanes_of<scalar_t>(shares, g), lanes_of<scalar_t>(pops, g),
                        lanes_of<scalar_t>(alpha, g), s, weights);
        scatter(reading_lanes, z.batch, Nm, first, reading.data_ptr<scalar_t>());
      }
    });
  });
  return reading;
}

// The backward of step t: the gradients of its logits (B, N·(2N + Q), contiguous) and pushed
// given ∂r_t (B, N·m); adds what it passes to earlier columns into grad_gamma and grad_alpha.
std::vector<at::Tensor> dvpda_step_backward(int64_t t, const at::Tensor& grad_reading, const at::Tensor& logits,
                                            const at::Tensor& pushed, const at::Tensor& reading,
                                            const at::Tensor& gamma, const at::Tensor& shares, const at::Tensor& pops,
                                            const at::Tensor& alpha, at::Tensor grad_gamma, at::Tensor grad_alpha) {
  check(grad_reading, 2, "grad_reading");
  check(reading, 2, "reading");
  check(pushed, 2, "pushed");
  check_logits(logits);
  const Sizes z = step_sizes(logits, pushed, alpha, t);
  check_tables(z, {&gamma, &shares, &pops, &grad_gamma});
  TORCH_CHECK(grad_alpha.sizes() == alpha.sizes() && grad_alpha.is_contiguous(), "grad_alpha must be alpha's shape");
  auto grad_logits = at::empty({z.batch, logits.size(1)}, logits.options());
  auto grad_pushed = at::empty({z.batch, z.vector}, pushed.options());
  AT_DISPATCH_FLOATING_TYPES(logits.scalar_type(), "dvpda_step_backward", [&] {
    using V = Lane<scalar_t>;
    const int64_t Nm = z.configs * z.vector, row_stride = logits.stride(0);
    at::parallel_for(0, group_count(z.batch), 1, [&](int64_t begin, int64_t end) {
      BackwardScratch<V> scratch;
      Transitions<scalar_t> transitions, grads;
      for (int64_t i = begin; i < end; ++i) {
        const int64_t g = visited(t % 2 == 0, begin, end, i), first = g * LANE_COUNT;
        transitions.gather(z, logits.data_ptr<scalar_t>(), pushed.data_ptr<scalar_t>(), row_stride, z.vector, 0, 1,
                           first, false);
        const auto grad_reading_lanes = gather(grad_reading.data_ptr<scalar_t>(), z.batch, Nm, first);
        const auto reading_lanes = gather(reading.data_ptr<scalar_t>(), z.batch, Nm, first);
        grads.zero(z, 1);
        backward_step<V>(z, t, grad_reading_lanes.data(), transitions.push.data(), transitions.replace.data(),
                         transitions.pop.data(), transitions.pushed.data(), reading_lanes.data(),
                         lanes_of<scalar_t>(gamma, g), lanes_of<scalar_t>(shares, g),
                         lanes_of<scalar_t>(pops, g), lanes_of<scalar_t>(alpha, g),
                         lanes_of<scalar_t>(grad_gamma, g), lanes_of<scalar_t>(grad_alpha, g), grads.push.data(),
                         grads.replace.data(), grads.pop.data(), grads.pushed.data(), scratch);
        grads.scatter(z, grad_logits.data_ptr<scalar_t>(), grad_pushed.data_ptr<scalar_t>(),
                      pushed.data_ptr<scalar_t>(), logits.size(1), z.vector, 0, 1, first, false);
      }
    });
  });
  return {grad_logits, grad_pushed};
}

}  // namespace

// Explicit schemas, the tables each op writes into marked ``Tensor(a!)``, and the kernels registered
// for the CPU: registered without a dispatch key, an op is composite, and tracing (torch.compile,
// functionalization, dispatch modes) would step into it and see neither the op nor its writes.
TORCH_LIBRARY(stacklm_dvpda, library) {
  library.def("forward(Tensor logits, Tensor bottom, int states, int symbols, bool log_sigmoid) -> Tensor[]");
  library.def(
      "backward(Tensor grad_readings, Tensor logits, Tensor readings, Tensor gamma, Tensor shares, Tensor pops, "
      "Tensor alpha, int states, int symbols, bool log_sigmoid) -> Tensor[]");
  library.def("start(Tensor bottom, int capacity, int states, int symbols) -> Tensor[]");
  library.def(
      "step(int t, Tensor logits, Tensor pushed, Tensor(a!) gamma, Tensor(b!) shares, Tensor(c!) pops, "
      "Tensor(d!) alpha) -> Tensor");
  library.def(
      "step_backward(int t, Tensor grad_reading, Tensor logits, Tensor pushed, Tensor reading, Tensor gamma, "
      "Tensor shares, Tensor pops, Tensor alpha, Tensor(a!) grad_gamma, Tensor(b!) grad_alpha) -> Tensor[]");
}

TORCH_LIBRARY_IMPL(stacklm_dvpda, CPU, library) {
  library.impl("forward", &dvpda_forward);
  library.impl("backward", &dvpda_backward);
  library.impl("start", &dvpda_start);
  library.impl("step", &dvpda_step);
  library.impl("step_backward", &dvpda_step_backward);
}
