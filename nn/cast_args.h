// cast_floating: casts floating tensors inside forward arguments/results (tensors, containers, user types with to(DType)).
#pragma once
#include <map>
#include <optional>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "ops/op_utils.h"

namespace mpx::nn {

/// Returns `value` with every floating tensor in it cast to `dtype` (differentiably, through
/// Tensor::to): a Tensor itself, the elements of std::vector / std::map / std::unordered_map
/// values / std::pair / std::tuple / std::optional (recursively), and any type providing
/// `T to(mpx::DType) const`. Integer and bool tensors and all other values pass untouched
/// (apex's applier semantics: what is not floating is not cast).
template <typename T>
T cast_floating(const T& value, DType dtype);

namespace detail {
template <typename T>
struct is_vector : std::false_type {};
template <typename T, typename A>
struct is_vector<std::vector<T, A>> : std::true_type {};
template <typename T>
struct is_map : std::false_type {};
template <typename K, typename V, typename C, typename A>
struct is_map<std::map<K, V, C, A>> : std::true_type {};
template <typename K, typename V, typename H, typename E, typename A>
struct is_map<std::unordered_map<K, V, H, E, A>> : std::true_type {};
template <typename T>
struct is_tuple_like : std::false_type {};
template <typename... Ts>
struct is_tuple_like<std::tuple<Ts...>> : std::true_type {};
template <typename A, typename B>
struct is_tuple_like<std::pair<A, B>> : std::true_type {};
template <typename T>
struct is_optional : std::false_type {};
template <typename T>
struct is_optional<std::optional<T>> : std::true_type {};
}  // namespace detail

template <typename T>
T cast_floating(const T& value, DType dtype) {
  if constexpr (std::is_same_v<T, Tensor>) {
    if (!value.defined() || !value.is_floating_point() || value.dtype() == dtype) return value;
    return value.to(dtype);
  } else if constexpr (detail::is_vector<T>::value) {
    T out;
    out.reserve(value.size());
    for (const auto& v : value) out.push_back(cast_floating(v, dtype));
    return out;
  } else if constexpr (detail::is_map<T>::value) {
    T out;
    for (const auto& [k, v] : value) out.emplace(k, cast_floating(v, dtype));
    return out;
  } else if constexpr (detail::is_tuple_like<T>::value) {
    return std::apply([&](const auto&... e) { return T(cast_floating(e, dtype)...); }, value);
  } else if constexpr (detail::is_optional<T>::value) {
    if (!value) return value;
    return T(cast_floating(*value, dtype));
  } else if constexpr (requires(const T& v) {
                         { v.to(dtype) } -> std::convertible_to<T>;
                       }) {
    return value.to(dtype);
  } else {
    return value;
  }
}

/// What a holder call `net(x)` does around forward (amp::initialize sets it on models):
/// cast floating inputs, run forward under autocast, cast floating outputs.
struct ForwardCast {
  /// Cast floating tensors in the arguments to this dtype (apex's input caster, O0/O2/O3).
  std::optional<DType> inputs;
  /// Cast floating tensors in the result to this dtype (apex's output caster).
  std::optional<DType> outputs;
  /// Run forward with autocast enabled to this dtype (O1).
  std::optional<DType> autocast;
  /// The cast ops use inside that autocast region (amp installs its weight cast cache; null: a
  /// plain cast) and a callback run when the region ends (amp clears the cache there).
  Tensor (*autocast_cast)(const Tensor& t, DType to) = nullptr;
  void (*autocast_exit)() = nullptr;
  bool active() const { return inputs || outputs || autocast; }
};

namespace detail {
/// Sets the thread's autocast state for the duration of a forward call (nn can't use amp's guard).
class ForwardAutocastScope {
 public:
  explicit ForwardAutocastScope(const ForwardCast& fc)
      : saved_(autocast_state()), active_(fc.autocast.has_value()), exit_(fc.autocast_exit) {
    if (active_) {
      autocast_state().enabled = true;
      autocast_state().dtype = *fc.autocast;
      if (fc.autocast_cast) autocast_state().cast = fc.autocast_cast;
    }
  }
  ~ForwardAutocastScope() {
    if (!active_) return;
    autocast_state() = saved_;
    if (exit_) exit_();
  }
  ForwardAutocastScope(const ForwardAutocastScope&) = delete;
  ForwardAutocastScope& operator=(const ForwardAutocastScope&) = delete;

 private:
  AutocastState saved_;
  bool active_;
  void (*exit_)();
};
}  // namespace detail

}  // namespace mpx::nn
