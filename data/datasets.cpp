// The built-in data sets. stb_image's implementation is compiled here, and only here.
#include "data/datasets.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "core/random.h"
#include "data/image_check.h"
#include "data/jpeg.h"

#define STB_IMAGE_IMPLEMENTATION
#define STBI_FAILURE_USERMSG
// Only the formats ImageFolder accepts are decoded, whatever a file's name says: stb's other
// decoders (GIF, PSD, HDR, PIC, PNM, TGA) are not compiled in, so a GIF declaring a huge canvas
// is refused from its first bytes instead of costing half a gigabyte.
#define STBI_ONLY_JPEG
#define STBI_ONLY_PNG
#define STBI_ONLY_BMP
#define STBI_MAX_DIMENSIONS 65535
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wimplicit-fallthrough"
#endif
#include <stb_image.h>
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif

namespace fs = std::filesystem;

namespace mpx::data {
namespace {
void check_index(const char* who, int64_t index, int64_t n) {
  MPX_CHECK(index >= 0 && index < n, who, ": index ", index, " is out of range for a data set of ", n, " examples");
}
Tensor label(int64_t v) {
  Tensor t = empty({}, kInt64);
  *t.data_ptr<int64_t>() = v;
  return t;
}
/// `n` u8 values -> f32 / 255 at `d` (what the u8 data sets give without a transform).
void unit_float_into(const uint8_t* p, int64_t n, float* d) {
  for (int64_t i = 0; i < n; ++i) d[i] = static_cast<float>(p[i]) * (1.0f / 255.0f);
}
/// u8 planar [C,H,W] -> u8 [H,W,C] at `d`, the layout transforms take.
void hwc_into(const uint8_t* p, int64_t c, int64_t h, int64_t w, uint8_t* d) {
  for (int64_t ch = 0; ch < c; ++ch)
    for (int64_t i = 0; i < h * w; ++i) d[i * c + ch] = p[ch * h * w + i];
}
/// u8 planar [C,H,W] (one image) -> f32 [C,H,W] / 255.
Tensor to_unit_float(const uint8_t* p, const IntList& chw) {
  Tensor t = empty(chw, kFloat32);
  unit_float_into(p, numel_of(chw), t.data_ptr<float>());
  return t;
}
/// u8 planar [C,H,W] -> u8 [H,W,C].
Tensor to_hwc(const uint8_t* p, int64_t c, int64_t h, int64_t w) {
  Tensor t = empty({h, w, c}, kUInt8);
  hwc_into(p, c, h, w, t.data_ptr<uint8_t>());
  return t;
}
/// get_batch of the u8 image data sets (`images` [N, H, W] or planar [N, C, H, W]): each image
/// straight into its slot of one batch, as ToTensor or through the transform's fused pass, with
/// what get_seeded and collate give; false (that path) for a transform with no fused pass.
bool images_into_batch(const Tensor& images, int64_t c, const Tensor& targets, const transforms::Transform& t,
                       const char* what, const std::vector<int64_t>& indices, const std::vector<uint64_t>& seeds,
                       Batch& out) {
  const ImagePipeline* p = t.defined() ? t.spec().fused.get() : nullptr;
  if (indices.empty() || (t.defined() && (!p || !p->accepts_channels(c)))) return false;
  MPX_CHECK(seeds.size() == indices.size(), what, "::get_batch: ", indices.size(), " indices but ", seeds.size(),
            " seeds");
  const int64_t n = static_cast<int64_t>(indices.size()), h = images.size(-2), w = images.size(-1), px = c * h * w;
  IntList shape = p ? p->output_shape(h, w, c) : IntList{c, h, w};
  const DType dt = p ? p->dtype() : kFloat32;
  shape.insert(shape.begin(), n);
  out.data = empty(shape, TensorOptions(dt).pinned_memory(out.pinned));
  out.target = empty({n}, TensorOptions(kInt64).pinned_memory(out.pinned));
  auto* d = static_cast<uint8_t*>(out.data.raw_data());
  const size_t each = static_cast<size_t>(out.data.numel() / n) * element_size(dt);
  const uint8_t* src = images.data_ptr<uint8_t>();
  const int64_t* labels = targets.data_ptr<int64_t>();
  int64_t* tgt = out.target.data_ptr<int64_t>();
  std::vector<uint8_t> hwc(c > 1 && p ? static_cast<size_t>(px) : 0);
  for (int64_t k = 0; k < n; ++k) {
    const int64_t i = indices[static_cast<size_t>(k)];
    check_index(what, i, images.size(0));
    const uint8_t* img = src + i * px;
    tgt[k] = labels[i];
    if (!p) {
      unit_float_into(img, px, reinterpret_cast<float*>(d + static_cast<size_t>(k) * each));
      continue;
    }
    if (c > 1) {
      hwc_into(img, c, h, w, hwc.data());
      img = hwc.data();
    }
    p->apply_into(img, h, w, c, seeds[static_cast<size_t>(k)], d + static_cast<size_t>(k) * each);
  }
  return true;
}

/// `first` (ToTensor where absent: what the u8 data sets give without a transform), then `after`.
transforms::Transform then(const transforms::Transform& first, transforms::Transform after) {
  return transforms::Compose({first.defined() ? first : transforms::ToTensor(), std::move(after)});
}

/// transform_path() of a data set whose transform gets decoded u8 images (`what`).
std::string path_of(const transforms::Transform& t, const std::string& what) {
  if (!t.defined()) return "composed: ToTensor on the " + what + " (no transform given)";
  const std::string how = t.how_it_runs();
  if (how.rfind("fused: ", 0) == 0 || how.rfind("composed: ", 0) == 0) return how + ", on the " + what;
  return "composed: " + how + " on the " + what;
}
}  // namespace

// ---------------------------------------------------------------- MNIST
MNIST::MNIST(const std::string& root, bool train, transforms::Transform transform)
    : train_(train), transform_(std::move(transform)) {
  auto split = read_mnist(root, train);
  images_ = split.images;
  targets_ = split.labels;
  MPX_CHECK(images_.dim() == 3, "MNIST: ", root, " holds images of shape ", shape_str(images_.sizes()),
            "; expected [N, H, W]");
  classes_ = {"0 - zero", "1 - one", "2 - two", "3 - three", "4 - four",
              "5 - five", "6 - six", "7 - seven", "8 - eight", "9 - nine"};
}

Example<> MNIST::get(int64_t index) const { return get_seeded(index, sample_seed(0, 0, index)); }

Example<> MNIST::get_seeded(int64_t index, uint64_t seed) const {
  check_index("MNIST", index, size());
  const int64_t h = images_.size(1), w = images_.size(2);
  const uint8_t* p = images_.data_ptr<uint8_t>() + index * h * w;
  const Tensor y = label(targets_.data_ptr<int64_t>()[index]);
  if (!transform_.defined()) return {to_unit_float(p, {1, h, w}), y};
  return {transform_(to_hwc(p, 1, h, w), seed), y};
}

bool MNIST::get_batch(const std::vector<int64_t>& indices, const std::vector<uint64_t>& seeds, Batch& out) const {
  return images_into_batch(images_, 1, targets_, transform_, "MNIST", indices, seeds, out);
}

std::string MNIST::transform_path() const { return path_of(transform_, "u8 images"); }

MNIST MNIST::followed_by(transforms::Transform after) const {
  MNIST d = *this;
  d.transform_ = then(transform_, std::move(after));
  return d;
}

FashionMNIST::FashionMNIST(const std::string& root, bool train, transforms::Transform transform)
    : MNIST(root, train, std::move(transform)) {
  classes_ = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"};
}

// ---------------------------------------------------------------- CIFAR-10
std::string CIFAR10::transform_path() const { return path_of(transform_, "u8 images"); }

const std::vector<std::string>& CIFAR10::classes() {
  static const std::vector<std::string> c{"airplane", "automobile", "bird",  "cat",  "deer",
                                          "dog",      "frog",       "horse", "ship", "truck"};
  return c;
}

CIFAR10::CIFAR10(const std::string& root, bool train, transforms::Transform transform)
    : transform_(std::move(transform)) {
  constexpr int64_t kRecord = 3073, kPixels = 3072;
  fs::path dir = root;
  if (!fs::exists(dir / (train ? "data_batch_1.bin" : "test_batch.bin")) && fs::exists(dir / "cifar-10-batches-bin"))
    dir /= "cifar-10-batches-bin";
  std::vector<fs::path> files;
  if (train)
    for (int i = 1; i <= 5; ++i) files.push_back(dir / ("data_batch_" + std::to_string(i) + ".bin"));
  else
    files.push_back(dir / "test_batch.bin");
  int64_t total = 0;
  std::vector<int64_t> counts;
  for (const auto& f : files) {
    MPX_CHECK(fs::is_regular_file(f), "CIFAR10: ", f.string(), " does not exist; expected the binary version of "
              "CIFAR-10 (cifar-10-binary.tar.gz extracted) in ", root);
    const auto bytes = static_cast<int64_t>(fs::file_size(f));
    MPX_CHECK(bytes > 0 && bytes % kRecord == 0, "CIFAR10: ", f.string(), " has ", bytes,
              " bytes, not a whole number of 3073-byte records (label + 32x32x3 pixels); the file is truncated or "
              "not the binary version");
    counts.push_back(bytes / kRecord);
    total += bytes / kRecord;
  }
  images_ = empty({total, 3, 32, 32}, kUInt8);
  targets_ = empty({total}, kInt64);
  uint8_t* img = images_.data_ptr<uint8_t>();
  int64_t* tgt = targets_.data_ptr<int64_t>();
  std::vector<char> buf;
  int64_t at = 0;
  for (size_t k = 0; k < files.size(); ++k) {
    std::ifstream in(files[k], std::ios::binary);
    buf.resize(static_cast<size_t>(counts[k] * kRecord));
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    MPX_CHECK(in.gcount() == static_cast<std::streamsize>(buf.size()), "CIFAR10: could not read ", files[k].string());
    for (int64_t r = 0; r < counts[k]; ++r, ++at) {
      const auto* rec = reinterpret_cast<const uint8_t*>(buf.data() + r * kRecord);
      MPX_CHECK(rec[0] < 10, "CIFAR10: ", files[k].string(), " record ", r, " has label ", int{rec[0]},
                "; CIFAR-10 labels are 0..9 (is this the CIFAR-100 file?)");
      tgt[at] = rec[0];
      std::memcpy(img + at * kPixels, rec + 1, kPixels);
    }
  }
}

Example<> CIFAR10::get(int64_t index) const { return get_seeded(index, sample_seed(0, 0, index)); }

Example<> CIFAR10::get_seeded(int64_t index, uint64_t seed) const {
  check_index("CIFAR10", index, size());
  const uint8_t* p = images_.data_ptr<uint8_t>() + index * 3072;
  const Tensor y = label(targets_.data_ptr<int64_t>()[index]);
  if (!transform_.defined()) return {to_unit_float(p, {3, 32, 32}), y};
  return {transform_(to_hwc(p, 3, 32, 32), seed), y};
}

CIFAR10 CIFAR10::followed_by(transforms::Transform after) const {
  CIFAR10 d = *this;
  d.transform_ = then(transform_, std::move(after));
  return d;
}

bool CIFAR10::get_batch(const std::vector<int64_t>& indices, const std::vector<uint64_t>& seeds, Batch& out) const {
  return images_into_batch(images_, 3, targets_, transform_, "CIFAR10", indices, seeds, out);
}

// ---------------------------------------------------------------- images
namespace {
struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using File = std::unique_ptr<std::FILE, FileCloser>;
// Opening separately from decoding keeps "permission denied" apart from "not an image".
File open_image(const std::string& path, std::string& why) {
  File f(std::fopen(path.c_str(), "rb"));
  if (!f) why = std::string("cannot open the file: ") + std::strerror(errno);
  return f;
}
}  // namespace

std::string read_file_bytes(const std::string& path, std::vector<uint8_t>& bytes) {
  bytes.clear();
  std::string why;
  File f = open_image(path, why);
  if (!f) return why;
  uint8_t buf[65536];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, f.get())) > 0;) bytes.insert(bytes.end(), buf, buf + n);
  return std::ferror(f.get()) ? std::string("cannot read the file: ") + std::strerror(errno) : "";
}

