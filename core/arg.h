// MPX_ARG: the chained-setter option macro shared by every options struct (LibTorch's TORCH_ARG).
#pragma once

/// Declares an option `name` of type T: a chained setter `name(v)`, a getter `name()` and the
/// member `name_`. Follow it with `= default_value;` (LibTorch's TORCH_ARG).
#define MPX_ARG(T, name)                                                 \
 public:                                                                 \
  auto name(const T& new_##name)->decltype(*this) {                      \
    this->name##_ = new_##name;                                          \
    return *this;                                                        \
  }                                                                      \
  const T& name() const noexcept { return this->name##_; }               \
  T& name() noexcept { return this->name##_; }                           \
                                                                         \
 public:                                                                 \
  T name##_
