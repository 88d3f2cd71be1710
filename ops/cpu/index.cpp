// CPU kernels of the index family (ops/index_kernels.h): gathers and scatters along a dim, masked fill, triangles, embedding, topk and sort, multinomial.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/random.h"
#include "ops/cpu/loops.h"
#include "ops/dispatch.h"

namespace mpx::cpu {
namespace {

// A shape split around `dim`: outer (dims before it), n (its size), inner (dims after it).
struct Around {
  int64_t outer = 1, n = 1, inner = 1;
};
Around around(const IntList& sizes, int64_t dim) {
  Around a;
  for (int64_t d = 0; d < static_cast<int64_t>(sizes.size()); ++d) {
    if (d < dim) a.outer *= sizes[d];
    else if (d == dim) a.n = sizes[d];
    else a.inner *= sizes[d];
  }
  return a;
}

// Element offset (strides st) of the o-th element, in row-major order, of the dims [0, end) of sizes.
int64_t outer_offset(int64_t o, const IntList& sizes, const IntList& st, int64_t end) {
  int64_t off = 0;
  for (int64_t d = end - 1; d >= 0; --d) {
    off += (o % sizes[d]) * st[d];
    o /= sizes[d];
  }
  return off;
}

// Offsets (strides st) of every element of the dims after `dim` of sizes, in row-major order.
std::vector<int64_t> inner_offsets(const IntList& sizes, const IntList& st, int64_t dim) {
  std::vector<int64_t> offs{0};
  for (int64_t d = dim + 1; d < static_cast<int64_t>(sizes.size()); ++d) {
    std::vector<int64_t> next;
    next.reserve(offs.size() * static_cast<size_t>(sizes[d]));
    for (int64_t base : offs)
      for (int64_t i = 0; i < sizes[d]; ++i) next.push_back(base + i * st[d]);
    offs = std::move(next);
  }
  return offs;
}

bool is_identity(const std::vector<int64_t>& offs) {
  for (size_t i = 0; i < offs.size(); ++i)
    if (offs[i] != static_cast<int64_t>(i)) return false;
  return true;
}

template <typename T> T zero() { return static_cast<T>(0.0f); }

// a + alpha * b in T's compute type (integers in i64, wrapping as PyTorch's do).
template <typename T> T add_scaled(T a, T b, double alpha) {
  if constexpr (std::is_integral_v<T>)
    return static_cast<T>(static_cast<int64_t>(a) + static_cast<int64_t>(alpha) * static_cast<int64_t>(b));
  else {
    using A = acc_t<T>;
    return static_cast<T>(static_cast<A>(a) + static_cast<A>(alpha) * static_cast<A>(b));
  }
}

template <typename T> struct IndexSelect {
  static void run(const Tensor& out, const Tensor& in, int64_t dim, const Tensor& index) {
    const IntList& sz = in.sizes();
    const Around a = around(sz, dim);
    const int64_t n = index.numel(), V = a.n, sd = in.stride(dim);
    const std::vector<int64_t> ioff = inner_offsets(sz, in.strides(), dim);
    const bool flat = is_identity(ioff);
    const T* x = static_cast<const T*>(in.raw_data());
    const int64_t* idx = index.data_ptr<int64_t>();
    T* o = static_cast<T*>(out.raw_data());
    parallel_for(a.outer * n, std::max<int64_t>(1, kGrain / std::max<int64_t>(a.inner, 1)), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const int64_t v = idx[r % n];
        T* dst = o + r * a.inner;
        if (v < 0 || v >= V) {  // the op layer checked; this only guards memory
          fill_bits(dst, a.inner, zero<T>());
          continue;
        }
        const T* src = x + outer_offset(r / n, sz, in.strides(), dim) + v * sd;
        if (flat) std::memcpy(static_cast<void*>(dst), static_cast<const void*>(src), sizeof(T) * a.inner);
        else
          for (int64_t i = 0; i < a.inner; ++i) dst[i] = src[ioff[i]];
      }
    });
  }
};

// Chunks of the inner dims handed to one thread by the accumulating kernels.
constexpr int64_t kInnerChunk = 4096;