namespace {
std::string stb_reason() { return stbi_failure_reason() ? stbi_failure_reason() : "unknown error"; }
std::atomic<int64_t> g_max_image_pixels{kMaxImagePixels};
std::string too_big(int w, int h) {
  const int64_t limit = g_max_image_pixels.load(std::memory_order_relaxed);
  if (static_cast<int64_t>(w) * h <= limit) return "";
  return "its header declares " + std::to_string(w) + "x" + std::to_string(h) + " pixels, more than the " +
         std::to_string(limit) + " mpx decodes (the decompression-bomb limit, as PIL's; data::set_max_image_pixels)";
}
}  // namespace

int64_t max_image_pixels() { return g_max_image_pixels.load(std::memory_order_relaxed); }
void set_max_image_pixels(int64_t pixels) {
  MPX_CHECK(pixels > 0, "set_max_image_pixels: the limit must be positive, got ", pixels);
  g_max_image_pixels.store(pixels, std::memory_order_relaxed);
}

Tensor read_image(const std::string& path, int channels) {
  MPX_CHECK(channels >= 0 && channels <= 4, "read_image: channels must be 0..4, got ", channels);
  std::string why;
  File f = open_image(path, why);
  MPX_CHECK(f, "read_image: ", path, ": ", why);
  if (have_libjpeg_turbo() && is_jpeg(f.get())) return decode_jpeg(f.get(), path, channels, max_image_pixels());
  int w = 0, h = 0, c = 0;
  const std::string bad_structure = image_structure_problem(f.get());
  MPX_CHECK(bad_structure.empty(), "read_image: cannot decode ", path, ": ", bad_structure);
  // The header's size is checked before anything is decoded: decoders allocate it up front.
  if (stbi_info_from_file(f.get(), &w, &h, &c)) {
    const std::string big = too_big(w, h);
    MPX_CHECK(big.empty(), "read_image: cannot decode ", path, ": ", big);
  }
  std::unique_ptr<stbi_uc, void (*)(void*)> px(stbi_load_from_file(f.get(), &w, &h, &c, channels), stbi_image_free);
  MPX_CHECK(px, "read_image: cannot decode ", path, ": ", stb_reason(), " (corrupt, truncated or not a JPEG/PNG/BMP image)");
  const int ch = channels ? channels : c;
  Tensor t = empty({h, w, ch}, kUInt8);
  std::memcpy(t.raw_data(), px.get(), static_cast<size_t>(h) * static_cast<size_t>(w) * static_cast<size_t>(ch));
  return t;
}

