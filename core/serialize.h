// Safetensors I/O: save/load named tensors (and modules, via their state dicts) in the format PyTorch's safetensors uses.
#pragma once
#include <concepts>
#include <cstdint>
#include <map>
#include <string>
#include <type_traits>
#include <utility>

#include "core/tensor.h"

namespace mpx {

/// Named tensors, ordered by name (what save_tensors takes and load_tensors returns).
using TensorDict = std::map<std::string, Tensor>;
/// The string -> string "__metadata__" table of a safetensors file.
using Metadata = std::map<std::string, std::string>;

/// Largest JSON header a file may declare (the limit of the reference implementation).
inline constexpr uint64_t kMaxSafetensorsHeader = 100'000'000;

/// Writes `tensors` to `path` in the safetensors format (8-byte LE header length, JSON header,
/// C-contiguous little-endian data). Tensors on other devices or with other layouts are copied
/// to dense CPU memory one at a time. The write is atomic: the data goes to "<path>.tmp-<random>"
/// in the same directory, is flushed and fsync'ed, then renamed over `path`; on any error the temp
/// file is removed and a previous file at `path` is left untouched.
void save_tensors(const TensorDict& tensors, const std::string& path, const Metadata& metadata = {});

/// Reads every tensor of a safetensors file onto the CPU. The header is validated completely
/// before anything is allocated (length, JSON syntax, dtypes, shapes, offsets that must tile the
/// data buffer exactly), so a truncated or corrupt file gives an mpx::Error naming the file and
/// the problem, never a crash or a huge allocation. `metadata`, when given, receives "__metadata__".
TensorDict load_tensors(const std::string& path, Metadata* metadata = nullptr);

/// The bytes save_tensors would write (for in-memory transfer and tests).
std::string serialize_tensors(const TensorDict& tensors, const Metadata& metadata = {});
/// Parses safetensors bytes from memory with the same checks as load_tensors; `name` is used in errors.
TensorDict deserialize_tensors(const void* data, size_t size, Metadata* metadata = nullptr,
                               const std::string& name = "<memory>");
inline TensorDict deserialize_tensors(const std::string& bytes, Metadata* metadata = nullptr,
                                      const std::string& name = "<memory>") {
  return deserialize_tensors(bytes.data(), bytes.size(), metadata, name);
}

/// Saves named tensors (same as save_tensors).
void save(const TensorDict& tensors, const std::string& path, const Metadata& metadata = {});
/// Saves one tensor under the name "tensor".
void save(const Tensor& tensor, const std::string& path);
/// Loads the only tensor of a file (any name); throws when the file holds zero or several.
Tensor load_tensor(const std::string& path);
/// `tensor = load_tensor(path)` (LibTorch's torch::load(tensor, path)).
void load(Tensor& tensor, const std::string& path);
/// `tensors = load_tensors(path)`.
void load(TensorDict& tensors, const std::string& path);
/// A list of tensors, saved under the names "0", "1", ... (LibTorch's torch::save(std::vector<Tensor>, path)).
void save(const std::vector<Tensor>& tensors, const std::string& path);
/// The list `save(std::vector<Tensor>, path)` wrote; a file whose names are not 0 .. n-1 is an error.
void load(std::vector<Tensor>& tensors, const std::string& path);

namespace detail {
/// Test hook: makes the next save fail with an I/O error after `bytes` bytes reached the temp
/// file (negative disables it). Lets tests exercise the cleanup of a half-written save.
void inject_save_failure(int64_t bytes);

/// Something state_dict() may return: a map of tensors, or any range of (name, tensor) pairs
/// (`.first/.second`, or `.key()/.value()` as in LibTorch's OrderedDict).
template <class D>
concept TensorDictLike =
    std::is_convertible_v<const D&, TensorDict> ||
    requires(const D& d) {
      { d.begin()->first } -> std::convertible_to<std::string>;
      { d.begin()->second } -> std::convertible_to<Tensor>;
      d.end();
    } ||
    requires(const D& d) {
      { d.begin()->key() } -> std::convertible_to<std::string>;
      { d.begin()->value() } -> std::convertible_to<Tensor>;
      d.end();
    };

template <class D>
TensorDict to_tensor_dict(const D& d) {
  if constexpr (std::is_convertible_v<const D&, TensorDict>) {
    return d;
  } else {
    TensorDict out;
    for (const auto& item : d) {
      if constexpr (requires { item.key(); }) out.emplace(std::string(item.key()), Tensor(item.value()));
      else out.emplace(std::string(item.first), Tensor(item.second));
    }
    return out;
  }
}

/// A module (Module&, a holder or a shared_ptr to one) whose state_dict() gives named tensors.
template <class M>
concept HasTensorStateDict =
    requires(const M& m) { { m.state_dict() } -> TensorDictLike; } ||
    requires(const M& m) { { m->state_dict() } -> TensorDictLike; };

template <class M>
TensorDict module_state_dict(const M& m) {
  if constexpr (requires { { m.state_dict() } -> TensorDictLike; }) return to_tensor_dict(m.state_dict());
  else return to_tensor_dict(m->state_dict());
}
}  // namespace detail

/// Saves a module's state_dict() (parameters and buffers) as a safetensors file that PyTorch's
/// safetensors.torch.load_file reads back. Works with Module&, holders and shared_ptrs.
template <class M>
  requires detail::HasTensorStateDict<std::remove_cvref_t<M>>
void save(const M& module, const std::string& path) {
  save_tensors(detail::module_state_dict(module), path, Metadata{{"format", "pt"}});
}

namespace detail {
template <class M>
void load_state_into(M& module, const TensorDict& tensors, bool strict) {
  if constexpr (requires { module.load_state_dict(tensors, strict); }) {
    module.load_state_dict(tensors, strict);
  } else if constexpr (requires { module->load_state_dict(tensors, strict); }) {
    module->load_state_dict(tensors, strict);
  } else if constexpr (requires { module.load_state_dict(tensors); }) {
    module.load_state_dict(tensors);
  } else {
    static_assert(requires { module->load_state_dict(tensors); },
                  "mpx::load(module, path): the module needs load_state_dict(std::map<std::string, Tensor>[, bool])");
    module->load_state_dict(tensors);
  }
}
}  // namespace detail

/// Loads a safetensors file into a module with load_state_dict(tensors, strict): with `strict`,
/// missing and unexpected names are errors (the module reports them, this names the file).
template <class M>
  requires detail::HasTensorStateDict<std::remove_cvref_t<M>>
void load(M&& module, const std::string& path, bool strict = true) {
  const TensorDict tensors = load_tensors(path);
  try {
    detail::load_state_into(module, tensors, strict);
  } catch (const Error& e) {
    MPX_ERROR("load(module, '", path, "'): ", e.what());
  }
}

}  // namespace mpx