template <typename T> struct IndexAdd {
  static void run(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src, double alpha) {
    const Around a = around(out.sizes(), dim);
    const int64_t n = index.numel(), V = a.n;
    const int64_t chunks = (a.inner + kInnerChunk - 1) / kInnerChunk;
    const int64_t* idx = index.data_ptr<int64_t>();
    const T* s = static_cast<const T*>(src.raw_data());
    T* o = static_cast<T*>(out.raw_data());
    // Threads own disjoint (outer, inner chunk) blocks; within one, indices add in order.
    parallel_for(a.outer * chunks, std::max<int64_t>(1, kGrain / std::max<int64_t>(n * std::min(a.inner, kInnerChunk), 1)),
                 [&](int64_t b, int64_t e) {
                   for (int64_t t = b; t < e; ++t) {
                     const int64_t oo = t / chunks, i0 = (t % chunks) * kInnerChunk;
                     const int64_t i1 = std::min(a.inner, i0 + kInnerChunk);
                     for (int64_t j = 0; j < n; ++j) {
                       const int64_t v = idx[j];
                       if (v < 0 || v >= V) continue;
                       T* dst = o + (oo * V + v) * a.inner;
                       const T* sr = s + (oo * n + j) * a.inner;
                       for (int64_t i = i0; i < i1; ++i) dst[i] = add_scaled(dst[i], sr[i], alpha);
                     }
                   }
                 });
  }
};

template <typename T> struct Gather {
  static void run(const Tensor& out, const Tensor& in, int64_t dim, const Tensor& index) {
    const IntList& isz = index.sizes();
    const Around a = around(isz, dim);
    const int64_t V = in.size(dim), sd = in.stride(dim);
    const std::vector<int64_t> ioff = inner_offsets(isz, in.strides(), dim);
    const T* x = static_cast<const T*>(in.raw_data());
    const int64_t* idx = index.data_ptr<int64_t>();
    T* o = static_cast<T*>(out.raw_data());
    parallel_for(a.outer * a.n, std::max<int64_t>(1, kGrain / std::max<int64_t>(a.inner, 1)), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const int64_t base = outer_offset(r / a.n, isz, in.strides(), dim);
        for (int64_t i = 0; i < a.inner; ++i) {
          const int64_t v = idx[r * a.inner + i];
          o[r * a.inner + i] = (v < 0 || v >= V) ? zero<T>() : x[base + v * sd + ioff[i]];
        }
      }
    });
  }
};

template <typename T, bool Add> struct Scatter {
  static void run(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src) {
    const IntList& isz = index.sizes();
    const Around a = around(isz, dim);
    const int64_t V = out.size(dim), sd = out.stride(dim);
    const std::vector<int64_t> ooff = inner_offsets(isz, out.strides(), dim);
    const int64_t chunks = (a.inner + kInnerChunk - 1) / kInnerChunk;
    const int64_t* idx = index.data_ptr<int64_t>();
    const T* s = static_cast<const T*>(src.raw_data());
    T* o = static_cast<T*>(out.raw_data());
    // Index positions that differ outside `dim` write different elements: threads own
    // (outer, inner chunk) blocks and walk `dim` in order (the last write wins, sums are ordered).
    parallel_for(a.outer * chunks, std::max<int64_t>(1, kGrain / std::max<int64_t>(a.n * std::min(a.inner, kInnerChunk), 1)),
                 [&](int64_t b, int64_t e) {
                   for (int64_t t = b; t < e; ++t) {
                     const int64_t oo = t / chunks, i0 = (t % chunks) * kInnerChunk;
                     const int64_t i1 = std::min(a.inner, i0 + kInnerChunk);
                     const int64_t base = outer_offset(oo, isz, out.strides(), dim);
                     for (int64_t j = 0; j < a.n; ++j) {
                       const int64_t row = (oo * a.n + j) * a.inner;
                       for (int64_t i = i0; i < i1; ++i) {
                         const int64_t v = idx[row + i];
                         if (v < 0 || v >= V) continue;
                         T& dst = o[base + v * sd + ooff[i]];
                         if constexpr (Add) dst = add_scaled(dst, s[row + i], 1.0);
                         else dst = s[row + i];
                       }
                     }
                   }
                 });
  }
};
template <typename T> using ScatterSet = Scatter<T, false>;
template <typename T> using ScatterAdd = Scatter<T, true>;

template <typename T> struct MaskedFill {
  static void run(const Tensor& out, const Tensor& in, const Tensor& mask, double value) {
    const T v = static_cast<T>(value);
    elementwise<T, T, bool>(out, [v](T x, bool m) { return m ? v : x; }, in, mask);
  }
};

