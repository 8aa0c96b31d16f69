// The whole-sequence dVPDA (full stack, bottom replaceable) and its exact backward, on CPU.
//
// The same dynamic program and numerics as ``pda.py`` with ``ShiftedLogContraction``
// (``shifted.py``); ``dvpda.py`` states the recurrences. One batch element per task
// (at::parallel_for, OpenMP), all of its steps in one call, no tensor operation per step.
//
// Per element, column t (t = 0 … n) has rows(t) = m + (t+1)·N rows: the m rows of η[t], then
// N rows (i, a) per row i = −1 … t−1 (row index m + (i+1)·N + a in every column). Every
// column is stored transposed, [c][row], at offset(t) of one flat table:
//   gamma:   log η[t][j, c] in the η rows; log γ[i→t][a, c] in the γ rows of column 0 only
//            (the shares carry the γ rows of later columns: nothing reads their logs)
//   shares:  Ŝ = γ[i→t][a, c] α[i][a] / α[t][c] ∈ [0, 1] (η rows: exp(log η − log α))
//   pops, replaced_shares, popped_shares (PopTables): at offset(t−2), rows(t−2) rows of step
//            t: the pop's real total P = Σ_{k,u} Ŝ_k ŵ, and the replace and pop terms' shares
//            of column t (the log-sum-exp's weights, so the backward takes no exp or log there)
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
#include <ATen/ops/zeros.h>
#include <ATen/ops/zeros_like.h>
#include <torch/library.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

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

template <typename T>
inline T split_exponent(T x, T& exponent) {
  using E = Exponent<T>;
  const bool subnormal = x < std::numeric_limits<T>::min();
  const T scaled = subnormal ? x * T(typename E::Bits(1) << E::subnormal_shift) : x;
  const auto bits = std::bit_cast<typename E::Bits>(scaled);
  // Integers of the float's own width: a float's exponent through int64 costs lane widening
  // and a conversion that AVX2 lacks.
  const auto biased = static_cast<typename E::Signed>(bits >> E::mantissa_bits);
  exponent = T(biased - (E::bias + (subnormal ? E::subnormal_shift : 0)));
  return std::bit_cast<T>((bits & E::mantissa_mask) | E::half);
}

template <typename T>
constexpr T LN2 = T(0.693147180559945309417232121458176568);

// exp: glibc's for double; for float, Cephes' expf (S. L. Moshier, Cephes Mathematical
// Library: range reduction by ln 2 in two parts, then a degree-5 polynomial; within 2 ulp),
// written out so that GCC inlines and vectorizes it: a loop calling libmvec keeps nothing in
// registers across the call (every vector register is the caller's to save). Takes
// x ≥ −87.33 (exp_flushed's floor) and gives +∞ above float's range.
template <typename T>
inline T exp_of(T x) {
  return std::exp(x);
}

template <>
inline float exp_of(float x) {
  x = x < 89.0f ? x : 89.0f;
  constexpr float shifter = 12582912.0f;  // 1.5 · 2^23: adding it rounds to an integer in the low bits
  const float shifted = x * 1.44269504088896341f + shifter;
  const float n = shifted - shifter;
  int32_t power = std::bit_cast<int32_t>(shifted) - std::bit_cast<int32_t>(shifter);
  const float r = (x - n * 0.693359375f) - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  const bool above = power > 127;  // 2^128 is no float: 2 · 2^127
  power = above ? 127 : power;
  p = above ? p + p : p;
  return p * std::bit_cast<float>((power + 127) << 23);
}

// exp(x), or 0 where that is below the smallest normal number. glibc's vector exp (libmvec)
// computes every lane below about −87.3 (float) or −708.4 (double), −∞ included, with the
// scalar exp, lane by lane: about 20 times the time of a vector lane, and the DP's terms
// below their maximum are often that small. So a lane below `floor` is computed at `floor`
// and multiplied by 0. `floor` comes from exp_floor(), hidden from the optimizer: with a
// constant, GCC folds exp(floor) and computes exp(x) on every lane again; the two tests on x
// are written differently for the same reason (GCC merges x >= floor ? exp(max(x, floor)) : 0
// into exp(x)). x − floor ≥ 0 exactly where x ≥ floor (gradual underflow).
// In float, exp_of is inline (above), for which the floor also keeps 2^n a normal number.
template <typename T>
inline T exp_flushed(T x, T floor) {
  const T keep = x - floor >= 0 ? T(1) : T(0);
  return exp_of(x >= floor ? x : floor) * keep;
}

template <typename T>
inline T exp_floor() {
  T floor = std::is_same_v<T, float> ? T(-87) : T(-708);
  asm("" : "+m"(floor));
  return floor;
}

// The products below are sums of a few weighted columns. Bound by stores, they add up to four
// columns per pass over the output (one store per four multiply-adds); columns of weight 0
// are left out. GCC 12 runs `omp simd reduction` loops here one lane at a time (scalar code
// over an array of lane sums), so the dot products keep explicit lanes.
template <typename T>
struct WeightedColumns {
  std::vector<T> weights;
  std::vector<const T*> columns;
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
  void add(T weight, const T* column, int64_t index) {
    if (weight == 0) return;
    weights[count] = weight;
    columns[count] = column;
    indices[count] = index;
    ++count;
  }
  int64_t size() const { return count; }
};

// out[row] += Σ_i weights[i] · columns[i][row] for row < size.
template <typename T>
void add_weighted(int64_t size, const WeightedColumns<T>& terms, T* __restrict out) {
  const T* w = terms.weights.data();
  const T* const* c = terms.columns.data();
  int64_t i = 0, count = terms.size();
  for (; i + 4 <= count; i += 4) {
    const T w0 = w[i], w1 = w[i + 1], w2 = w[i + 2], w3 = w[i + 3];
    const T *__restrict c0 = c[i], *__restrict c1 = c[i + 1], *__restrict c2 = c[i + 2], *__restrict c3 = c[i + 3];
#pragma omp simd
    for (int64_t row = 0; row < size; ++row) out[row] += w0 * c0[row] + w1 * c1[row] + w2 * c2[row] + w3 * c3[row];
  }
  if (count - i == 3) {
    const T w0 = w[i], w1 = w[i + 1], w2 = w[i + 2];
    const T *__restrict c0 = c[i], *__restrict c1 = c[i + 1], *__restrict c2 = c[i + 2];
#pragma omp simd
    for (int64_t row = 0; row < size; ++row) out[row] += w0 * c0[row] + w1 * c1[row] + w2 * c2[row];
  } else if (count - i == 2) {
    const T w0 = w[i], w1 = w[i + 1];
    const T *__restrict c0 = c[i], *__restrict c1 = c[i + 1];
#pragma omp simd
    for (int64_t row = 0; row < size; ++row) out[row] += w0 * c0[row] + w1 * c1[row];
  } else if (count - i == 1) {
    const T w0 = w[i];
    const T* __restrict c0 = c[i];
#pragma omp simd
    for (int64_t row = 0; row < size; ++row) out[row] += w0 * c0[row];
  }
}

constexpr int64_t LANES = 8;

// The adjoint of a product term left ⊙ Σ_i weights[i] · columns[i], in one pass over the rows:
//   results[i] = Σ_row left[row] · columns[i][row],   out[row] += left[row] · Σ_i weights[i] · columns[i][row].
// Four columns per pass (a group of fewer is padded with weight 0 and the column ``left``, already
// loaded); the dot products keep explicit lanes (GCC 12 runs `omp simd` reductions lane by lane).
template <typename T>
void product_adjoint(int64_t size, const T* __restrict left, const WeightedColumns<T>& terms, T* results,
                     T* __restrict out) {
  const int64_t count = terms.size(), whole = size - size % LANES;
  for (int64_t first = 0; first < count; first += 4) {
    T w[4];
    const T* c[4];
    for (int64_t i = 0; i < 4; ++i) {
      const bool kept = first + i < count;
      w[i] = kept ? terms.weights[first + i] : T(0);
      c[i] = kept ? terms.columns[first + i] : left;
    }
    const T w0 = w[0], w1 = w[1], w2 = w[2], w3 = w[3];
    const T *__restrict c0 = c[0], *__restrict c1 = c[1], *__restrict c2 = c[2], *__restrict c3 = c[3];
    T sums0[LANES] = {}, sums1[LANES] = {}, sums2[LANES] = {}, sums3[LANES] = {};
    for (int64_t row = 0; row < whole; row += LANES)
#pragma omp simd
      for (int64_t lane = 0; lane < LANES; ++lane) {
        const T l = left[row + lane], v0 = c0[row + lane], v1 = c1[row + lane], v2 = c2[row + lane],
                v3 = c3[row + lane];
        sums0[lane] += l * v0;
        sums1[lane] += l * v1;
        sums2[lane] += l * v2;
        sums3[lane] += l * v3;
        out[row + lane] += l * (w0 * v0 + w1 * v1 + w2 * v2 + w3 * v3);
      }
    T totals[4] = {};
    for (int64_t row = whole; row < size; ++row) {
      const T l = left[row], v0 = c0[row], v1 = c1[row], v2 = c2[row], v3 = c3[row];
      totals[0] += l * v0;
      totals[1] += l * v1;
      totals[2] += l * v2;
      totals[3] += l * v3;
      out[row] += l * (w0 * v0 + w1 * v1 + w2 * v2 + w3 * v3);
    }
    for (int64_t lane = 0; lane < LANES; ++lane) {
      totals[0] += sums0[lane];
      totals[1] += sums1[lane];
      totals[2] += sums2[lane];
      totals[3] += sums3[lane];
    }
    for (int64_t i = 0; i < 4 && first + i < count; ++i) results[first + i] = totals[i];
  }
}

