// Built-in data sets: MNIST / Fashion-MNIST (IDX), CIFAR-10 (binary), ImageFolder (stb_image)
// and Synthetic (generated per index, for benchmarks).
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "data/dataset.h"
#include "data/gpu_decode.h"
#include "data/idx.h"
#include "data/image_pipeline.h"
#include "data/map_dataset.h"
#include "data/transforms.h"

namespace mpx::data {

/// MNIST-format data (`{train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]` in `root`).
/// Without a transform an image is f32 [1,28,28] in [0,1]; a transform receives the u8
/// [28,28,1] image. Targets are 0-dim i64.
class MNIST : public Dataset, public datasets::Mappable<MNIST> {
 public:
  /// LibTorch's names of the two splits.
  enum class Mode { kTrain, kTest };
  MNIST(const std::string& root, bool train = true, transforms::Transform transform = {});
  /// LibTorch's spelling: `MNIST(root, MNIST::Mode::kTest)`.
  MNIST(const std::string& root, Mode mode, transforms::Transform transform = {})
      : MNIST(root, mode == Mode::kTrain, std::move(transform)) {}
  int64_t size() const override { return images_.size(0); }
  Example<> get(int64_t index) const override;
  Example<> get_seeded(int64_t index, uint64_t sample_seed) const override;
  /// Without a transform, or with one that runs as a fused pass: straight into the batch.
  bool get_batch(const std::vector<int64_t>& indices, const std::vector<uint64_t>& sample_seeds,
                 Batch& out) const override;
  std::string transform_path() const override;
  /// u8 [N,28,28] and i64 [N].
  const Tensor& images() const { return images_; }
  const Tensor& targets() const { return targets_; }
  const std::vector<std::string>& classes() const { return classes_; }
  /// The training split (not the test split).
  bool is_train() const noexcept { return train_; }
  /// This data set with `after` run on each example's data after its own transform (ToTensor
  /// where it has none), as one Compose that runs fused where it can: make_data_loader folds
  /// LibTorch's `.map(Normalize<>(...))` chains into it.
  MNIST followed_by(transforms::Transform after) const;

 protected:
  bool train_;
  Tensor images_, targets_;
  transforms::Transform transform_;
  std::vector<std::string> classes_;
};

/// Fashion-MNIST; `root` defaults to Debian's dataset-fashion-mnist location (kFashionMnistDir).
class FashionMNIST : public MNIST {
 public:
  explicit FashionMNIST(const std::string& root = kFashionMnistDir, bool train = true,
                        transforms::Transform transform = {});
  FashionMNIST(const std::string& root, Mode mode, transforms::Transform transform = {})
      : FashionMNIST(root, mode == Mode::kTrain, std::move(transform)) {}
};

/// CIFAR-10, binary version: `root` (or root/cifar-10-batches-bin) holds data_batch_1..5.bin
/// (train) or test_batch.bin, 3073-byte records (label, 1024 R, 1024 G, 1024 B). Without a
/// transform an image is f32 [3,32,32] in [0,1]; a transform receives u8 [32,32,3].
class CIFAR10 : public Dataset, public datasets::Mappable<CIFAR10> {
 public:
  CIFAR10(const std::string& root, bool train = true, transforms::Transform transform = {});
  int64_t size() const override { return images_.size(0); }
  Example<> get(int64_t index) const override;
  Example<> get_seeded(int64_t index, uint64_t sample_seed) const override;
  /// As MNIST's.
  bool get_batch(const std::vector<int64_t>& indices, const std::vector<uint64_t>& sample_seeds,
                 Batch& out) const override;
  std::string transform_path() const override;
  /// u8 [N,3,32,32] and i64 [N].
  const Tensor& images() const { return images_; }
  const Tensor& targets() const { return targets_; }
  static const std::vector<std::string>& classes();
  /// As MNIST's.
  CIFAR10 followed_by(transforms::Transform after) const;

