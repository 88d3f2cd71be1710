// Shared pieces of the mpx commands: device and amp flags, data sets by name, interrupts, resumable runs (checkpoint state: tools/checkpoint_state.cpp).
#include "tools/common.h"

#include "core/cuda_backend.h"
#include "core/metadata.h"

#include "tools/ranks.h"
#include "tools/run_dir.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <atomic>
#include <csignal>
#include <ctime>
#include <filesystem>

namespace mpx::cli {

namespace fs = std::filesystem;

double beta_flag(const Args& args, const std::string& name) {
  const double b = args.number(name, 0.0);
  if (b >= 1.0) throw UsageError(name + " must be below 1 (Adam's moments would never forget), got " + args.str(name));
  return b;
}

Device parse_device(const std::string& spec) {
  Device d;
  try {
    d = Device(spec);
  } catch (const std::exception&) {
    throw UsageError("--device expects cpu, cuda or cuda:N, got '" + spec + "'");
  }
  if (d.is_cuda()) {
#ifndef MPX_WITH_CUDA
    MPX_ERROR("--device ", spec, ": this mpx was built without the CUDA backend; rebuild with -DMPX_CUDA=ON on a "
              "machine with nvcc, or use --device cpu");
#endif
    const int n = cuda_device_count();
    const std::string why = cuda::detail::module_problem();
    MPX_CHECK(why.empty(), "--device ", spec, ": ", why);
    MPX_CHECK(n > 0, "--device ", spec, ": no CUDA device is visible (driver missing or CUDA_VISIBLE_DEVICES empty); "
              "use --device cpu");
    MPX_CHECK(d.index >= 0 && d.index < n, "--device ", spec, ": only ", n, " CUDA device(s) (cuda:0..cuda:", n - 1,
              ")");
  }
  return d;
}

void add_amp_flags(Args& args, const std::string& default_level) {
  args.option({"--opt-level"}, "O0|O1|O2|O3",
              "apex opt level: O0 f32, O1 autocast, O2 low-precision model with f32 masters, O3 pure low precision",
              default_level)
      .option({"--keep-batchnorm-fp32"}, "True|False", "override the level's keep_batchnorm_fp32 (O2/O3)")
      .option({"--loss-scale"}, "X|dynamic", "override the level's loss scale: a number or \"dynamic\"")
      .option({"--dtype"}, "f16|bf16", "the low precision of O1-O3", "f16")
      .option({"--master-weights"}, "True|False", "override the level's FP32 master weights (O2/O3)")
      .flag({"--stochastic-rounding"}, "no master weights: the optimizer rounds the updated f16/bf16 weights "
            "stochastically, keeping small updates in expectation (O3, or O2 with --master-weights false)")
      .flag({"--low-precision-state"}, "with --stochastic-rounding: optimizer state (momentum, Adam's m and v) in "
            "the weights' dtype, rounded stochastically too, instead of f32");
}

amp::Options amp_options(const Args& args, int num_losses) {
  amp::Options o;
  o.opt_level(args.choice("--opt-level", {"O0", "O1", "O2", "O3"}));
  o.dtype(args.choice("--dtype", {"f16", "bf16"}) == "bf16" ? kBFloat16 : kFloat16);
  if (args.given("--dtype") && args.str("--opt-level") == "O0" && ranks().leader())
    std::fprintf(stderr, "%s: warning: --dtype %s has no effect at --opt-level O0, which runs in f32; choose O1-O3 to "
                 "use it\n", args.command().c_str(), args.str("--dtype").c_str());
  // str() rather than given(): a resumed run adopts the checkpoint's overrides as defaults.
  if (!args.str("--keep-batchnorm-fp32").empty()) o.keep_batchnorm_fp32(args.on("--keep-batchnorm-fp32"));
  if (!args.str("--loss-scale").empty()) {
    // One message for every bad value, whichever check would have caught it first.
    const std::string v = args.str("--loss-scale");
    if (v == "dynamic") {
      o.loss_scale(v);
    } else {
      char* end = nullptr;
      const double x = std::strtod(v.c_str(), &end);
      if (v.empty() || *end != '\0' || !std::isfinite(x) || !(x > 0))
        throw UsageError(args.command() + ": --loss-scale expects a positive number or \"dynamic\", got '" + v + "'");
      o.loss_scale(x);
    }
  }
  if (!args.str("--master-weights").empty()) o.master_weights(args.on("--master-weights"));
  const bool sr = args.on("--stochastic-rounding"), lps = args.on("--low-precision-state");
  // Said in flags here; amp's own messages name its API.
  const std::string cmd = args.command() + ": ";
  if (lps && !sr)
    throw UsageError(cmd + "--low-precision-state keeps the optimizer state of --stochastic-rounding in low "
                     "precision; add --stochastic-rounding or drop it");
  if (sr) {
    const std::string level = args.str("--opt-level");
    if (level != "O2" && level != "O3")
      throw UsageError(cmd + "--stochastic-rounding rounds the f16/bf16 weights of a model without master weights, "
                       "and at " + level + " the weights stay f32; use --opt-level O3, or O2 with --master-weights false");
    if (args.str("--master-weights").empty() ? level == "O2" : args.on("--master-weights"))
      throw UsageError(cmd + "--stochastic-rounding replaces the f32 master weights" +
                       (level == "O2" && args.str("--master-weights").empty() ? " O2 keeps by default" : "") +
                       "; add --master-weights false");
    o.stochastic_rounding(true).low_precision_state(lps);
  }
  o.num_losses(num_losses);
  try {
    o.resolve();  // apex's override rules, checked now so a bad combination is a usage error
  } catch (const mpx::Error& e) {
    throw UsageError(e.what());
  }
  return o;
}

namespace {

// Where each data set lives by default, and how to get it.
std::string default_root(const std::string& name) {
  if (name == "fashion-mnist") return data::kFashionMnistDir;
  if (name == "mnist") return "/usr/share/datasets/mnist";
  return "";
}

void require_dir(const std::string& name, const std::string& root) {
  if (root.empty())
    MPX_ERROR("--dataset ", name, " needs a folder: pass --data DIR (or DIR as the last argument)");
  std::error_code ec;
  if (!fs::is_directory(root, ec)) {
    if (ec && ec != std::errc::no_such_file_or_directory && ec != std::errc::not_a_directory)
      MPX_ERROR(name, " data cannot be read: ", io_problem(root, ec));
    std::string how = "pass --data DIR pointing at it";
    if (name == "fashion-mnist") how = "install the Debian package dataset-fashion-mnist (tools/install-deps.sh) or " + how;
    if (name == "cifar10") how = "download the binary version (cifar-10-binary.tar.gz) and " + how;
    MPX_ERROR(name, " data not found: ", root, " is not a folder; ", how);
  }
  // A folder that exists but cannot be listed would otherwise look empty ("no train/ sub-folder").
  fs::directory_iterator probe(root, ec);
  if (ec) MPX_ERROR(name, " data cannot be read: ", io_problem(root, ec));
}

std::vector<int64_t> labels_of(const Tensor& t) {
  const Tensor c = t.to(kInt64).contiguous();
  return std::vector<int64_t>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
}

class Subset : public data::Dataset {
 public:
  Subset(std::shared_ptr<const data::Dataset> base, int64_t n) : base_(std::move(base)), n_(n) {}
  int64_t size() const override { return n_; }
  data::Example<> get(int64_t i) const override { return base_->get(i); }
  data::Example<> get_seeded(int64_t i, uint64_t s) const override { return base_->get_seeded(i, s); }
  // The base's batch loading (ImageFolder's in-place and GPU paths): the indices are the base's.
  bool get_batch(const std::vector<int64_t>& idx, const std::vector<uint64_t>& seeds, data::Batch& out) const override {
    return base_->get_batch(idx, seeds, out);
  }