// Σ_row values[row] for row < size, in explicit lanes (GCC 12 runs `omp simd` reductions lane by lane).
template <typename T>
T sum_rows(int64_t size, const T* __restrict values) {
  const int64_t whole = size - size % LANES;
  T sums[LANES] = {};
  for (int64_t row = 0; row < whole; row += LANES)
#pragma omp simd
    for (int64_t lane = 0; lane < LANES; ++lane) sums[lane] += values[row + lane];
  T total = 0;
  for (int64_t row = whole; row < size; ++row) total += values[row];
  for (int64_t lane = 0; lane < LANES; ++lane) total += sums[lane];
  return total;
}

// One element's pop totals and the replace and pop terms' shares (see the top of the file).
template <typename T>
struct PopTables {
  T *totals, *replaced_shares, *popped_shares;
};

// Quantities of step t that the forward computes and the backward recomputes.
template <typename T>
struct Step {
  std::vector<T> ghat, rho, row_scale, rhat, right_offset, total, weights, mantissas, pop_offset, pushed_offset, dots;
  std::vector<T> row_unscale;                         // 2^e per row, undoing Ĝ's scaling: 2^e · total = Σ_c Ŝ R̂
  std::vector<char> right_present, pop_present;       // whether each offset is that of a nonempty sum
  std::vector<T> lane_values, symbol_values;          // scratch of pop_weights
  std::vector<T> column_high, column_sums;            // scratch of exp_columns
  std::vector<T> padding;                             // POP_BLOCK rows the pop's padded blocks write to
  std::vector<T> push_terms, push_sums;               // the terms of log(α[t−1] Δ⁺_t) relative to their maximum, their sums
  WeightedColumns<T> terms;
};