std::string image_header_problem(const std::string& path) {
  std::string why;
  File f = open_image(path, why);
  if (!f) return why;
  // Before stb reads anything: its header parse builds the Huffman tables too.
  if (std::string bad = image_structure_problem(f.get()); !bad.empty()) return bad;
  int w = 0, h = 0, c = 0;
  if (!stbi_info_from_file(f.get(), &w, &h, &c)) return "not a readable image: " + stb_reason();
  if (w <= 0 || h <= 0) return "the header gives an empty image";
  return too_big(w, h);
}

ImageFolder::ImageFolder(const std::string& root, transforms::Transform transform, ImageFolderOptions options)
    : transform_(std::move(transform)), options_(std::move(options)) {
  MPX_CHECK(!(options_.pipeline_ && transform_.defined()), "ImageFolder: give either a transform or a pipeline "
            "(ImageFolderOptions::pipeline), not both: the pipeline already resizes, crops and normalizes");
  // A Compose the fused pipeline expresses runs as it from the file, crop planned from the header.
  std::string fused_from;
  if (const auto& fused = transform_.spec().fused; fused && fused->fixed_shape() && options_.channels_ == 3) {
    options_.pipeline_ = *fused;
    fused_from = transform_.name() + " runs as ImagePipeline ";
    transform_ = {};
  } else if (options_.pipeline_) {
    fused_from = "ImagePipeline ";
  }
  if (options_.pipeline_)
    path_ = "fused: " + fused_from + options_.pipeline_->describe() +
            (options_.gpu_decode_ ? ", JPEGs decoded on " + options_.gpu_decode_->str() + " (nvJPEG)"
             : options_.pipeline_->reduced_decode_enabled() ? ", from the file (the JPEG decoded over the crop only, at reduced size where that shrinks)"
                                                    : ", from the file (the JPEG decoded over the crop only)");
  else path_ = path_of(transform_, "decoded image");
  if (options_.gpu_decode_) {
    // Checked before the folder is scanned: a build or machine that cannot do it fails at once.
    MPX_CHECK(options_.pipeline_, "ImageFolder: gpu_decode needs a pipeline (ImageFolderOptions::pipeline): the "
              "crops are planned from each JPEG's header and resampled on the device");
    const std::string why = gpu_decode_problem(*options_.gpu_decode_);
    MPX_CHECK(why.empty(), "ImageFolder: cannot decode JPEGs on ", options_.gpu_decode_->str(), ": ", why);
    cpu_full_ = ImagePipeline(*options_.pipeline_).reduced_decode(false);
  }
  std::error_code ec;
  MPX_CHECK(fs::is_directory(root, ec), "ImageFolder: ", root, " is not a folder",
            ec ? " (" + ec.message() + ")" : std::string(), "; expected root/<class>/<image> files");
  // Error codes rather than exceptions: an unreadable folder gets a sentence naming it.
  auto unreadable_dir = [](const fs::path& d, const std::error_code& e) {
    MPX_ERROR("ImageFolder: cannot list the folder ", d.string(), ": ", e.message(),
              e == std::errc::permission_denied ? "; check its permissions (it must be readable and searchable)" : "");
  };
  fs::directory_iterator top(root, ec);
  if (ec) unreadable_dir(root, ec);
  for (; top != fs::directory_iterator(); top.increment(ec)) {
    if (ec) unreadable_dir(root, ec);
    std::error_code e2;
    if (top->is_directory(e2)) classes_.push_back(top->path().filename().string());
  }
  std::sort(classes_.begin(), classes_.end());
  MPX_CHECK(!classes_.empty(), "ImageFolder: ", root, " has no class sub-folders; expected root/<class>/<image> files");
  auto accepted = [&](const fs::path& p) {
    std::string ext = p.extension().string();
    std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char ch) { return std::tolower(ch); });
    return std::find(options_.extensions_.begin(), options_.extensions_.end(), ext) != options_.extensions_.end();
  };
  for (size_t k = 0; k < classes_.size(); ++k) {
    const fs::path dir = fs::path(root) / classes_[k];
    // torchvision walks sorted(os.walk(dir)): sorted by (directory, file name), so a folder's
    // own files come before its sub-folders'.
    std::vector<std::pair<std::string, std::string>> found;
    fs::recursive_directory_iterator it(dir, fs::directory_options::follow_directory_symlink, ec);
    if (ec) unreadable_dir(dir, ec);
    for (; it != fs::recursive_directory_iterator(); it.increment(ec)) {
      if (ec) unreadable_dir(dir, ec);
      std::error_code e2;
      if (!it->is_regular_file(e2)) continue;
      if (accepted(it->path())) found.emplace_back(it->path().parent_path().string(), it->path().filename().string());
      else ++ignored_;
    }
    if (ec) unreadable_dir(dir, ec);
    std::sort(found.begin(), found.end());
    for (auto& [parent, name] : found) samples_.emplace_back((fs::path(parent) / name).string(), static_cast<int64_t>(k));
  }
  // Header checks: every file when verifying, in parallel since each is a file open and a few
  // hundred bytes read; with skip_corrupt alone, too, as before (it drops what cannot be read).
  std::vector<std::string> problem(samples_.size());
  if (options_.verify_ || options_.skip_corrupt_) {
    const size_t n = samples_.size();
    const size_t nt = std::max<size_t>(1, std::min<size_t>({8, std::thread::hardware_concurrency() * 2, n / 64 + 1}));
    std::atomic<size_t> next{0};
    auto work = [&] {
      for (size_t i; (i = next.fetch_add(1)) < n;) problem[i] = image_header_problem(samples_[i].first);
    };
    std::vector<std::thread> pool;
    for (size_t t = 1; t < nt; ++t) pool.emplace_back(work);
    work();
    for (auto& t : pool) t.join();
  }
  std::vector<std::pair<std::string, int64_t>> kept;
  std::vector<std::pair<std::string, std::string>> bad;
  for (size_t i = 0; i < samples_.size(); ++i) {
    if (problem[i].empty()) kept.push_back(samples_[i]);
    else bad.emplace_back(samples_[i].first, problem[i]);
  }
  if (!bad.empty() && !options_.skip_corrupt_) {
    std::string first;
    for (size_t i = 0; i < bad.size() && i < 3; ++i) first += (i ? "; " : "") + bad[i].first + " (" + bad[i].second + ")";
    MPX_ERROR("ImageFolder: ", bad.size(), " of ", samples_.size(), " files in ", root, " cannot be read as images: ",
              first, bad.size() > 3 ? "; ..." : "", "; fix or remove them, or skip them (skip_corrupt)");
  }
  for (const auto& [path, why] : bad) {
    warn("ImageFolder: skipping unreadable image " + path + " (" + why + ")");
    unreadable_.emplace_back(path, why);
  }
  std::vector<int64_t> per_class(classes_.size(), 0);
  for (const auto& s : kept) ++per_class[static_cast<size_t>(s.second)];
  for (size_t k = 0; k < classes_.size(); ++k) {
    MPX_CHECK(per_class[k] > 0, "ImageFolder: class folder ", (fs::path(root) / classes_[k]).string(), " holds no ",
              options_.skip_corrupt_ ? "readable " : "", "image with a supported extension (.jpg .jpeg .png .bmp); "
              "remove the folder or add images");
  }
  samples_ = std::move(kept);
}