 private:
  Tensor images_, targets_;
  transforms::Transform transform_;
};

/// ImageFolder settings.
struct ImageFolderOptions {
  /// Skip unreadable images with a warning instead of failing: files whose header stb_image
  /// cannot read are dropped when the folder is scanned; a file that fails to decode later is
  /// replaced by the next readable sample.
  ImageFolderOptions& skip_corrupt(bool s = true) { skip_corrupt_ = s; return *this; }
  /// Read every image's header when the folder is scanned (in parallel), so a file that is not
  /// an image is found before training rather than mid-epoch. The unreadable ones are dropped
  /// with skip_corrupt, otherwise the constructor throws naming how many and the first few.
  ImageFolderOptions& verify(bool v = true) { verify_ = v; return *this; }
  /// Channels to decode to (3: RGB like torchvision's default loader, 1: grey, 0: as stored).
  ImageFolderOptions& channels(int c) { channels_ = c; return *this; }
  /// Accepted file extensions (lower case, with the dot).
  ImageFolderOptions& extensions(std::vector<std::string> e) { extensions_ = std::move(e); return *this; }
  /// Load each image through `p` (decode planned from the crop, one resample pass) instead of
  /// read_image + transform; the ImageFolder's transform must then be empty.
  ImageFolderOptions& pipeline(ImagePipeline p) { pipeline_ = std::move(p); return *this; }
  /// Decode JPEGs on this CUDA device with nvJPEG (GpuJpegDecoder) in get_batch, which then
  /// returns the batch's data on the device: the pipeline's crops, resampled there, as the
  /// pipeline with reduced_decode(false) gives them on the CPU (other files, PNG and BMP among
  /// them, take that CPU path and are copied in). Needs a pipeline; the constructor throws,
  /// saying what is missing, when the build has no nvJPEG or the device is not a visible GPU.
  /// get() and get_seeded() stay on the CPU (the same full-size decode).
  ImageFolderOptions& gpu_decode(Device d) { gpu_decode_ = d; return *this; }
  bool skip_corrupt_ = false;
  bool verify_ = false;
  int channels_ = 3;
  std::vector<std::string> extensions_{".jpg", ".jpeg", ".png", ".bmp"};
  std::optional<ImagePipeline> pipeline_;
  std::optional<Device> gpu_decode_;
};

/// torchvision.datasets.ImageFolder: root/<class>/**/<image>; classes are the sub-folders
/// sorted by name (index = position), files sorted by path within each class. Images are
/// decoded with stb_image to u8 [H,W,C] and given to `transform`; without one the result is
/// ToTensor's f32 [C,H,W]. A class folder with no image is an error naming it. A Compose that
/// ImagePipeline::from_transform expresses with one output size (torchvision's ImageNet train
/// and eval recipes among them) runs as that pipeline, from the file: the same tensors as
/// ImageFolderOptions::pipeline with it; transform_path() says which way it went.
class ImageFolder : public Dataset {
 public:
  explicit ImageFolder(const std::string& root, transforms::Transform transform = {}, ImageFolderOptions options = {});
  ImageFolder(const std::string& root, ImageFolderOptions options) : ImageFolder(root, {}, std::move(options)) {}
  int64_t size() const override { return static_cast<int64_t>(samples_.size()); }
  Example<> get(int64_t index) const override;
  Example<> get_seeded(int64_t index, uint64_t sample_seed) const override;
  /// With a pipeline, each image is transformed straight into its slot of the batch (on the
  /// device with ImageFolderOptions::gpu_decode). Safe to call from several loader threads.
  bool get_batch(const std::vector<int64_t>& indices, const std::vector<uint64_t>& sample_seeds,
                 Batch& out) const override;
  std::string transform_path() const override { return path_; }
  const std::vector<std::string>& classes() const { return classes_; }
  /// (path, class index) for every sample.
  const std::vector<std::pair<std::string, int64_t>>& samples() const { return samples_; }
  /// Regular files under the class folders that were not taken for lack of an accepted extension.
  int64_t ignored_files() const { return ignored_; }
  /// (path, reason) of every image dropped as unreadable: at the scan and, with skip_corrupt,
  /// when a later decode failed (each file once). Safe to call while workers load.
  std::vector<std::pair<std::string, std::string>> unreadable() const;

