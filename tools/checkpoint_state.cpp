// The commands' checkpoint state in and out (declared in tools/common.h): optimizer, module, amp and RNG state as tensors and metadata, the finite check, the resume point.
#include "tools/common.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "core/metadata.h"
#include "tools/run_dir.h"

namespace mpx::cli {

namespace fs = std::filesystem;

std::string num(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

double meta_num(const Metadata& m, const std::string& key, const std::string& path, double lo) {
  return metadata::get_double(m, key, path, lo);
}
int64_t meta_int(const Metadata& m, const std::string& key, const std::string& path, int64_t lo, int64_t hi) {
  return metadata::get_int(m, key, path, lo, hi);
}

std::string meta_str(const Metadata& m, const std::string& key) {
  auto it = m.find(key);
  return it == m.end() ? "" : it->second;
}

void put_optimizer(const optim::Optimizer& opt, const std::string& prefix, TensorDict& tensors, Metadata& meta) {
  const optim::OptimizerState st = opt.state_dict();
  for (const auto& [k, t] : st.tensors) tensors[prefix + "." + k] = t;
  for (const auto& [k, v] : st.scalars) meta[prefix + "." + k] = num(v);
  meta[prefix + ".__name__"] = st.optimizer;
}

void get_optimizer(optim::Optimizer& opt, const std::string& prefix, const TensorDict& tensors, const Metadata& meta,
                   const std::string& path) {
  optim::OptimizerState st;
  st.optimizer = meta_str(meta, prefix + ".__name__");
  const std::string p = prefix + ".";
  for (const auto& [k, t] : tensors)
    if (k.rfind(p, 0) == 0) st.tensors[k.substr(p.size())] = t;
  for (const auto& [k, v] : meta)
    if (k.rfind(p, 0) == 0 && k != p + "__name__") st.scalars[k.substr(p.size())] = meta_num(meta, k, path);
  opt.load_state_dict(st);
}

void put_module(const nn::Module& m, const std::string& prefix, TensorDict& tensors) {
  for (const auto& [k, t] : detail::module_state_dict(m)) tensors[prefix + "." + k] = t;
}

void get_module(nn::Module& m, const std::string& prefix, const TensorDict& tensors, const std::string& path) {
  std::map<std::string, Tensor> sd;
  const std::string p = prefix + ".";
  for (const auto& [k, t] : tensors)
    if (k.rfind(p, 0) == 0) sd[k.substr(p.size())] = t;
  MPX_CHECK(!sd.empty(), "checkpoint ", path, " has no \"", prefix, ".*\" tensors; it is not a checkpoint of this command");
  // Compared here so a checkpoint of another model gets a short summary, not the library's key lists.
  const StateFit fit = fit_state(m, sd);
  if (!fit.missing.empty() || !fit.unexpected.empty() || !fit.reshaped.empty())
    MPX_ERROR("--resume ", path, " holds another model's weights: ", fit.summary(), "; resume with the -a and data set "
              "it was written with");
  m.load_state_dict(sd, true);
}

StateFit fit_state(const nn::Module& m, const std::map<std::string, Tensor>& sd) {
  StateFit f;
  const auto own = detail::module_state_dict(m);
  for (const auto& [k, t] : own) {
    auto it = sd.find(k);
    if (it == sd.end()) f.missing.push_back(k);
    else if (it->second.sizes() != t.sizes())
      f.reshaped.push_back(k + " " + shape_str(it->second.sizes()) + " vs " + shape_str(t.sizes()));
    else f.matched.push_back(k);
  }
  for (const auto& [k, t] : sd)
    if (!own.count(k)) f.unexpected.push_back(k);
  f.model_size = own.size();
  return f;
}

std::string StateFit::summary() const {
  auto some = [](const std::vector<std::string>& v) {
    std::string s;
    const size_t n = verbose() ? v.size() : std::min<size_t>(3, v.size());
    for (size_t i = 0; i < n; ++i) s += (i ? ", " : "") + v[i];
    if (n < v.size()) s += ", ...";
    return s;
  };
  std::string s = std::to_string(matched.size()) + " of the model's " + std::to_string(model_size) + " tensors match";
  if (!reshaped.empty())
    s += "; " + std::to_string(reshaped.size()) + (reshaped.size() == 1 ? " has" : " have") + " another shape (" +
         some(reshaped) + ")";
  if (!missing.empty())
    s += "; " + std::to_string(missing.size()) + (missing.size() == 1 ? " is" : " are") + " missing (" + some(missing) + ")";
  if (!unexpected.empty())
    s += "; " + std::to_string(unexpected.size()) + " of the file's are not in the model (" + some(unexpected) + ")";
  if (!verbose() && (reshaped.size() > 3 || missing.size() > 3 || unexpected.size() > 3)) s += " (--verbose lists all)";
  return s;
}

void put_amp_and_rng(Metadata& meta) {
  for (const auto& [k, v] : amp::state_dict()) meta["amp." + k] = num(v);
  auto& g = random::default_generator();
  meta["rng.seed"] = std::to_string(g.current_seed());
  meta["rng.offset"] = std::to_string(g.offset());
}

void get_amp_and_rng(const Metadata& meta, const std::string& path) {
  std::map<std::string, double> a;
  for (const auto& [k, v] : meta) {
    if (k.rfind("amp.", 0) != 0) continue;
    // Counts are integers; scales are positive (amp::load_state_dict checks the rest).
    const bool count = k.size() > 10 && k.compare(k.size() - 10, 10, ".unskipped") == 0;
    a[k.substr(4)] = count ? static_cast<double>(meta_int(meta, k, path, 0, kMaxMetaCount)) : meta_num(meta, k, path, 0.0);
  }
  const uint64_t seed = metadata::get_u64(meta, "rng.seed", path), offset = metadata::get_u64(meta, "rng.offset", path);
  if (!a.empty()) amp::load_state_dict(a);
  random::default_generator().set_state(seed, offset);
}

TensorDict load_checkpoint(const std::string& path, const std::string& kind, Metadata& meta) {
  std::error_code ec;
  const bool there = fs::exists(path, ec);
  if (ec) MPX_ERROR("--resume ", io_problem(path, ec));
  MPX_CHECK(there, "--resume ", path, ": no such file; give the checkpoint.safetensors a previous run wrote to its --out");
  // Opened once here so a permission problem is named as one, not reported as a damaged file.
  if (std::FILE* f = std::fopen(path.c_str(), "rb")) {
    std::fclose(f);
  } else {
    MPX_ERROR("--resume ", io_problem(path, std::error_code(errno, std::generic_category())));
  }
  TensorDict t;
  try {
    t = load_tensors(path, &meta);
  } catch (const std::exception& e) {
    MPX_ERROR("--resume ", path, " is unreadable (", e.what(), "); use another checkpoint or start without --resume");
  }
  const std::string k = meta_str(meta, "mpx.checkpoint");
  MPX_CHECK(k == kind, "--resume ", path, " is ", k.empty() ? std::string("not an mpx checkpoint") : "a '" + k + "' checkpoint",
            "; `mpx ", kind, "` resumes only from its own checkpoint.safetensors");
  verify_checksum(t, meta, path);
  return t;
}

void check_finite(const TensorDict& tensors, const std::string& prefix, const std::string& path) {
  for (const auto& [name, t] : tensors) {
    if (name.rfind(prefix, 0) != 0 || !is_floating(t.dtype())) continue;
    const Tensor f = t.to(kFloat32);
    const double bad = sum(ge(abs(f), INFINITY).to(kFloat64) + ne(f, f).to(kFloat64)).item<double>();
    MPX_CHECK(bad == 0, "--resume ", path, ": ", name, " holds ", static_cast<int64_t>(bad), " NaN or infinite value",
              bad == 1 ? "" : "s", " of ", t.numel(), "; the run that wrote it had diverged or the file is damaged; use "
              "an earlier checkpoint or start without --resume");
  }
}

ResumePoint restore_checkpoint(const Metadata& meta, const std::string& path, int64_t steps_per_epoch,
                               const std::function<void()>& load, bool keep_finished_epoch) {
  try {
    load();
    get_amp_and_rng(meta, path);
  } catch (const std::exception& e) {
    // Already a sentence about the file (the flag, or a damaged field of the checkpoint).
    if (std::string(e.what()).rfind("--resume ", 0) == 0 || std::string(e.what()).rfind("checkpoint ", 0) == 0) throw;
    MPX_ERROR("--resume ", path, " does not fit this run (", e.what(), "); resume with the flags it was written with");
  }
  ResumePoint r;
  r.epoch = meta_int(meta, "epoch", path, 0, kMaxMetaCount);
  r.step = meta_int(meta, "step_in_epoch", path, 0, kMaxMetaCount);
  r.global_step = meta_int(meta, "global_step", path, 0, kMaxMetaCount);
  if (steps_per_epoch > 0 && (r.step > steps_per_epoch || (r.step == steps_per_epoch && !keep_finished_epoch)))
    r.epoch += 1, r.step = 0;
  return r;
}

}  // namespace mpx::cli