void ImageFolder::note_unreadable(const std::string& path, const std::string& reason) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [p, r] : unreadable_)
    if (p == path) return;
  unreadable_.emplace_back(path, reason);
}

std::vector<std::pair<std::string, std::string>> ImageFolder::unreadable() const {
  std::lock_guard<std::mutex> lock(mu_);
  return unreadable_;
}

Example<> ImageFolder::get(int64_t index) const { return get_seeded(index, sample_seed(0, 0, index)); }

int64_t ImageFolder::load_pipeline(const ImagePipeline& p, int64_t index, uint64_t seed, void* out) const {
  check_index("ImageFolder", index, size());
  const int64_t n = size();
  for (int64_t k = 0; k < n; ++k) {
    const auto& [path, cls] = samples_[static_cast<size_t>((index + k) % n)];
    try {
      p.load_into(path, seed, out);
      return cls;
    } catch (const Error& e) {
      if (!options_.skip_corrupt_) throw;
      warn(std::string("ImageFolder: ") + e.what() + "; using the next image instead");
      note_unreadable(path, e.what());
    }
  }
  MPX_ERROR("ImageFolder: no image under the data set root could be decoded");
}

bool ImageFolder::get_batch(const std::vector<int64_t>& indices, const std::vector<uint64_t>& seeds, Batch& out) const {
  if (!options_.pipeline_ || indices.empty()) return false;
  MPX_CHECK(seeds.size() == indices.size(), "ImageFolder::get_batch: ", indices.size(), " indices but ", seeds.size(),
            " seeds");
  if (options_.gpu_decode_) return get_batch_gpu(indices, seeds, out);
  const ImagePipeline& p = *options_.pipeline_;
  IntList shape = p.output_shape();
  shape.insert(shape.begin(), static_cast<int64_t>(indices.size()));
  out.data = empty(shape, TensorOptions(p.dtype()).pinned_memory(out.pinned));
  out.target = empty({static_cast<int64_t>(indices.size())}, TensorOptions(kInt64).pinned_memory(out.pinned));
  auto* d = static_cast<uint8_t*>(out.data.raw_data());
  const size_t each = static_cast<size_t>(out.data.numel() / shape[0]) * element_size(p.dtype());
  int64_t* t = out.target.data_ptr<int64_t>();
  for (size_t k = 0; k < indices.size(); ++k) t[k] = load_pipeline(p, indices[k], seeds[k], d + k * each);
  return true;
}

