// Device: where a tensor's memory lives (CPU or a CUDA device index).
#pragma once
#include <cstdint>
#include <ostream>
#include <string>

namespace mpx {

enum class DeviceType : uint8_t { kCPU = 0, kCUDA = 1 };
inline constexpr int kNumDeviceTypes = 2;
/// LibTorch's spellings: `x.to(kCUDA)`, `Device device(kCPU)`.
inline constexpr DeviceType kCPU = DeviceType::kCPU;
inline constexpr DeviceType kCUDA = DeviceType::kCUDA;

/// A device: type plus index (the index is 0 for the CPU).
struct Device {
  DeviceType type = DeviceType::kCPU;
  int index = 0;
  constexpr Device() = default;
  constexpr Device(DeviceType t, int i = 0) : type(t), index(i) {}
  /// Parses "cpu", "cuda", "cuda:1"; throws mpx::Error otherwise.
  explicit Device(const std::string& spec);
  static constexpr Device cpu() { return Device(DeviceType::kCPU, 0); }
  static constexpr Device cuda(int index = 0) { return Device(DeviceType::kCUDA, index); }
  bool is_cpu() const { return type == DeviceType::kCPU; }
  bool is_cuda() const { return type == DeviceType::kCUDA; }
  std::string str() const;
  friend bool operator==(const Device& a, const Device& b) { return a.type == b.type && a.index == b.index; }
  friend bool operator!=(const Device& a, const Device& b) { return !(a == b); }
  friend std::ostream& operator<<(std::ostream& os, const Device& d) { return os << d.str(); }
};

/// True when mpx was built with CUDA and at least one device is visible.
bool cuda_is_available();
/// Number of visible CUDA devices (0 without CUDA).
int cuda_device_count();

}  // namespace mpx