 private:
  std::shared_ptr<const data::Dataset> base_;
  int64_t n_;
};

}  // namespace

std::shared_ptr<const data::Dataset> limit(std::shared_ptr<const data::Dataset> ds, int64_t n) {
  if (n <= 0 || n >= ds->size()) return ds;
  return std::make_shared<Subset>(std::move(ds), n);
}

DataSplits open_data(const std::string& name, const std::string& root_in, DataPurpose purpose, bool synthetic,
                     int64_t image_size, uint64_t seed, bool skip_bad, std::optional<Device> gpu_decode) {
  namespace T = data::transforms;
  DataSplits s;
  s.name = name;
  s.root = root_in.empty() ? default_root(name) : root_in;
  const bool gen = purpose == DataPurpose::Generate;
  if (name == "synthetic") {
    s.channels = 3, s.image_size = image_size, s.num_classes = 1000, s.root = "";
    s.train = std::make_shared<data::Synthetic>(IntList{3, image_size, image_size}, 1000, 12800, seed);
    s.test = std::make_shared<data::Synthetic>(IntList{3, image_size, image_size}, 1000, 1280, seed + 1);
    return s;
  }
  require_dir(name, s.root);
  if (name == "fashion-mnist" || name == "mnist") {
    const bool fashion = name == "fashion-mnist";
    const double mean = gen ? 0.5 : (fashion ? 0.2860 : 0.1307), sd = gen ? 0.5 : (fashion ? 0.3530 : 0.3081);
    s.mean = {mean}, s.std = {sd};
    // The IDX reader cannot tell a file it may not open from a missing one; say which it is.
    for (const char* stem : {"train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                             "t10k-labels-idx1-ubyte"})
      for (const std::string ext : {"", ".gz"}) {
        const std::string f = (fs::path(s.root) / (stem + ext)).string();
        std::error_code ec;
        if (!fs::exists(f, ec)) continue;
        if (std::FILE* h = std::fopen(f.c_str(), "rb")) std::fclose(h);
        else MPX_ERROR(name, " data cannot be read: ", io_problem(f, std::error_code(errno, std::generic_category())));
      }
    T::Transform t = T::PILToTensor();
    auto tr = fashion ? std::make_shared<data::FashionMNIST>(s.root, true, t) : std::make_shared<data::MNIST>(s.root, true, t);
    auto te = fashion ? std::make_shared<data::FashionMNIST>(s.root, false, t) : std::make_shared<data::MNIST>(s.root, false, t);
    // The models are built for 28 x 28; other IDX images would fail deep inside the first layer that cares.
    for (const auto& [split, images] : {std::pair<const char*, Tensor>{"train", tr->images()}, {"t10k", te->images()}})
      MPX_CHECK(images.size(-1) == 28 && images.size(-2) == 28, name, ": the ", split, "-images file in ", s.root,
                " holds ", images.size(-2), " x ", images.size(-1), " images; ", name,
                " is 28 x 28 (use --dataset imagefolder for images of other sizes)");
    s.classes = tr->classes();
    s.train_labels = labels_of(tr->targets());
    s.test_labels = labels_of(te->targets());
    s.train = tr, s.test = te;
    s.channels = 1, s.image_size = 28, s.num_classes = 10;
  } else if (name == "cifar10") {
    const std::vector<double> mean = gen ? std::vector<double>{0.5, 0.5, 0.5} : std::vector<double>{0.4914, 0.4822, 0.4465};
    const std::vector<double> sd = gen ? std::vector<double>{0.5, 0.5, 0.5} : std::vector<double>{0.2470, 0.2435, 0.2616};
    s.mean = mean, s.std = sd;
    T::Transform test_t = T::PILToTensor();
    T::Transform train_t = gen ? test_t : T::Compose({T::RandomCrop(32, 4), T::RandomHorizontalFlip(), T::PILToTensor()});
    auto tr = std::make_shared<data::CIFAR10>(s.root, true, train_t);
    auto te = std::make_shared<data::CIFAR10>(s.root, false, test_t);
    s.classes = data::CIFAR10::classes();
    s.train_labels = labels_of(tr->targets());
    s.test_labels = labels_of(te->targets());
    s.train = tr, s.test = te;
    s.channels = 3, s.image_size = 32, s.num_classes = 10;
  } else if (name == "imagefolder") {
    // apex's layout: DIR/train and DIR/val; a folder without them is used for both (DCGAN-style).
    const fs::path r(s.root);
    std::error_code ec;
    const bool split = fs::is_directory(r / "train", ec);
    if (!gen && !split) MPX_ERROR("imagefolder: ", s.root, " has no train/ sub-folder; arrange it as DIR/train/<class>/... and DIR/val/<class>/...");
    const std::vector<double> mean = gen ? std::vector<double>{0.5, 0.5, 0.5} : std::vector<double>{0.485, 0.456, 0.406};
    const std::vector<double> sd = gen ? std::vector<double>{0.5, 0.5, 0.5} : std::vector<double>{0.229, 0.224, 0.225};
    const int64_t resize = gen ? image_size : image_size * 256 / 224;
    s.mean = mean, s.std = sd;
    // torchvision's ImageNet transforms (Resize + CenterCrop; RandomResizedCrop + flip) as one pass
    // from the decoded crop to the u8 image the prefetcher normalizes; JPEGs are decoded only as
    // large and as far as the crop needs (data::ImagePipeline).
    const data::ImagePipeline test_p = data::ImagePipeline::eval(resize, image_size).dtype(kUInt8);
    const data::ImagePipeline train_p = gen ? test_p : data::ImagePipeline::train(image_size).dtype(kUInt8);
    const std::string train_dir = split ? (r / "train").string() : s.root;
    const std::string val_dir = split && fs::is_directory(r / "val", ec) ? (r / "val").string() : train_dir;
    if (!gen && val_dir == train_dir)
      std::fprintf(stderr, "mpx: warning: imagefolder: %s has train/ but no val/ folder: the test figures are measured on "
                   "the training images (add DIR/val/<class>/... for a held-out score)\n", s.root.c_str());
    auto opts = data::ImageFolderOptions().verify(!synthetic).skip_corrupt(skip_bad);
    if (gpu_decode) opts.gpu_decode(*gpu_decode);
    std::shared_ptr<data::ImageFolder> tr, te;
    try {
      tr = std::make_shared<data::ImageFolder>(train_dir, data::ImageFolderOptions(opts).pipeline(train_p));
      te = std::make_shared<data::ImageFolder>(
          val_dir, data::ImageFolderOptions(opts).verify(opts.verify_ && val_dir != train_dir).pipeline(test_p));
    } catch (const Error& e) {
      // The library names its option; the user's way out is the flag.
      std::string m = e.what();
      const std::string lib_hint = "skip them (skip_corrupt)";
      if (const size_t at = m.find(lib_hint); at != std::string::npos)
        m.replace(at, lib_hint.size(), "pass --skip-bad-images to train without them (listed in --out's bad_images.txt)");
      MPX_ERROR(m);
    }
    MPX_CHECK(te->classes() == tr->classes(), "imagefolder: ", val_dir, " has ", te->classes().size(),
              " class folders and ", train_dir, " has ", tr->classes().size(),
              (te->classes().size() == tr->classes().size() ? " with other names" : ""),
              "; the validation split needs the same class folders as the training split");
    s.train = tr, s.test = te;
    s.folders = {tr};
    if (val_dir != train_dir) s.folders.push_back(te);
    s.classes = tr->classes();
    for (const auto& [p, c] : tr->samples()) s.train_labels.push_back(c);
    for (const auto& [p, c] : te->samples()) s.test_labels.push_back(c);
    s.ignored_files = tr->ignored_files() + (val_dir != train_dir ? te->ignored_files() : 0);
    s.channels = 3, s.image_size = image_size, s.num_classes = static_cast<int64_t>(tr->classes().size());
  } else {
    throw UsageError("unknown --dataset '" + name + "'; use fashion-mnist, mnist, cifar10, imagefolder or synthetic");
  }
  if (synthetic) {
    // Same shapes and sizes as the real data, random pixels: measures speed without the decoding cost.
    const IntList shape{s.channels, s.image_size, s.image_size};
    s.train = std::make_shared<data::Synthetic>(shape, s.num_classes, s.train->size(), seed);
    s.test = std::make_shared<data::Synthetic>(shape, s.num_classes, s.test->size(), seed + 1);
    s.mean.clear(), s.std.clear();
    s.train_labels.clear(), s.test_labels.clear();
  }
  return s;
}

std::vector<std::string> DataSplits::unreadable() const {
  std::vector<std::string> out;
  for (const auto& f : folders)
    for (const auto& [path, why] : f->unreadable()) out.push_back(path + ": " + why);
  return out;
}

std::string detect_dataset(const std::string& dir) {
  std::error_code ec;
  const fs::path d(dir);
  if (fs::is_directory(d / "train", ec)) return "imagefolder";
  if (fs::exists(d / "data_batch_1.bin", ec) || fs::exists(d / "cifar-10-batches-bin", ec)) return "cifar10";
  if (fs::exists(d / "train-images-idx3-ubyte.gz", ec) || fs::exists(d / "train-images-idx3-ubyte", ec))
    return d.filename().string().find("fashion") != std::string::npos ? "fashion-mnist" : "";
  return "";
}

std::string class_summary(const DataSplits& d, int64_t limit_train, int64_t limit_test) {
  if (d.classes.empty()) return "";
  auto counts = [&](const std::vector<int64_t>& labels, int64_t lim) {
    std::vector<int64_t> c(d.classes.size(), 0);
    const size_t n = lim > 0 ? std::min(labels.size(), static_cast<size_t>(lim)) : labels.size();
    for (size_t i = 0; i < n; ++i)
      if (labels[i] >= 0 && static_cast<size_t>(labels[i]) < c.size()) ++c[static_cast<size_t>(labels[i])];
    return c;
  };
  const auto tr = counts(d.train_labels, limit_train), te = counts(d.test_labels, limit_test);
  const bool even = std::equal(tr.begin() + 1, tr.end(), tr.begin()) && std::equal(te.begin() + 1, te.end(), te.begin());
  if (even && d.classes.size() <= 20) {  // balanced, e.g. Fashion-MNIST: the counts once
    std::string s = std::to_string(d.classes.size()) + " classes, " + std::to_string(tr[0]) + " train / " +
                    std::to_string(te[0]) + " test images each:";
    for (size_t k = 0; k < d.classes.size(); ++k) s += (k ? ", " : " ") + d.classes[k];
    return s;
  }
  std::string s = std::to_string(d.classes.size()) + " classes (train/test images):";
  const size_t shown = d.classes.size() <= 20 ? d.classes.size() : 8;
  for (size_t k = 0; k < shown; ++k)
    s += (k ? ", " : " ") + d.classes[k] + " " + std::to_string(tr[k]) + "/" + std::to_string(te[k]);
  if (shown < d.classes.size()) s += ", ... (" + std::to_string(d.classes.size() - shown) + " more)";
  for (size_t k = 0; k < tr.size(); ++k)
    if (tr[k] == 0) {
      s += "; warning: class " + d.classes[k] + " has no training image";
      break;
    }
  return s;
}

std::vector<std::string> classifier_names() {
  std::vector<std::string> classifiers;
  for (const auto& n : models::model_names())
    if (n.rfind("dcgan", 0) != 0 && !models::is_language_model(n)) classifiers.push_back(n);
  return classifiers;
}

void check_classifier_arch(const std::string& command, const std::string& arch) {
  const std::vector<std::string> classifiers = classifier_names();
  std::string lower = arch;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  if (std::find(classifiers.begin(), classifiers.end(), lower) != classifiers.end()) return;
  if (lower.rfind("dcgan", 0) == 0)
    throw UsageError(command + ": -a " + arch + " is not a classifier; train the DCGAN with mpx dcgan");
  std::string list;
  for (const auto& n : classifiers) list += (list.empty() ? "" : ", ") + n;
  const std::string near = closest(lower, classifiers);
  throw UsageError(command + ": unknown --arch '" + arch + "'" + (near.empty() ? "" : " (did you mean " + near + "?)") +
                   "; the classifiers are " + list);
}

namespace {
// Yields a fixed index list every epoch.
class FixedSampler : public data::Sampler {
 public:
  explicit FixedSampler(std::vector<int64_t> idx) : idx_(std::move(idx)) {}
  std::vector<int64_t> indices(int64_t) const override { return idx_; }
  int64_t size() const override { return static_cast<int64_t>(idx_.size()); }

 private:
  std::vector<int64_t> idx_;
};
}  // namespace

EpochBatches::EpochBatches(data::DataLoader& loader, const DataSplits& d, int64_t epoch, int64_t first, Device device,
                           MemoryFormat layout) {
  data::DataLoader* ld = &loader;
  if (first > 0) {
    std::vector<int64_t> idx;
    const auto order = loader.batch_indices(epoch);
    for (size_t b = static_cast<size_t>(first); b < order.size(); ++b) idx.insert(idx.end(), order[b].begin(), order[b].end());
    data::DataLoaderOptions o = loader.options();
    o.shuffle(false).sampler(std::make_shared<FixedSampler>(std::move(idx)));
    if (!o.seed_) o.seed(loader.seed());
    rest = std::make_unique<data::DataLoader>(loader.dataset(), o);
    ld = rest.get();
  }
  ld->set_epoch(epoch);
  batches = std::make_unique<data::DevicePrefetcher>(*ld, device, d.prefetch_options().memory_format(layout));
}

namespace {
std::atomic<int> g_signal{0};
std::atomic<int64_t> g_signal_ns{0};  // when the first one came (CLOCK_MONOTONIC)
std::atomic<bool> g_verbose{false};
extern "C" void on_signal(int sig) {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);  // async-signal-safe
  const int64_t now = static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
  int64_t unset = 0;
  g_signal_ns.compare_exchange_strong(unset, now);
  int none = 0;
  if (g_signal.compare_exchange_strong(none, sig)) return;
  // A second signal ends the process the usual way, in case the step in flight hangs; but one
  // that follows within half a second is the same request delivered twice (timeout(1) and
  // process managers signal the process and then its whole group), not a second Ctrl-C.
  if (now - g_signal_ns.load() > 500000000) std::_Exit(128 + sig);
}
}  // namespace

void install_interrupt_handler() {
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
}
bool interrupted() { return g_signal.load() != 0; }
int interrupt_exit_code() { return 128 + (g_signal.load() ? g_signal.load() : SIGINT); }
std::string interrupt_name() { return g_signal.load() == SIGTERM ? "SIGTERM" : "Ctrl-C"; }
void set_verbose(bool v) { g_verbose = v; }
bool verbose() { return g_verbose.load(); }

std::string human_bytes(double bytes) {
  char buf[32];
  if (bytes >= 1e9) std::snprintf(buf, sizeof buf, "%.1f GB", bytes / 1e9);
  else if (bytes >= 1e6) std::snprintf(buf, sizeof buf, "%.1f MB", bytes / 1e6);
  else std::snprintf(buf, sizeof buf, "%.0f kB", bytes / 1e3);
  return buf;
}

std::string amp_recipe_note() {
  const amp::Properties& p = amp::properties();
  if (p.stochastic_rounding)
    return p.low_precision_state ? " (no masters, stochastic rounding, low-precision state)"
                                 : " (no masters, stochastic rounding)";
  if (p.opt_level == "O2" && !p.master_weights.value_or(true)) return " (no masters)";
  return "";
}

bool parse_resumable(Args& args, int argc, char** argv, const std::string& command,
                     const std::vector<std::string>& run_flags, const std::vector<std::string>& free_flags,
                     Metadata& meta, TensorDict& ck) {
  if (!args.parse(argc, argv)) return false;
  if (args.positional_value()) {
    if (args.given("--data"))
      throw UsageError("mpx " + command + ": give the data folder once, as --data DIR or as DATA_DIR");
    args.set_default("--data", *args.positional_value());
  }
  const std::string resume = args.str("--resume");
  if (resume.empty()) return true;
  ck = load_checkpoint(resume, command, meta);
  // A resumed run continues in its own folder, never in the default one another run may own.
  if (!args.given("--out")) {
    const fs::path parent = fs::path(resume).parent_path();
    args.set_default("--out", parent.empty() ? "." : parent.string());
  }
  for (const auto& f : run_flags) {
    auto it = meta.find("flag." + f);
    if (it == meta.end()) continue;
    if (!args.given(f)) {
      args.set_default(f, it->second);
    } else if (args.str(f) != it->second && std::find(free_flags.begin(), free_flags.end(), f) == free_flags.end()) {
      std::fprintf(stderr,
                   "mpx %s: warning: %s %s differs from the checkpoint's %s; the continuation will not match an "
                   "uninterrupted run\n",
                   command.c_str(), f.c_str(), args.str(f).c_str(), it->second.empty() ? "(none)" : it->second.c_str());
    }
  }
  return true;
}

int64_t prof_steps(const Args& args, const std::string& command) {
  const char* env = std::getenv("MPX_MAX_STEPS");
  if (args.given("--prof") || env == nullptr || *env == '\0') return args.integer("--prof", -1);
  const std::string v = env;
  if (v.size() > 12 || v.find_first_not_of("0123456789") != std::string::npos)
    throw UsageError("mpx " + command + ": MPX_MAX_STEPS=" + v + " is not a step count (a whole number, 0 or more); "
                     "unset it to train fully");
  const int64_t n = std::stoll(v);
  if (ranks().leader())
    std::fprintf(stderr, "mpx %s: MPX_MAX_STEPS=%lld: stopping after %lld training step%s, as --prof %lld does\n",
                 command.c_str(), static_cast<long long>(n), static_cast<long long>(n), n == 1 ? "" : "s",
                 static_cast<long long>(n));
  return n;
}

bool epochs_left(int64_t start_epoch, int64_t epochs) {
  if (start_epoch < epochs) return true;
  std::printf("nothing to do: the checkpoint already finished %lld of %lld epochs (raise --epochs to train more)\n",
              static_cast<long long>(start_epoch), static_cast<long long>(epochs));
  return false;
}

}  // namespace mpx::cli