bool ImageFolder::get_batch_gpu(const std::vector<int64_t>& indices, const std::vector<uint64_t>& seeds,
                                Batch& out) const {
  std::unique_ptr<GpuJpegDecoder> dec;
  {
    std::lock_guard<std::mutex> lock(decoders_mu_);
    if (!decoders_.empty()) {
      dec = std::move(decoders_.back());
      decoders_.pop_back();
    }
  }
  if (!dec) dec = std::make_unique<GpuJpegDecoder>(*cpu_full_, *options_.gpu_decode_);
  // Back to the pool however this batch ends (a failed batch leaves the decoder usable).
  struct Return {
    const ImageFolder* self;
    std::unique_ptr<GpuJpegDecoder>& d;
    ~Return() {
      std::lock_guard<std::mutex> lock(self->decoders_mu_);
      self->decoders_.push_back(std::move(d));
    }
  } give_back{this, dec};
  const size_t n = indices.size();
  // The data comes back on the device; only the targets take the loader's pinned memory.
  out.target = empty({static_cast<int64_t>(n)}, TensorOptions(kInt64).pinned_memory(out.pinned));
  int64_t* t = out.target.data_ptr<int64_t>();
  std::vector<std::vector<uint8_t>> files(n);
  for (size_t k = 0; k < n; ++k) {
    check_index("ImageFolder", indices[k], size());
    const auto& [path, cls] = samples_[static_cast<size_t>(indices[k])];
    t[k] = cls;
    // A file that cannot be read stays empty: the CPU fallback reads it again and reports (or,
    // with skip_corrupt, replaces) it exactly as the CPU path does.
    if (!read_file_bytes(path, files[k]).empty()) files[k].clear();
  }
  out.data = dec->decode(files, seeds, [&](size_t k, void* o) { t[k] = load_pipeline(*cpu_full_, indices[k], seeds[k], o); });
  return true;
}