// For each column j of values [c][j] (rows × columns): high_j = max_c value (0 if every value
// is −∞), values ← exp(value − high_j), sums_j = Σ_c of them, so that the column's log-sum is
// log(sums_j) + high_j. Vectorized over j: a short step's scalar exps were much of its time.
template <typename T>
void exp_columns(int64_t rows, int64_t columns, T* __restrict values, T* __restrict high, T* __restrict sums) {
  std::fill(high, high + columns, NEG<T>);
  for (int64_t c = 0; c < rows; ++c) {
    const T* __restrict row = values + c * columns;
#pragma omp simd
    for (int64_t j = 0; j < columns; ++j) high[j] = row[j] > high[j] ? row[j] : high[j];
  }
  for (int64_t j = 0; j < columns; ++j) {
    high[j] = high[j] == NEG<T> ? T(0) : high[j];
    sums[j] = 0;
  }
  const T floor = exp_floor<T>();
  for (int64_t c = 0; c < rows; ++c) {
    T* __restrict row = values + c * columns;
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
template <typename T>
void products(const Sizes& z, int64_t t, const T* shares, const std::vector<T>& row_weights, const T* alpha,
              const T* push, const T* replace, const T* pop, Step<T>& s) {
  using E = Exponent<T>;
  const int64_t N = z.configs, Q = z.states, J = N + Q, R = z.rows(t - 1);
  const T* previous = shares + z.offset(t - 1);
  const T* shift = alpha + (t - 1) * N;
  s.rho.assign(R, T(0));  // the rows' largest shares first
  for (int64_t c = 0; c < N; ++c) {
    const T* __restrict column = previous + c * R;
    T* __restrict high = s.rho.data();
#pragma omp simd
    for (int64_t row = 0; row < R; ++row) high[row] = column[row] > high[row] ? column[row] : high[row];
  }
  s.row_scale.resize(R);
  s.row_unscale.resize(R);
  {
    T* __restrict rho = s.rho.data();
    T* __restrict scale = s.row_scale.data();
    T* __restrict unscale = s.row_unscale.data();
    const T* __restrict weight = row_weights.data();
#pragma omp simd
    for (int64_t row = 0; row < R; ++row) {
      const T high = rho[row];
      T exponent;
      split_exponent(high, exponent);
      exponent = std::clamp(exponent, -T(E::bias), T(E::bias));  // 2^−e a normal number (M may be subnormal)
      const auto power = static_cast<typename E::Signed>(E::bias + 1) - static_cast<typename E::Signed>(exponent);
      const bool present = high > 0;
      scale[row] = present ? std::bit_cast<T>(static_cast<typename E::Bits>(power) << E::mantissa_bits) : T(0);
      const auto inverse_power = static_cast<typename E::Signed>(E::bias + 1) + static_cast<typename E::Signed>(exponent);
      unscale[row] = present ? std::bit_cast<T>(static_cast<typename E::Bits>(inverse_power) << E::mantissa_bits) : T(0);
      rho[row] = present ? exponent * LN2<T> - weight[row] : T(0);
    }
  }
  s.ghat.resize(N * R);
  for (int64_t c = 0; c < N; ++c) {
    const T* __restrict column = previous + c * R;
    const T* __restrict scale = s.row_scale.data();
    T* __restrict out = s.ghat.data() + c * R;
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
    T* row = s.rhat.data() + c * J;
    for (int64_t j = 0; j < N; ++j) row[j] = shift[c] + replace[c * N + j];
    for (int64_t r = 0; r < Q; ++r) row[N + r] = shift[c] + pop[c * Q + r];
  }
  T* sums = s.column_sums.data();
  exp_columns(N, J, s.rhat.data(), s.column_high.data(), sums);
  for (int64_t j = 0; j < J; ++j) {
    s.right_offset[j] = sums[j] > 0 ? std::log(sums[j]) + s.column_high[j] : s.column_high[j];
    s.right_present[j] = sums[j] > 0;
    sums[j] = sums[j] > 0 ? T(1) / sums[j] : T(0);
  }
  for (int64_t c = 0; c < N; ++c) {
    T* __restrict row = s.rhat.data() + c * J;
#pragma omp simd
    for (int64_t j = 0; j < J; ++j) row[j] *= sums[j];
  }
  s.total.assign(J * R, T(0));
  for (int64_t j = 0; j < J; ++j) {
    s.terms.reset(N);
    for (int64_t c = 0; c < N; ++c) s.terms.add(s.rhat[c * J + j], s.ghat.data() + c * R, c);
    add_weighted(R, s.terms, s.total.data() + j * R);
  }
  // log(α[t−1] Δ⁺_t)[target] = log Σ_c push_terms[c][target] + high; −∞ when every term is.
  s.push_terms.resize(N * N);
  s.push_sums.resize(N);
  for (int64_t c = 0; c < N; ++c)
    for (int64_t target = 0; target < N; ++target) s.push_terms[c * N + target] = shift[c] + push[c * N + target];
  exp_columns(N, N, s.push_terms.data(), s.column_high.data(), s.push_sums.data());
  s.pushed_offset.resize(N);
  for (int64_t target = 0; target < N; ++target)
    s.pushed_offset[target] =
        s.push_sums[target] > 0 ? std::log(s.push_sums[target]) + s.column_high[target] : NEG<T>;
}

// ŵ[r][k·N + (u,y)] for k = 0 … t−2 and L[y][r] (pop_offset), from γ'_t in the products.
// (k, u, y) runs over k·N + u·S + y, a contiguous range of rows of column t−1. The sums and
// maxima over (k, u) per symbol y run over P = S·LANES lanes at once (P is a multiple of S,
// so lane p of every block of P holds y = p mod S, and a block is whole vectors), then fold
// the lanes of each y; KN is a multiple of S, so only a tail of whole (u, y) groups is left.
template <typename T>
void pop_weights(const Sizes& z, int64_t t, const T* alpha, Step<T>& s) {
  const int64_t N = z.configs, Q = z.states, S = z.symbols, m = z.vector, R = z.rows(t - 1), KN = (t - 1) * N;
  const int64_t P = S * LANES, whole = KN - KN % P;
  s.weights.resize(Q * KN);
  s.mantissas.resize(KN);
  s.lane_values.resize(P);
  s.symbol_values.resize(S);
  s.pop_offset.assign(S * Q, NEG<T>);
  s.pop_present.assign(S * Q, 0);
  T* lanes = s.lane_values.data();
  T* per_symbol = s.symbol_values.data();
  const T floor = exp_floor<T>();
  for (int64_t r = 0; r < Q; ++r) {
    T* __restrict weight = s.weights.data() + r * KN;
    T* __restrict mantissa = s.mantissas.data();
    // log α[k][u,y] + γ'_t[k][(u,y), r] = log mantissa + weight, γ' from the real total of row
    // m + N + k·N + b of product column N + r as mantissa · 2^exponent (as in forward_step):
    // ŵ = mantissa · exp(weight − max weight), one exp and no log.
    const T* __restrict total = s.total.data() + (N + r) * R + m + N;
    const T* __restrict rho = s.rho.data() + m + N;
    const T offset = s.right_offset[N + r];
#pragma omp simd
    for (int64_t index = 0; index < KN; ++index) {
      T exponent;
      mantissa[index] = split_exponent(total[index], exponent);
      const T scale = alpha[index] + (exponent * LN2<T> + rho[index] + offset);
      weight[index] = total[index] > 0 ? scale : NEG<T>;
    }
    // per_symbol[y] = max over (k, u) of weight (0 if every one is −∞), spread to the P lanes.
    std::fill(lanes, lanes + P, NEG<T>);
    for (int64_t first = 0; first < whole; first += P)
#pragma omp simd
      for (int64_t p = 0; p < P; ++p) lanes[p] = weight[first + p] > lanes[p] ? weight[first + p] : lanes[p];
    std::fill(per_symbol, per_symbol + S, NEG<T>);
    for (int64_t first = 0; first < P; first += S)
      for (int64_t y = 0; y < S; ++y) per_symbol[y] = std::max(per_symbol[y], lanes[first + y]);
    for (int64_t first = whole; first < KN; first += S)
      for (int64_t y = 0; y < S; ++y) per_symbol[y] = std::max(per_symbol[y], weight[first + y]);
    for (int64_t y = 0; y < S; ++y) per_symbol[y] = per_symbol[y] == NEG<T> ? T(0) : per_symbol[y];
    for (int64_t first = 0; first < P; first += S) std::copy(per_symbol, per_symbol + S, lanes + first);
    for (int64_t first = 0; first < whole; first += P)
#pragma omp simd
      for (int64_t p = 0; p < P; ++p)
        weight[first + p] = mantissa[first + p] * exp_flushed(weight[first + p] - lanes[p], floor);
#pragma omp simd
    for (int64_t index = whole; index < KN; ++index)
      weight[index] = mantissa[index] * exp_flushed(weight[index] - lanes[index - whole], floor);
    // L[y][r] = log Σ_{k,u} ŵ + max, and ŵ scaled to sum to 1 per y.
    std::fill(lanes, lanes + P, T(0));
    for (int64_t first = 0; first < whole; first += P)
#pragma omp simd
      for (int64_t p = 0; p < P; ++p) lanes[p] += weight[first + p];
    for (int64_t index = whole; index < KN; ++index) lanes[index - whole] += weight[index];
    for (int64_t y = 0; y < S; ++y) {
      T sum = 0;
      for (int64_t p = y; p < P; p += S) sum += lanes[p];
      s.pop_offset[y * Q + r] = sum > 0 ? std::log(sum) + per_symbol[y] : per_symbol[y];
      s.pop_present[y * Q + r] = sum > 0;
      per_symbol[y] = sum > 0 ? T(1) / sum : T(0);
    }
    for (int64_t first = 0; first < P; first += S) std::copy(per_symbol, per_symbol + S, lanes + first);
    for (int64_t first = 0; first < whole; first += P)
#pragma omp simd
      for (int64_t p = 0; p < P; ++p) weight[first + p] *= lanes[p];
#pragma omp simd
    for (int64_t index = whole; index < KN; ++index) weight[index] *= lanes[index - whole];
  }
}

// The pop's contraction over (k, u) runs in blocks of POP_BLOCK states u (the exposed element's)
// by POP_BLOCK states r (after the pop), for one symbol y and one column k: one pass over the
// rows of column k reads POP_BLOCK shares and updates POP_BLOCK totals, where a pass per (r, y)
// read each share Q times. States past Q are padded with weight 0, reading a kept column and
// writing to rows of `padding`.
constexpr int64_t POP_BLOCK = 3;
static_assert(POP_BLOCK == 3, "the passes below are written out for blocks of three states");

template <typename T>
struct PopBlock {
  T weights[POP_BLOCK][POP_BLOCK];  // [r][u]: ŵ[r][k·N + (u, y)]
  int64_t count_r, count_u;
};

template <typename T>
__attribute__((always_inline)) inline PopBlock<T> pop_block(const Sizes& z, int64_t t, const Step<T>& s, int64_t k, int64_t y, int64_t first_r,
                      int64_t first_u) {
  const int64_t Q = z.states, S = z.symbols, KN = (t - 1) * z.configs;
  PopBlock<T> block;
  block.count_r = std::min(POP_BLOCK, Q - first_r);
  block.count_u = std::min(POP_BLOCK, Q - first_u);
  for (int64_t i = 0; i < POP_BLOCK; ++i)
    for (int64_t j = 0; j < POP_BLOCK; ++j)
      block.weights[i][j] = i < block.count_r && j < block.count_u
                                ? s.weights[(first_r + i) * KN + k * z.configs + (first_u + j) * S + y]
                                : T(0);
  return block;
}

// pop total[(r, y)] = Σ_k Σ_u ŵ[r][k, (u, y)] Ŝ_k[(u, y)], over the rows of each column k.
template <typename T>
void pop_forward(const Sizes& z, int64_t t, const T* shares, Step<T>& s, T* pop_total) {
  const int64_t N = z.configs, Q = z.states, S = z.symbols, R2 = z.rows(t - 2);
  std::fill(pop_total, pop_total + N * R2, T(0));
  s.padding.resize(POP_BLOCK * R2);
  for (int64_t k = 0; k < t - 1; ++k) {
    const int64_t Rk = z.rows(k);
    const T* share = shares + z.offset(k);
    for (int64_t y = 0; y < S; ++y)
      for (int64_t first_r = 0; first_r < Q; first_r += POP_BLOCK)
        for (int64_t first_u = 0; first_u < Q; first_u += POP_BLOCK) {
          const PopBlock<T> block = pop_block(z, t, s, k, y, first_r, first_u);
          const T* in[POP_BLOCK];
          T* out[POP_BLOCK];
          for (int64_t i = 0; i < POP_BLOCK; ++i) {
            in[i] = share + ((i < block.count_u ? first_u + i : first_u) * S + y) * Rk;
            out[i] = i < block.count_r ? pop_total + ((first_r + i) * S + y) * R2 : s.padding.data() + i * R2;
          }
          const T(&w)[POP_BLOCK][POP_BLOCK] = block.weights;
          const T *__restrict c0 = in[0], *__restrict c1 = in[1], *__restrict c2 = in[2];
          T *__restrict o0 = out[0], *__restrict o1 = out[1], *__restrict o2 = out[2];
          const T w00 = w[0][0], w01 = w[0][1], w02 = w[0][2], w10 = w[1][0], w11 = w[1][1], w12 = w[1][2],
                  w20 = w[2][0], w21 = w[2][1], w22 = w[2][2];
#pragma omp simd
          for (int64_t row = 0; row < Rk; ++row) {
            const T v0 = c0[row], v1 = c1[row], v2 = c2[row];
            o0[row] += w00 * v0 + w01 * v1 + w02 * v2;
            o1[row] += w10 * v0 + w11 * v1 + w12 * v2;
            o2[row] += w20 * v0 + w21 * v1 + w22 * v2;
          }
        }
  }
}

// The adjoint of pop_forward given ∂/∂(pop total) scaled_pop [(r, y)][row]: the shares' gradient
// Ŝ ⊙ Σ_r ŵ scaled goes straight to log γ of column k, and ∂/∂ŵ = Σ_row Ŝ scaled times ŵ to
// γ'_t, the row of column t−1 that holds (k, (u, y)) in product column N + r. The dot products
// keep explicit lanes, as in product_adjoint.
template <typename T>
void pop_backward(const Sizes& z, int64_t t, const T* shares, const T* scaled_pop, Step<T>& s, T* grad_gamma,
                  T* grad_products) {
  const int64_t N = z.configs, Q = z.states, S = z.symbols, m = z.vector, R = z.rows(t - 1), R2 = z.rows(t - 2);
  s.padding.resize(POP_BLOCK * R2);
  for (int64_t k = 0; k < t - 1; ++k) {
    const int64_t Rk = z.rows(k), whole = Rk - Rk % LANES;
    const T* share = shares + z.offset(k);
    T* grad_k = grad_gamma + z.offset(k);
    for (int64_t y = 0; y < S; ++y)
      for (int64_t first_r = 0; first_r < Q; first_r += POP_BLOCK)
        for (int64_t first_u = 0; first_u < Q; first_u += POP_BLOCK) {
          const PopBlock<T> block = pop_block(z, t, s, k, y, first_r, first_u);
          const T* left[POP_BLOCK];
          const T* right[POP_BLOCK];
          T* out[POP_BLOCK];
          for (int64_t i = 0; i < POP_BLOCK; ++i) {
            const int64_t u = i < block.count_u ? first_u + i : first_u;
            left[i] = share + (u * S + y) * Rk;
            out[i] = i < block.count_u ? grad_k + (u * S + y) * Rk : s.padding.data() + i * R2;
            right[i] = scaled_pop + ((i < block.count_r ? first_r + i : first_r) * S + y) * R2;
          }
          const T(&w)[POP_BLOCK][POP_BLOCK] = block.weights;
          const T w00 = w[0][0], w01 = w[0][1], w02 = w[0][2], w10 = w[1][0], w11 = w[1][1], w12 = w[1][2],
                  w20 = w[2][0], w21 = w[2][1], w22 = w[2][2];
          const T *__restrict l0 = left[0], *__restrict l1 = left[1], *__restrict l2 = left[2];
          const T *__restrict v0 = right[0], *__restrict v1 = right[1], *__restrict v2 = right[2];
          T *__restrict o0 = out[0], *__restrict o1 = out[1], *__restrict o2 = out[2];
          // sums[r][u][lane] = Σ over rows ≡ lane of Ŝ_u scaled_r
          T sums[POP_BLOCK][POP_BLOCK][LANES] = {};
          for (int64_t row = 0; row < whole; row += LANES)
#pragma omp simd
            for (int64_t lane = 0; lane < LANES; ++lane) {
              const int64_t at = row + lane;
              const T a0 = l0[at], a1 = l1[at], a2 = l2[at], b0 = v0[at], b1 = v1[at], b2 = v2[at];
              sums[0][0][lane] += a0 * b0;
              sums[0][1][lane] += a1 * b0;
              sums[0][2][lane] += a2 * b0;
              sums[1][0][lane] += a0 * b1;
              sums[1][1][lane] += a1 * b1;
              sums[1][2][lane] += a2 * b1;
              sums[2][0][lane] += a0 * b2;
              sums[2][1][lane] += a1 * b2;
              sums[2][2][lane] += a2 * b2;
              o0[at] += a0 * (w00 * b0 + w10 * b1 + w20 * b2);
              o1[at] += a1 * (w01 * b0 + w11 * b1 + w21 * b2);
              o2[at] += a2 * (w02 * b0 + w12 * b1 + w22 * b2);
            }
          T dots[POP_BLOCK][POP_BLOCK] = {};
          for (int64_t at = whole; at < Rk; ++at) {
            const T a[POP_BLOCK] = {l0[at], l1[at], l2[at]}, b[POP_BLOCK] = {v0[at], v1[at], v2[at]};
            for (int64_t i = 0; i < POP_BLOCK; ++i)
              for (int64_t j = 0; j < POP_BLOCK; ++j) dots[i][j] += a[j] * b[i];
            o0[at] += a[0] * (w00 * b[0] + w10 * b[1] + w20 * b[2]);
            o1[at] += a[1] * (w01 * b[0] + w11 * b[1] + w21 * b[2]);
            o2[at] += a[2] * (w02 * b[0] + w12 * b[1] + w22 * b[2]);
          }
          for (int64_t i = 0; i < block.count_r; ++i)
            for (int64_t j = 0; j < block.count_u; ++j) {
              T dot = dots[i][j];
              for (int64_t lane = 0; lane < LANES; ++lane) dot += sums[i][j][lane];
              const int64_t r = first_r + i, b = (first_u + j) * S + y;
              grad_products[(N + r) * R + m + (k + 1) * N + b] += w[i][j] * dot;
            }
        }
  }
}

// log α of every row index: 0 for η rows, 𝟙[q0, ⊥] for row −1, log α[i][a] for row (i, a).
template <typename T>
void row_weights(const Sizes& z, const T* alpha, int64_t columns, std::vector<T>& out) {
  const int64_t N = z.configs, m = z.vector;
  out.assign(z.rows(z.steps), T(0));
  for (int64_t a = 0; a < N; ++a) out[m + a] = a == 0 ? T(0) : NEG<T>;
  for (int64_t i = 0; i < columns; ++i)
    for (int64_t a = 0; a < N; ++a) out[m + (i + 1) * N + a] = alpha[i * N + a];
}

template <typename T>
void make_shares(const Sizes& z, int64_t t, const T* gamma, const T* alpha, const std::vector<T>& weights,
                 T* shares) {
  const int64_t N = z.configs, R = z.rows(t);
  const T* weight = weights.data();
  const T floor = exp_floor<T>();
  for (int64_t c = 0; c < N; ++c) {
    T shift = alpha[t * N + c];
    const T* column = gamma + z.offset(t) + c * R;
    T* out = shares + z.offset(t) + c * R;
    if (shift == NEG<T>) {
      std::fill(out, out + R, T(0));
      continue;
    }
    // log γ and log α(row) are never +∞, so a −∞ in either gives exp(−∞) = 0.
#pragma omp simd
    for (int64_t row = 0; row < R; ++row) out[row] = exp_flushed(column[row] + weight[row] - shift, floor);
  }
}

// Column 0: η[0] = log v₀ at (q0, ⊥), row −1 = the fictitious push of ⊥ in q0; α[0] = 𝟙[q0, ⊥].
template <typename T>
void initialize_element(const Sizes& z, const T* bottom, T* gamma, T* shares, T* alpha) {
  const int64_t N = z.configs, m = z.vector, R = z.rows(0);
  std::vector<T> weights;
  row_weights(z, alpha, 0, weights);
  std::fill(gamma, gamma + N * R, NEG<T>);
  for (int64_t j = 0; j < m; ++j) gamma[j] = bottom[j];
  gamma[m] = 0;
  for (int64_t a = 0; a < N; ++a) alpha[a] = a == 0 ? T(0) : NEG<T>;
  make_shares(z, 0, gamma, alpha, weights, shares);
}

// Step t ≥ 1 of one element: column t of gamma and shares, the pop totals at offset(t−2),
// α[t] and the reading r_t (N·m), from columns 0 … t−1 and the actions of step t.
template <typename T>
void forward_step(const Sizes& z, int64_t t, const T* step_push, const T* step_replace, const T* step_pop,
                  const T* step_pushed, T* reading, T* gamma, T* shares, PopTables<T> pops, T* alpha, Step<T>& s,
                  std::vector<T>& weights) {
  const int64_t N = z.configs, Q = z.states, S = z.symbols, m = z.vector;
  const int64_t R = z.rows(t - 1), Rt = z.rows(t), R2 = t >= 2 ? z.rows(t - 2) : 0;
  row_weights(z, alpha, t, weights);  // rows i ≤ t−1 enter with weight α[i]
  products(z, t, shares, weights, alpha, step_push, step_replace, step_pop, s);
  const int64_t saved = t >= 2 ? z.offset(t - 2) : 0;
  T* pop_total = pops.totals + saved;
  T* replaced_shares = pops.replaced_shares + saved;
  T* popped_shares = pops.popped_shares + saved;
  if (t >= 2) {
    pop_weights(z, t, alpha, s);
    pop_forward(z, t, shares, s, pop_total);
  }
  T* column = gamma + z.offset(t);
  T* current_alpha = alpha + t * N;
  const T floor = exp_floor<T>();
  const int64_t eta_end = std::min(m, R2);  // η rows among the pop's rows (all of them for t ≥ 2)
  for (int64_t target = 0; target < N; ++target) {
    const int64_t r = target / S, y = target % S;
    T* out = column + target * Rt;
    const T* replaced_total = s.total.data() + target * R;
    const T* popped_total = pop_total + target * R2;
    T* replaced_share = replaced_shares + target * R2;
    T* popped_share = popped_shares + target * R2;
    const T* rho = s.rho.data();
    const T* weight = weights.data();
    const T replaced_offset = s.right_offset[target];
    const T popped_offset = R2 > 0 ? s.pop_offset[y * Q + r] : T(0);
    // η rows, in log space. Offsets, ρ and L are finite; a total of 0 marks an empty sum (−∞).
    // Each term is its total's mantissa times exp of its log scale (offsets and the total's
    // exponent), taken relative to the larger scale. An absent term gets mantissa 0 and the
    // other term's scale, so that every value stays finite and the larger scale is a present
    // term's. The terms' weights are taken relative to the largest term for the backward.
#pragma omp simd
    for (int64_t row = 0; row < eta_end; ++row) {
      const T replaced_value = replaced_total[row], popped_value = popped_total[row], row_weight = weight[row];
      T replaced_exponent, popped_exponent;
      const T replaced_mantissa = split_exponent(replaced_value, replaced_exponent);
      const T popped_mantissa = split_exponent(popped_value, popped_exponent);
      const bool has_replaced = replaced_value > 0;
      const bool has_popped = popped_value > 0 && row_weight != NEG<T>;
      T replaced_scale = rho[row] + replaced_offset + replaced_exponent * LN2<T>;
      T popped_scale = popped_offset - row_weight + popped_exponent * LN2<T>;  // +∞ where weight is −∞
      popped_scale = has_popped ? popped_scale : replaced_scale;
      replaced_scale = has_replaced ? replaced_scale : popped_scale;
      const T difference = replaced_scale - popped_scale;
      const T smaller = exp_flushed(-std::abs(difference), floor);
      const bool replaced_high = difference >= 0;
      const T replaced_present = has_replaced ? replaced_mantissa : T(0);
      const T popped_present = has_popped ? popped_mantissa : T(0);
      const T replaced_term = replaced_high ? replaced_present : replaced_present * smaller;
      const T popped_term = replaced_high ? popped_present * smaller : popped_present;
      const T base = replaced_high ? replaced_scale : popped_scale;
      const T sum = replaced_term + popped_term;  // 0, or at least the larger mantissa, 0.5
      const bool present = sum > 0;
      const T log_sum = std::log(present ? sum : T(1));
      out[row] = present ? base + log_sum : NEG<T>;
      const T inverse = T(1) / (present ? sum : T(1));
      replaced_share[row] = replaced_term * inverse;
      popped_share[row] = popped_term * inverse;
    }
    // t = 1: the η rows have only the replace term.
#pragma omp simd
    for (int64_t row = R2; row < m; ++row) {
      T exponent;
      const T mantissa = split_exponent(replaced_total[row], exponent);
      const T replaced = std::log(mantissa) + (exponent * LN2<T> + rho[row] + replaced_offset);
      out[row] = replaced_total[row] > 0 ? replaced : NEG<T>;
    }
    // ⊕ log v_t + log(α[t−1] Δ⁺_t), the m rows in vector lanes.
    const T pushed_offset = s.pushed_offset[target];
#pragma omp simd
    for (int64_t row = 0; row < m; ++row) {
      const T kept = out[row], pushed = step_pushed[row] + pushed_offset;
      const T high = std::max(kept, pushed), low = std::min(kept, pushed);
      const T sum = T(1) + exp_flushed(low - high, floor);  // −∞ − −∞ is NaN, flushed to 0
      out[row] = high == NEG<T> ? NEG<T> : high + std::log(sum);
    }
    // γ rows, in real space: the terms of log α[t] = log Σ_row α(row) γ[row→t] are
    //   α(row) γ_replace = exp(offset) · 2^e · total = exp(offset) Σ_c Ŝ[row, c] R̂[c, target]
    //   α(row) γ_pop = exp(L[y, r]) · P[row, (r, y)],   α[t−1][a] Δ⁺[a → target] (the push rows),
    // each of the two sums over rows at most 1 (Ŝ sums to 1 over the rows of a column, R̂ and
    // ŵ over theirs), so relative to κ, the largest present offset, no term overflows and
    // their total is at least about 1: the shares Ŝ of column t are the terms over their total,
    // flushed to 0 below the smallest normal number (as the exps of the log-space terms were).
    // log γ of these rows is not kept: every reader takes the shares.
    const bool has_replaced = s.right_present[target], has_popped = R2 > 0 && s.pop_present[y * Q + r];
    const bool has_pushed = pushed_offset != NEG<T>;
    T kappa = has_replaced ? replaced_offset : NEG<T>;
    kappa = has_popped ? std::max(kappa, popped_offset) : kappa;
    kappa = has_pushed ? std::max(kappa, pushed_offset) : kappa;
    T* share = shares + z.offset(t) + target * Rt;
    if (kappa == NEG<T>) {
      current_alpha[target] = NEG<T>;
      std::fill(share, share + Rt, T(0));
      continue;
    }
    const T replaced_factor = has_replaced ? std::exp(replaced_offset - kappa) : T(0);
    const T popped_factor = has_popped ? std::exp(popped_offset - kappa) : T(0);
    const T pushed_factor = has_pushed ? std::exp(pushed_offset - kappa) / s.push_sums[target] : T(0);
    constexpr T smallest = std::numeric_limits<T>::min();
    const T* unscale = s.row_unscale.data();
#pragma omp simd
    for (int64_t row = m; row < R2; ++row) {
      const T replaced_term = replaced_factor * (unscale[row] * replaced_total[row]);
      const T popped_term = weight[row] != NEG<T> ? popped_factor * popped_total[row] : T(0);
      const T sum = replaced_term + popped_term;
      const bool present = sum >= smallest;  // else its share is flushed, and so its gradient is 0
      const T inverse = T(1) / (present ? sum : T(1));
      replaced_share[row] = present ? replaced_term * inverse : T(0);
      popped_share[row] = present ? popped_term * inverse : T(0);
      share[row] = sum;
    }
#pragma omp simd
    for (int64_t row = std::max(m, R2); row < R; ++row) share[row] = replaced_factor * (unscale[row] * replaced_total[row]);
#pragma omp simd
    for (int64_t a = 0; a < N; ++a) share[R + a] = pushed_factor * s.push_terms[a * N + target];
    const T total = sum_rows(Rt - m, share + m);
    if (!(total > 0)) {
      current_alpha[target] = NEG<T>;
      std::fill(share, share + Rt, T(0));
      continue;
    }
    current_alpha[target] = kappa + std::log(total);
    const T inverse = T(1) / total;
#pragma omp simd
    for (int64_t row = m; row < Rt; ++row) {
      const T value = share[row] * inverse;
      share[row] = value >= smallest ? value : T(0);
    }
    for (int64_t j = 0; j < m; ++j) share[j] = exp_flushed(out[j] - current_alpha[target], floor);
  }
  T high = NEG<T>;
  for (int64_t c = 0; c < N; ++c) high = std::max(high, current_alpha[c]);
  T normalizer = NEG<T>;
  if (high != NEG<T>) {
    T sum = 0;
    for (int64_t c = 0; c < N; ++c) sum += exp_flushed(current_alpha[c] - high, floor);
    normalizer = std::log(sum) + high;
  }
  for (int64_t c = 0; c < N; ++c)
    for (int64_t j = 0; j < m; ++j)
      reading[c * m + j] = normalizer == NEG<T> ? T(0) : exp_flushed(column[c * Rt + j] - normalizer, floor);
}

template <typename T>
void forward_element(const Sizes& z, const T* push, const T* replace, const T* pop, const T* pushed,
                     const T* bottom, T* readings, T* gamma, T* shares, PopTables<T> pops, T* alpha) {
  const int64_t N = z.configs, Q = z.states, m = z.vector;
  initialize_element(z, bottom, gamma, shares, alpha);
  Step<T> s;
  std::vector<T> weights;
  for (int64_t t = 1; t <= z.steps; ++t)
    forward_step(z, t, push + (t - 1) * N * N, replace + (t - 1) * N * N, pop + (t - 1) * N * Q,
                 pushed + (t - 1) * m, readings + (t - 1) * N * m, gamma, shares, pops, alpha, s, weights);
}

// Scratch of the backward steps of one element.
template <typename T>
struct BackwardScratch {
  Step<T> step;
  std::vector<T> weights, grad_products, scaled_pop, grad_pushed_offset;
  std::vector<T> eta_popped, eta_popped_kept, eta_pushed, eta_zeros;  // per η row: its ∂/∂(pop total), 1 where kept, its push term's gradient
};

// Step t ≥ 1 of one element in reverse: given ∂r_t and the adjoints of column t and α[t]
// (complete once steps t+1 … n have run), the gradients of step t's actions (added to
// step_grad_*), and the adjoints it passes to columns 0 … t−1 and α[0 … t−1].
template <typename T>
void backward_step(const Sizes& z, int64_t t, const T* grad_reading, const T* step_push, const T* step_replace,
                   const T* step_pop, const T* step_pushed, const T* reading, const T* gamma, const T* shares,
                   PopTables<const T> pops, const T* alpha, T* grad_gamma, T* grad_alpha, T* step_grad_push,
                   T* step_grad_replace, T* step_grad_pop, T* step_grad_pushed, BackwardScratch<T>& scratch) {
  const int64_t N = z.configs, Q = z.states, S = z.symbols, m = z.vector, J = N + Q;
  Step<T>& s = scratch.step;
  std::vector<T>& weights = scratch.weights;
  std::vector<T>& grad_products = scratch.grad_products;
  std::vector<T>& scaled_pop = scratch.scaled_pop;
  std::vector<T>& grad_pushed_offset = scratch.grad_pushed_offset;
  row_weights(z, alpha, t, weights);
  grad_pushed_offset.resize(N);
  scratch.eta_popped.resize(m);
  scratch.eta_zeros.assign(m, T(0));
  scratch.eta_popped_kept.resize(m);
  scratch.eta_pushed.resize(m);
  const int64_t R = z.rows(t - 1), Rt = z.rows(t), R2 = t >= 2 ? z.rows(t - 2) : 0;
  const T* column = gamma + z.offset(t);
  T* grad_column = grad_gamma + z.offset(t);
  const T* current_alpha = alpha + t * N;
  T* grad_current_alpha = grad_alpha + t * N;
  // Readings: r = exp(log η − log Z).
  {
    T high = NEG<T>;
    for (int64_t c = 0; c < N; ++c) high = std::max(high, current_alpha[c]);
    if (high != NEG<T>) {
      const T floor = exp_floor<T>();
      T sum = 0;
      for (int64_t c = 0; c < N; ++c) sum += exp_flushed(current_alpha[c] - high, floor);
      T grad_normalizer = 0;
      for (int64_t c = 0; c < N; ++c)
        for (int64_t j = 0; j < m; ++j) {
          T g = grad_reading[c * m + j] * reading[c * m + j];
          grad_column[c * Rt + j] += g;
          grad_normalizer -= g;
        }
      for (int64_t c = 0; c < N; ++c)
        grad_current_alpha[c] += grad_normalizer * (exp_flushed(current_alpha[c] - high, floor) / sum);
    }
  }
  // log α[t] = log-sum over γ rows of log α(row) + γ; each term's weight is its share Ŝ,
  // computed in the forward relative to the largest term (as autograd through a shifted
  // log-sum-exp does), never as exp(term − log α[t]): log α[t] is rounded at its magnitude,
  // which reaches thousands.
  for (int64_t target = 0; target < N; ++target) {
    T g = grad_current_alpha[target];
    if (g == 0) continue;
    T* out = grad_column + target * Rt;
    const T* share = shares + z.offset(t) + target * Rt;
    T* grad_rows = grad_alpha - N;  // row (i, a) at m + (i+1)·N + a -> α[i][a], i ≥ 0
#pragma omp simd
    for (int64_t row = m + N; row < Rt; ++row) {
      T value = g * share[row];
      out[row] += value;
      grad_rows[row - m] += value;
    }
    for (int64_t row = m; row < m + N; ++row) out[row] += g * share[row];
  }
  products(z, t, shares, weights, alpha, step_push, step_replace, step_pop, s);
  if (t >= 2) pop_weights(z, t, alpha, s);
  const int64_t saved = t >= 2 ? z.offset(t - 2) : 0;
  const T* pop_total = pops.totals + saved;
  const T* replaced_shares = pops.replaced_shares + saved;
  const T* popped_shares = pops.popped_shares + saved;
  grad_products.assign(J * R, T(0));
  scaled_pop.assign(N * R2, T(0));
  std::fill(grad_pushed_offset.begin(), grad_pushed_offset.end(), T(0));
  for (int64_t target = 0; target < N; ++target) {
    const int64_t r = target / S, y = target % S;
    const T* values = column + target * Rt;
    const T* grads = grad_column + target * Rt;
    for (int64_t a = 0; a < N; ++a) step_grad_push[a * N + target] += grads[R + a];
    const T* replaced_total = s.total.data() + target * R;
    const T* replaced_share = replaced_shares + target * R2;
    const T* popped_total = pop_total + target * R2;
    const T* popped_share = popped_shares + target * R2;
    T* grad_replaced = grad_products.data() + target * R;
    T* scaled = scaled_pop.data() + target * R2;
#pragma omp simd
    for (int64_t row = 0; row < R2; ++row) {
      grad_replaced[row] = grads[row] * replaced_share[row];
      // g·(share/P), or (g·share)/P where share/P overflows (P subnormal)
      const T ratio = popped_share[row] / popped_total[row];
      const T scaled_or_nan = ratio <= std::numeric_limits<T>::max() ? grads[row] * ratio
                                                                      : grads[row] * popped_share[row] / popped_total[row];
      scaled[row] = popped_total[row] > 0 ? scaled_or_nan : T(0);
    }
#pragma omp simd
    for (int64_t row = R2; row < R; ++row) grad_replaced[row] = replaced_total[row] > 0 ? grads[row] : T(0);
    // η rows also hold the push of v_t: the same with a third term, the m rows at once
    // (vector lanes, where each row took two scalar logs and three exps). A row whose
    // gradient is 0, whose value is −∞ or whose terms are all −∞ keeps what the loop
    // above gave it. R2 > 0 (t ≥ 2) puts every η row among the pop's rows.
    const T floor = exp_floor<T>();
    const T popped_offset = R2 > 0 ? s.pop_offset[y * Q + r] : T(0);
    T* popped_grads = scratch.eta_popped.data();
    T* popped_kept = scratch.eta_popped_kept.data();
    const T* popped_or_zero = R2 > 0 ? popped_total : scratch.eta_zeros.data();  // t = 1: no pop
    const T *row_weights = weights.data(), *rho = s.rho.data();
    const T replaced_offset = s.right_offset[target], pushed_offset = s.pushed_offset[target];
    T* pushed_grads = scratch.eta_pushed.data();
#pragma omp simd
    for (int64_t row = 0; row < m; ++row) {
      const T g = grads[row], value = values[row], replaced_value = replaced_total[row], row_weight = row_weights[row];
      const T popped_value = popped_or_zero[row];
      const bool has_replaced = replaced_value > 0, has_popped = (popped_value > 0) & (row_weight != NEG<T>);
      const T replaced_log = std::log(has_replaced ? replaced_value : T(1)) + rho[row] + replaced_offset;
      const T popped_log = std::log(has_popped ? popped_value : T(1)) + popped_offset - row_weight;
      const T replaced = has_replaced ? replaced_log : NEG<T>, popped = has_popped ? popped_log : NEG<T>;
      const T term = step_pushed[row] + pushed_offset;
      const T high = std::max(replaced, std::max(popped, term));
      const bool used = (g != 0) & (value != NEG<T>) & (high != NEG<T>);  // & : every operand is loaded
      const T base = used ? high : T(0);
      const T replaced_share = exp_flushed(replaced - base, floor), popped_share = exp_flushed(popped - base, floor);
      const T term_share = exp_flushed(term - base, floor);
      const T scale = g / (used ? replaced_share + popped_share + term_share : T(1));
      grad_replaced[row] = used ? scale * replaced_share : grad_replaced[row];
      popped_kept[row] = used & has_popped ? T(1) : T(0);
      popped_grads[row] = scale * popped_share / popped_value;
      pushed_grads[row] = used & (term != NEG<T>) ? scale * term_share : T(0);
    }
    for (int64_t row = 0; row < m; ++row) {
      if (popped_kept[row] > 0) scaled_pop[target * R2 + row] = popped_grads[row];
      step_grad_pushed[row] += pushed_grads[row];
      grad_pushed_offset[target] += pushed_grads[row];
    }
  }
  // log(α[t−1] Δ⁺_t): each term's share of its sum, from the products' terms.
  for (int64_t target = 0; target < N; ++target) {
    const T g = grad_pushed_offset[target];
    grad_pushed_offset[target] = g != 0 && s.pushed_offset[target] != NEG<T> ? g / s.push_sums[target] : T(0);
  }
  for (int64_t c = 0; c < N; ++c) {
    const T* terms = s.push_terms.data() + c * N;
    T* out = step_grad_push + c * N;
    T total = 0;
    for (int64_t target = 0; target < N; ++target) {
      const T value = grad_pushed_offset[target] * terms[target];
      out[target] += value;
      total += value;
    }
    grad_alpha[(t - 1) * N + c] += total;
  }
  if (t >= 2) pop_backward(z, t, shares, scaled_pop.data(), s, grad_gamma, grad_products.data());
  // The products over column t−1: ∂Ĝ = (g/total) R̂ᵀ, ∂R̂ = Ĝᵀ (g/total).
  T* grad_previous = grad_gamma + z.offset(t - 1);
  for (int64_t j = 0; j < J; ++j) {
    T* g = grad_products.data() + j * R;
    const T* total = s.total.data() + j * R;
#pragma omp simd
    for (int64_t row = 0; row < R; ++row) {
      T quotient = g[row] / total[row];
      g[row] = total[row] > 0 ? quotient : T(0);
    }
  }
  for (int64_t c = 0; c < N; ++c) {
    s.terms.reset(J);
    for (int64_t j = 0; j < J; ++j) s.terms.add(s.rhat[c * J + j], grad_products.data() + j * R, j);
    s.dots.resize(s.terms.size());
    product_adjoint(R, s.ghat.data() + c * R, s.terms, s.dots.data(), grad_previous + c * R);
    for (int64_t i = 0; i < s.terms.size(); ++i) {
      const int64_t j = s.terms.indices[i];
      const T value = s.terms.weights[i] * s.dots[i];
      if (j < N)
        step_grad_replace[c * N + j] += value;
      else
        step_grad_pop[c * Q + j - N] += value;
    }
  }
}

template <typename T>
void backward_element(const Sizes& z, const T* grad_readings, const T* push, const T* replace, const T* pop,
                      const T* pushed, const T* readings, const T* gamma, const T* shares, PopTables<const T> pops,
                      const T* alpha, T* grad_push, T* grad_replace, T* grad_pop, T* grad_pushed, T* grad_bottom) {
  const int64_t N = z.configs, Q = z.states, m = z.vector, n = z.steps;
  std::vector<T> grad_gamma(z.table(), T(0)), grad_alpha((n + 1) * N, T(0));
  BackwardScratch<T> scratch;
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

// Element b's part of the (B, table) tables totals, replaced_shares, popped_shares.
template <typename T>
PopTables<T> pop_tables(const at::Tensor& totals, const at::Tensor& replaced_shares, const at::Tensor& popped_shares,
                        int64_t b) {
  const int64_t table = totals.size(1);
  return {static_cast<T*>(totals.data_ptr()) + b * table, static_cast<T*>(replaced_shares.data_ptr()) + b * table,
          static_cast<T*>(popped_shares.data_ptr()) + b * table};
}

Sizes sizes_of(const at::Tensor& push, const at::Tensor& pop, const at::Tensor& pushed) {
  Sizes z;
  z.batch = push.size(0);
  z.steps = push.size(1);
  z.configs = push.size(2);
  z.states = pop.size(3);
  TORCH_CHECK(z.states > 0 && z.configs % z.states == 0, "pop must be (B, n, N, Q) with Q dividing N");
  z.symbols = z.configs / z.states;
  z.vector = pushed.size(2);
  return z;
}

// push, replace (B, n, N, N), pop (B, n, N, Q), pushed (B, n, m), bottom (B, m): log weights.
// Returns readings (B, n, N·m) and what the backward needs: gamma, shares, pops,
// replaced_shares, popped_shares (B, table), alpha (B, n+1, N).
std::vector<at::Tensor> dvpda_forward(const at::Tensor& push, const at::Tensor& replace, const at::Tensor& pop,
                                      const at::Tensor& pushed, const at::Tensor& bottom) {
  check(push, 4, "push");
  check(replace, 4, "replace");
  check(pop, 4, "pop");
  check(pushed, 3, "pushed");
  check(bottom, 2, "bottom");
  for (const at::Tensor* tensor : {&replace, &pop, &pushed, &bottom})
    TORCH_CHECK(tensor->scalar_type() == push.scalar_type(), "the dVPDA kernel needs one dtype for every input");
  const Sizes z = sizes_of(push, pop, pushed);
  auto options = push.options();
  auto readings = at::empty({z.batch, z.steps, z.configs * z.vector}, options);
  auto gamma = at::empty({z.batch, z.table()}, options);
  auto shares = at::empty({z.batch, z.table()}, options);
  auto pops = at::empty({z.batch, z.table()}, options);
  auto replaced_shares = at::empty({z.batch, z.table()}, options);
  auto popped_shares = at::empty({z.batch, z.table()}, options);
  auto alpha = at::empty({z.batch, z.steps + 1, z.configs}, options);
  AT_DISPATCH_FLOATING_TYPES(push.scalar_type(), "dvpda_forward", [&] {
    const int64_t NN = z.steps * z.configs * z.configs, NQ = z.steps * z.configs * z.states;
    at::parallel_for(0, z.batch, 1, [&](int64_t begin, int64_t end) {
      for (int64_t b = begin; b < end; ++b) {
        forward_element<scalar_t>(
            z, push.data_ptr<scalar_t>() + b * NN, replace.data_ptr<scalar_t>() + b * NN,
            pop.data_ptr<scalar_t>() + b * NQ, pushed.data_ptr<scalar_t>() + b * z.steps * z.vector,
            bottom.data_ptr<scalar_t>() + b * z.vector, readings.data_ptr<scalar_t>() + b * z.steps * z.configs * z.vector,
            gamma.data_ptr<scalar_t>() + b * z.table(), shares.data_ptr<scalar_t>() + b * z.table(),
            pop_tables<scalar_t>(pops, replaced_shares, popped_shares, b),
            alpha.data_ptr<scalar_t>() + b * (z.steps + 1) * z.configs);
      }
    });
  });
  return {readings, gamma, shares, pops, replaced_shares, popped_shares, alpha};
}

// Gradients of log push, replace, pop, pushed and bottom, given those of the readings.
std::vector<at::Tensor> dvpda_backward(const at::Tensor& grad_readings, const at::Tensor& push,
                                       const at::Tensor& replace, const at::Tensor& pop, const at::Tensor& pushed,
                                       const at::Tensor& readings, const at::Tensor& gamma, const at::Tensor& shares,
                                       const at::Tensor& pops, const at::Tensor& replaced_shares,
                                       const at::Tensor& popped_shares, const at::Tensor& alpha) {
  check(grad_readings, 3, "grad_readings");
  const Sizes z = sizes_of(push, pop, pushed);
  auto grad_push = at::zeros_like(push);
  auto grad_replace = at::zeros_like(replace);
  auto grad_pop = at::zeros_like(pop);
  auto grad_pushed = at::zeros_like(pushed);
  auto grad_bottom = at::zeros({z.batch, z.vector}, push.options());
  AT_DISPATCH_FLOATING_TYPES(push.scalar_type(), "dvpda_backward", [&] {
    const int64_t NN = z.steps * z.configs * z.configs, NQ = z.steps * z.configs * z.states;
    const int64_t readings_size = z.steps * z.configs * z.vector;
    at::parallel_for(0, z.batch, 1, [&](int64_t begin, int64_t end) {
      for (int64_t b = begin; b < end; ++b) {
        backward_element<scalar_t>(
            z, grad_readings.data_ptr<scalar_t>() + b * readings_size, push.data_ptr<scalar_t>() + b * NN,
            replace.data_ptr<scalar_t>() + b * NN, pop.data_ptr<scalar_t>() + b * NQ,
            pushed.data_ptr<scalar_t>() + b * z.steps * z.vector, readings.data_ptr<scalar_t>() + b * readings_size,
            gamma.data_ptr<scalar_t>() + b * z.table(), shares.data_ptr<scalar_t>() + b * z.table(),
            pop_tables<const scalar_t>(pops, replaced_shares, popped_shares, b),
            alpha.data_ptr<scalar_t>() + b * (z.steps + 1) * z.configs,
            grad_push.data_ptr<scalar_t>() + b * NN, grad_replace.data_ptr<scalar_t>() + b * NN,
            grad_pop.data_ptr<scalar_t>() + b * NQ, grad_pushed.data_ptr<scalar_t>() + b * z.steps * z.vector,
            grad_bottom.data_ptr<scalar_t>() + b * z.vector);
      }
    });
  });
  return {grad_push, grad_replace, grad_pop, grad_pushed, grad_bottom};
}

// The same DP one step per call, for a controller that computes the actions of step t from
// the reading of step t − 1 (a stack RNN). The tables of capacity n (gamma, shares, pops,
// replaced_shares, popped_shares: (B, table), alpha: (B, n + 1, N)) are filled one column per call; the backward of step t
// adds into the adjoint tables grad_gamma (B, table) and grad_alpha (B, n + 1, N) and must
// run after those of steps t + 1 … n. A step's transitions come as the controller's logits
// (B, N·(2N + Q)), per configuration c the N push, N replace and Q pop logits of c
// (``NondeterministicActions.from_logits``), rows of any stride: the (B, N·(2N + Q)) columns of
// the controller's output need no copy, and their gradient is one tensor.
Sizes step_sizes(const at::Tensor& logits, const at::Tensor& pushed, const at::Tensor& alpha, int64_t t) {
  Sizes z;
  z.batch = logits.size(0);
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

// One element's push, replace and pop logits, each contiguous, from its row of the logits.
template <typename T>
struct Transitions {
  std::vector<T> push, replace, pop;

  void unpack(const Sizes& z, const T* row) {
    const int64_t N = z.configs, Q = z.states, width = 2 * N + Q;
    push.resize(N * N);
    replace.resize(N * N);
    pop.resize(N * Q);
    for (int64_t c = 0; c < N; ++c) {
      std::copy(row + c * width, row + c * width + N, push.data() + c * N);
      std::copy(row + c * width + N, row + c * width + 2 * N, replace.data() + c * N);
      std::copy(row + c * width + 2 * N, row + c * width + 2 * N + Q, pop.data() + c * Q);
    }
  }

  // Writes push, replace and pop into `row` in the logits' layout.
  void pack(const Sizes& z, T* row) const {
    const int64_t N = z.configs, Q = z.states, width = 2 * N + Q;
    for (int64_t c = 0; c < N; ++c) {
      std::copy(push.data() + c * N, push.data() + (c + 1) * N, row + c * width);
      std::copy(replace.data() + c * N, replace.data() + (c + 1) * N, row + c * width + N);
      std::copy(pop.data() + c * Q, pop.data() + (c + 1) * Q, row + c * width + 2 * N);
    }
  }
};

// Column 0 of tables for `capacity` steps, from log v₀ (B, m): gamma, shares, pops,
// replaced_shares, popped_shares, alpha.
std::vector<at::Tensor> dvpda_start(const at::Tensor& bottom, int64_t capacity, int64_t states, int64_t symbols) {
  check(bottom, 2, "bottom");
  Sizes z;
  z.batch = bottom.size(0);
  z.states = states;
  z.symbols = symbols;
  z.configs = states * symbols;
  z.vector = bottom.size(1);
  z.steps = capacity;
  auto options = bottom.options();
  auto gamma = at::empty({z.batch, z.table()}, options);
  auto shares = at::empty({z.batch, z.table()}, options);
  auto pops = at::empty({z.batch, z.table()}, options);
  auto replaced_shares = at::empty({z.batch, z.table()}, options);
  auto popped_shares = at::empty({z.batch, z.table()}, options);
  auto alpha = at::empty({z.batch, z.steps + 1, z.configs}, options);
  AT_DISPATCH_FLOATING_TYPES(bottom.scalar_type(), "dvpda_start", [&] {
    at::parallel_for(0, z.batch, 1, [&](int64_t begin, int64_t end) {
      for (int64_t b = begin; b < end; ++b)
        initialize_element<scalar_t>(z, bottom.data_ptr<scalar_t>() + b * z.vector,
                                     gamma.data_ptr<scalar_t>() + b * z.table(),
                                     shares.data_ptr<scalar_t>() + b * z.table(),
                                     alpha.data_ptr<scalar_t>() + b * (z.steps + 1) * z.configs);
    });
  });
  return {gamma, shares, pops, replaced_shares, popped_shares, alpha};
}

// The element that a step call visits i-th of [begin, end). A call walks its elements once, each
// one's tables (about 1 MB at n = 32) in turn, so the next call finds in cache only the last few:
// successive calls walk in alternating directions, each starting where the one before it ended
// (forward steps ascending for odd t; a step's backward opposite to its forward, which at t = n
// runs just before it). The backward of a stack RNN's step at n = 32, batch 32, ran 1.15x faster.
int64_t visited(bool ascending, int64_t begin, int64_t end, int64_t i) { return ascending ? i : begin + end - 1 - i; }

// Step t: logits (B, N·(2N + Q)) and pushed (B, m) log weights; writes column t into the
// tables and returns r_t (B, N·m).
at::Tensor dvpda_step(int64_t t, const at::Tensor& logits, const at::Tensor& pushed, at::Tensor gamma,
                      at::Tensor shares, at::Tensor pops, at::Tensor replaced_shares, at::Tensor popped_shares,
                      at::Tensor alpha) {
  check_logits(logits);
  check(pushed, 2, "pushed");
  for (const at::Tensor& tensor : {pushed, gamma, alpha})
    TORCH_CHECK(tensor.scalar_type() == logits.scalar_type(), "the dVPDA kernel needs one dtype for every input");
  const Sizes z = step_sizes(logits, pushed, alpha, t);
  auto reading = at::empty({z.batch, z.configs * z.vector}, logits.options());
  AT_DISPATCH_FLOATING_TYPES(logits.scalar_type(), "dvpda_step", [&] {
    const int64_t row_stride = logits.stride(0);
    at::parallel_for(0, z.batch, 1, [&](int64_t begin, int64_t end) {
      Step<scalar_t> s;
      Transitions<scalar_t> transitions;
      std::vector<scalar_t> weights;
      for (int64_t i = begin; i < end; ++i) {
        const int64_t b = visited(t % 2 == 1, begin, end, i);
        transitions.unpack(z, logits.data_ptr<scalar_t>() + b * row_stride);
        forward_step<scalar_t>(z, t, transitions.push.data(), transitions.replace.data(), transitions.pop.data(),
                               pushed.data_ptr<scalar_t>() + b * z.vector,
                               reading.data_ptr<scalar_t>() + b * z.configs * z.vector,
                               gamma.data_ptr<scalar_t>() + b * z.table(), shares.data_ptr<scalar_t>() + b * z.table(),
                               pop_tables<scalar_t>(pops, replaced_shares, popped_shares, b),
                               alpha.data_ptr<scalar_t>() + b * (z.steps + 1) * z.configs, s, weights);
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
                                            const at::Tensor& replaced_shares, const at::Tensor& popped_shares,
                                            const at::Tensor& alpha, at::Tensor grad_gamma, at::Tensor grad_alpha) {
  check(grad_reading, 2, "grad_reading");
  check_logits(logits);
  const Sizes z = step_sizes(logits, pushed, alpha, t);
  auto grad_logits = at::empty({z.batch, logits.size(1)}, logits.options());
  auto grad_pushed = at::zeros_like(pushed);
  AT_DISPATCH_FLOATING_TYPES(logits.scalar_type(), "dvpda_step_backward", [&] {
    const int64_t Nm = z.configs * z.vector, A = (z.steps + 1) * z.configs, row_stride = logits.stride(0);
    at::parallel_for(0, z.batch, 1, [&](int64_t begin, int64_t end) {
      BackwardScratch<scalar_t> scratch;
      Transitions<scalar_t> transitions, grads;
      for (int64_t i = begin; i < end; ++i) {
        const int64_t b = visited(t % 2 == 0, begin, end, i);
        transitions.unpack(z, logits.data_ptr<scalar_t>() + b * row_stride);
        grads.push.assign(transitions.push.size(), scalar_t(0));
        grads.replace.assign(transitions.replace.size(), scalar_t(0));
        grads.pop.assign(transitions.pop.size(), scalar_t(0));
        backward_step<scalar_t>(
            z, t, grad_reading.data_ptr<scalar_t>() + b * Nm, transitions.push.data(), transitions.replace.data(),
            transitions.pop.data(), pushed.data_ptr<scalar_t>() + b * z.vector,
            reading.data_ptr<scalar_t>() + b * Nm, gamma.data_ptr<scalar_t>() + b * z.table(),
            shares.data_ptr<scalar_t>() + b * z.table(), pop_tables<const scalar_t>(pops, replaced_shares, popped_shares, b),
            alpha.data_ptr<scalar_t>() + b * A, grad_gamma.data_ptr<scalar_t>() + b * z.table(),
            grad_alpha.data_ptr<scalar_t>() + b * A, grads.push.data(), grads.replace.data(), grads.pop.data(),
            grad_pushed.data_ptr<scalar_t>() + b * z.vector, scratch);
        grads.pack(z, grad_logits.data_ptr<scalar_t>() + b * logits.size(1));
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
  library.def("forward(Tensor push, Tensor replace, Tensor pop, Tensor pushed, Tensor bottom) -> Tensor[]");
  library.def(
      "backward(Tensor grad_readings, Tensor push, Tensor replace, Tensor pop, Tensor pushed, Tensor readings, "
      "Tensor gamma, Tensor shares, Tensor pops, Tensor replaced_shares, Tensor popped_shares, Tensor alpha) "
      "-> Tensor[]");
  library.def("start(Tensor bottom, int capacity, int states, int symbols) -> Tensor[]");
  library.def(
      "step(int t, Tensor logits, Tensor pushed, Tensor(a!) gamma, Tensor(b!) shares, Tensor(c!) pops, "
      "Tensor(d!) replaced_shares, Tensor(e!) popped_shares, Tensor(f!) alpha) -> Tensor");
  library.def(
      "step_backward(int t, Tensor grad_reading, Tensor logits, Tensor pushed, Tensor reading, Tensor gamma, "
      "Tensor shares, Tensor pops, Tensor replaced_shares, Tensor popped_shares, Tensor alpha, "
      "Tensor(a!) grad_gamma, Tensor(b!) grad_alpha) -> Tensor[]");
}

TORCH_LIBRARY_IMPL(stacklm_dvpda, CPU, library) {
  library.impl("forward", &dvpda_forward);
  library.impl("backward", &dvpda_backward);
  library.impl("start", &dvpda_start);
  library.impl("step", &dvpda_step);
  library.impl("step_backward", &dvpda_step_backward);
}