template <typename T, bool Lower> struct Tri {
  static void run(const Tensor& out, const Tensor& in, int64_t diagonal) {
    const int64_t nd = in.dim(), R = in.size(-2), C = in.size(-1);
    const int64_t sr = in.stride(-2), sc = in.stride(-1);
    const int64_t batch = R * C == 0 ? 0 : in.numel() / (R * C);
    const T* x = static_cast<const T*>(in.raw_data());
    T* o = static_cast<T*>(out.raw_data());
    parallel_for(batch * R, std::max<int64_t>(1, kGrain / std::max<int64_t>(C, 1)), [&](int64_t b, int64_t e) {
      for (int64_t row = b; row < e; ++row) {
        const int64_t r = row % R;
        const T* src = x + outer_offset(row / R, in.sizes(), in.strides(), nd - 2) + r * sr;
        T* dst = o + row * C;
        for (int64_t c = 0; c < C; ++c) {
          const bool keep = Lower ? c - r <= diagonal : c - r >= diagonal;
          dst[c] = keep ? src[c * sc] : zero<T>();
        }
      }
    });
  }
};
template <typename T> using Tril = Tri<T, true>;
template <typename T> using Triu = Tri<T, false>;

template <typename T> struct Embedding {
  static void run(const Tensor& out, const Tensor& weight, const Tensor& indices) {
    const int64_t N = indices.numel(), V = weight.size(0), D = weight.size(1);
    const T* w = static_cast<const T*>(weight.raw_data());
    const int64_t* idx = indices.data_ptr<int64_t>();
    T* o = static_cast<T*>(out.raw_data());
    parallel_for(N, std::max<int64_t>(1, kGrain / std::max<int64_t>(D, 1)), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const int64_t v = idx[r];
        if (v < 0 || v >= V) fill_bits(o + r * D, D, zero<T>());
        else std::memcpy(static_cast<void*>(o + r * D), static_cast<const void*>(w + v * D), sizeof(T) * D);
      }
    });
  }
};

template <typename T> struct EmbeddingBackward {
  // The CPU's order is always fixed (each row sums its gradients in index order), so
  // `deterministic` changes nothing here.
  static void run(const Tensor& grad_weight, const Tensor& grad, const Tensor& indices, int64_t padding_idx, bool) {
    using A = acc_t<T>;
    const int64_t N = indices.numel(), V = grad_weight.size(0), D = grad_weight.size(1);
    const T* g = static_cast<const T*>(grad.raw_data());
    const int64_t* idx = indices.data_ptr<int64_t>();
    T* gw = static_cast<T*>(grad_weight.raw_data());
    // Threads own ranges of table rows, each scanning all indices for its own: whole rows are
    // summed contiguously, and f16/bf16 need only their range's f32 rows.
    parallel_for(V, std::max<int64_t>(1, (V + 63) / 64), [&](int64_t v0, int64_t v1) {
      std::vector<A> buf;
      A* acc;
      if constexpr (std::is_same_v<A, T>) {
        acc = gw + v0 * D;
      } else {
        buf.resize(static_cast<size_t>((v1 - v0) * D));
        acc = buf.data();
      }
      std::fill(acc, acc + (v1 - v0) * D, A(0));
      for (int64_t n = 0; n < N; ++n) {
        const int64_t v = idx[n];
        if (v < v0 || v >= v1 || v == padding_idx) continue;
        A* row = acc + (v - v0) * D;
        const T* gr = g + n * D;
        for (int64_t d = 0; d < D; ++d) row[d] += static_cast<A>(gr[d]);
      }
      if constexpr (!std::is_same_v<A, T>)
        for (int64_t i = 0; i < (v1 - v0) * D; ++i) gw[v0 * D + i] = static_cast<T>(acc[i]);
    });
  }
};

// a ranks above b: a larger value (NaN above every number), ties broken by the lower index.
template <typename T> bool value_greater(T a, T b) {
  if constexpr (std::is_integral_v<T>) return a > b;
  else {
    const double x = static_cast<double>(static_cast<acc_t<T>>(a)), y = static_cast<double>(static_cast<acc_t<T>>(b));
    if (std::isnan(x)) return !std::isnan(y);
    if (std::isnan(y)) return false;
    return x > y;
  }
}