Example<> ImageFolder::get_seeded(int64_t index, uint64_t seed) const {
  check_index("ImageFolder", index, size());
  if (options_.pipeline_) {
    Tensor x = empty(options_.pipeline_->output_shape(), options_.pipeline_->dtype());
    const int64_t cls = load_pipeline(cpu_full_ ? *cpu_full_ : *options_.pipeline_, index, seed, x.raw_data());
    return {x, label(cls)};
  }
  const int64_t n = size();
  for (int64_t k = 0; k < n; ++k) {
    const auto& [path, cls] = samples_[static_cast<size_t>((index + k) % n)];
    Tensor img;
    try {
      img = read_image(path, options_.channels_);
    } catch (const Error& e) {
      if (!options_.skip_corrupt_) throw;
      warn(std::string("ImageFolder: ") + e.what() + "; using the next image instead");
      note_unreadable(path, e.what());
      continue;
    }
    Tensor x = transform_.defined() ? transform_(img, seed) : transforms::ToTensor()(img, seed);
    return {x, label(cls)};
  }
  MPX_ERROR("ImageFolder: no image under the data set root could be decoded");
}

// ---------------------------------------------------------------- Synthetic
Synthetic::Synthetic(IntList shape, int64_t num_classes, int64_t n, uint64_t seed)
    : shape_(std::move(shape)), num_classes_(num_classes), n_(n), seed_(seed) {
  MPX_CHECK(num_classes >= 1, "Synthetic: num_classes must be >= 1, got ", num_classes);
  MPX_CHECK(n >= 0, "Synthetic: n must be >= 0, got ", n);
  for (int64_t s : shape_) MPX_CHECK(s > 0, "Synthetic: shape ", shape_str(shape_), " has a non-positive size");
}

Example<> Synthetic::get(int64_t index) const {
  check_index("Synthetic", index, n_);
  const uint64_t key = random::hash(seed_, static_cast<uint64_t>(index), 0x5e7);
  Tensor x = empty(shape_, kFloat32);
  float* d = x.data_ptr<float>();
  const int64_t m = x.numel();
  for (int64_t i = 0; i < m; ++i) d[i] = static_cast<float>(random::uniform(key, static_cast<uint64_t>(i), 1));
  const auto y = static_cast<int64_t>(random::hash(key, 0, 2) % static_cast<uint64_t>(num_classes_));
  return {x, label(y)};
}

}  // namespace mpx::data