 private:
  void note_unreadable(const std::string& path, const std::string& reason) const;
  /// Loads sample `index` (or, with skip_corrupt, the next readable one) through the pipeline
  /// into `out`; returns its class.
  int64_t load_pipeline(const ImagePipeline& p, int64_t index, uint64_t seed, void* out) const;
  bool get_batch_gpu(const std::vector<int64_t>& indices, const std::vector<uint64_t>& seeds, Batch& out) const;
  std::vector<std::string> classes_;
  std::vector<std::pair<std::string, int64_t>> samples_;
  transforms::Transform transform_;
  ImageFolderOptions options_;
  std::string path_;  // transform_path()
  int64_t ignored_ = 0;
  mutable std::mutex mu_;
  mutable std::vector<std::pair<std::string, std::string>> unreadable_;
  // With gpu_decode: the CPU pipeline that loads what nvJPEG does not (full-size decodes, as on
  // the device), and idle decoders. Each loading thread takes one for a batch and puts it back:
  // decoders hold per-thread nvJPEG state and a stream, and a lock around one shared decoder
  // would serialize the host half of nvJPEG's decode (Huffman), the part that takes the time.
  std::optional<ImagePipeline> cpu_full_;
  mutable std::mutex decoders_mu_;
  mutable std::vector<std::unique_ptr<GpuJpegDecoder>> decoders_;
};

/// The most pixels an image may declare (width x height) for read_image to decode it: PIL's
/// decompression-bomb error threshold (2 x 89,478,485), about 537 MB as u8 RGB. Checked from the
/// header before any decoding, so a small file cannot make the decoder allocate more.
inline constexpr int64_t kMaxImagePixels = 178956970;
/// The limit read_image applies (kMaxImagePixels unless changed): PIL's Image.MAX_IMAGE_PIXELS,
/// settable per process, e.g. lower to bound a loader's memory or higher for huge scans.
int64_t max_image_pixels();
void set_max_image_pixels(int64_t pixels);

/// Decodes a JPEG, PNG or BMP file to u8 [H,W,C] (other formats are refused by content, whatever
/// the file's name); `channels` 0 keeps the stored count. Throws mpx::Error naming the file and
/// the reason: the system's when the file cannot be opened (e.g. permission denied), the size
/// when the header declares more than max_image_pixels(), stb_image's when it cannot be decoded.
Tensor read_image(const std::string& path, int channels = 3);
/// Reads the whole file at `path` into `bytes` (cleared first, so a caller's buffer is reused);
/// returns "" or why it could not ("cannot open the file: ...", "cannot read the file: ...").
std::string read_file_bytes(const std::string& path, std::vector<uint8_t>& bytes);

/// Why `path`'s header cannot be read as an image ("" when it can): opening it, stb_image's
/// reason, or a size above max_image_pixels().
std::string image_header_problem(const std::string& path);

/// Images of `shape` (e.g. {3,224,224}) uniform in [0,1) and targets in [0, num_classes),
/// generated on the fly as a pure function of (seed, index): no memory, no files.
class Synthetic : public Dataset {
 public:
  Synthetic(IntList shape, int64_t num_classes, int64_t n, uint64_t seed = 0);
  int64_t size() const override { return n_; }
  Example<> get(int64_t index) const override;

 private:
  IntList shape_;
  int64_t num_classes_, n_;
  uint64_t seed_;
};

/// LibTorch's namespace for the built-in data sets (`data::datasets::MNIST`) beside its Dataset<Self>.
namespace datasets {
using data::CIFAR10;
using data::FashionMNIST;
using data::ImageFolder;
using data::MNIST;
using data::Synthetic;
}  // namespace datasets

}  // namespace mpx::data