template <typename T> struct Topk {
  static void run(const Tensor& values, const Tensor& indices, const Tensor& in, int64_t k, int64_t dim, bool largest,
                  bool) {
    const IntList& sz = in.sizes();
    const Around a = around(sz, dim);
    const int64_t n = a.n, sd = in.stride(dim);
    const std::vector<int64_t> ioff = inner_offsets(sz, in.strides(), dim);
    const T* x = static_cast<const T*>(in.raw_data());
    T* vo = static_cast<T*>(values.raw_data());
    int64_t* io = indices.data_ptr<int64_t>();
    auto before = [largest](const std::pair<T, int64_t>& p, const std::pair<T, int64_t>& q) {
      const bool gt = largest ? value_greater(p.first, q.first) : value_greater(q.first, p.first);
      const bool lt = largest ? value_greater(q.first, p.first) : value_greater(p.first, q.first);
      return gt || (!lt && p.second < q.second);
    };
    parallel_for(a.outer * a.inner, std::max<int64_t>(1, kGrain / std::max<int64_t>(n, 1)), [&](int64_t b, int64_t e) {
      std::vector<std::pair<T, int64_t>> lane(static_cast<size_t>(n));
      for (int64_t l = b; l < e; ++l) {
        const int64_t oo = l / a.inner, i = l % a.inner;
        const T* src = x + outer_offset(oo, sz, in.strides(), dim) + ioff[i];
        for (int64_t j = 0; j < n; ++j) lane[j] = {src[j * sd], j};
        if (k == n)  // sort: the order is total (ties by index), so any sort gives the one result
          std::sort(lane.begin(), lane.end(), before);
        else
          std::partial_sort(lane.begin(), lane.begin() + k, lane.end(), before);
        for (int64_t j = 0; j < k; ++j) {
          vo[(oo * k + j) * a.inner + i] = lane[j].first;
          io[(oo * k + j) * a.inner + i] = lane[j].second;
        }
      }
    });
  }
};

template <typename T> struct Multinomial {
  static void run(const Tensor& out, const Tensor& probs, int64_t num_samples, bool replacement, uint64_t seed,
                  uint64_t offset) {
    const int64_t R = probs.size(0), C = probs.size(1);
    const T* p = static_cast<const T*>(probs.raw_data());
    int64_t* o = out.data_ptr<int64_t>();
    // Sums in f64 in index order and the same comparisons as the CUDA kernel, so both draw alike.
    parallel_for(R, 1, [&](int64_t b, int64_t e) {
      std::vector<double> w(static_cast<size_t>(C));
      for (int64_t r = b; r < e; ++r) {
        for (int64_t c = 0; c < C; ++c) w[c] = static_cast<double>(static_cast<acc_t<T>>(p[r * C + c]));
        for (int64_t s = 0; s < num_samples; ++s) {
          double total = 0.0;
          for (int64_t c = 0; c < C; ++c) total += w[c];
          const double u = random::uniform(seed, offset + static_cast<uint64_t>(r * num_samples + s));
          const double threshold = u * total;
          double cum = 0.0;
          int64_t pick = -1, last = 0;
          for (int64_t c = 0; c < C; ++c) {
            if (w[c] <= 0.0) continue;
            last = c;
            cum += w[c];
            if (threshold < cum) {
              pick = c;
              break;
            }
          }
          if (pick < 0) pick = last;  // u * total rounded up to total: the last positive category
          o[r * num_samples + s] = pick;
          if (!replacement) w[pick] = 0.0;
        }
      }
    });
  }
};

}  // namespace

MPX_REGISTER_KERNELS(cpu_index) {
  using D = DeviceType;
  using namespace dispatch;
  register_mask<OpId::index_select, IndexSelect, dtypes::all>(D::kCPU);
  register_mask<OpId::index_add, IndexAdd, dtypes::numeric>(D::kCPU);
  register_mask<OpId::gather, Gather, dtypes::all>(D::kCPU);
  register_mask<OpId::scatter, ScatterSet, dtypes::all>(D::kCPU);
  register_mask<OpId::scatter_add, ScatterAdd, dtypes::numeric>(D::kCPU);
  register_mask<OpId::masked_fill, MaskedFill, dtypes::all>(D::kCPU);
  register_mask<OpId::tril, Tril, dtypes::all>(D::kCPU);
  register_mask<OpId::triu, Triu, dtypes::all>(D::kCPU);
  register_mask<OpId::embedding, Embedding, dtypes::floats>(D::kCPU);
  register_mask<OpId::embedding_backward, EmbeddingBackward, dtypes::floats>(D::kCPU);
  register_mask<OpId::topk, Topk, dtypes::numeric>(D::kCPU);
  register_mask<OpId::sort, Topk, dtypes::numeric>(D::kCPU);
  register_mask<OpId::multinomial, Multinomial, dtypes::floats>(D::kCPU);
}

}  // namespace mpx::cpu
