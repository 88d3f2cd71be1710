// IDX files (MNIST / Fashion-MNIST), plain or gzip'd: the minimal reader the first training runs need.
#pragma once
#include <string>

#include "core/tensor.h"

namespace mpx::data {

/// Reads an unsigned-byte IDX file (magic 0x0000080N) into a u8 tensor of its dimensions.
/// Gzip'd files are read transparently. Throws mpx::Error naming the file on a bad magic
/// number, a truncated body or trailing garbage.
Tensor read_idx(const std::string& path);

/// One split of an MNIST-format data set.
struct MnistSplit {
  Tensor images;  ///< u8 [N, 28, 28]
  Tensor labels;  ///< i64 [N]
};

/// Loads `{train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]` from `root`; checks that the
/// image and label counts agree and the labels are in [0, 10).
MnistSplit read_mnist(const std::string& root, bool train);

/// Where Debian's dataset-fashion-mnist package puts the files.
inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

}  // namespace mpx::data
