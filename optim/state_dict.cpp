// Optimizer state dicts (PyTorch's layout) and the safetensors files mpx::save/load write for them.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <set>

#include "autograd/grad_mode.h"
#include "core/serialize.h"
#include "ops/elementwise.h"
#include "ops/op_utils.h"
#include "optim/optimizer.h"
#include "optim/optimizer_internal.h"

namespace mpx::optim {

using detail::copy_like;
using detail::make_master;
using detail::master_in_line;

namespace {
std::string fmt_double(double v) {
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%.17g", v);
  return buf;
}
}  // namespace

// ---- state dicts ----
OptimizerState Optimizer::state_dict() const {
  OptimizerState s;
  s.optimizer = name();
  int64_t idx = 0;
  for (size_t g = 0; g < param_groups_.size(); ++g) {
    const ParamGroup& grp = param_groups_[g];
    const std::string gp = "param_groups." + std::to_string(g) + ".";
    std::vector<int64_t> ids;
    for (const Tensor& p : grp.params()) {
      ids.push_back(idx);
      auto it = state_.find(p.impl());
      if (it != state_.end()) {
        const std::string sp = "state." + std::to_string(idx) + ".";
        const ParamState& st = it->second;
        s.scalars[sp + "step"] = static_cast<double>(step_count(p));
        for (const auto& [n, b] : st.buffers)
          if (b.defined()) s.tensors[sp + n] = b.detach();
        if (st.master.defined()) s.tensors[sp + "master"] = master_in_line(st, p).detach();
      }
      ++idx;
    }
    s.tensors[gp + "params"] = ids.empty() ? empty({0}, TensorOptions(kInt64)) : tensor<int64_t>(ids);
    for (const auto& [k, v] : grp.options().to_map()) s.scalars[gp + k] = v;
    if (grp.has_initial_lr()) s.scalars[gp + "initial_lr"] = grp.initial_lr();
  }
  if (stochastic_rounding_) {
    s.scalars["stochastic_rounding.enabled"] = 1.0;
    s.scalars["stochastic_rounding.low_precision_state"] = low_precision_state_ ? 1.0 : 0.0;
    s.tensors["stochastic_rounding.seed"] = tensor<int64_t>({static_cast<int64_t>(rounding_seed_)});
  }
  return s;
}

void Optimizer::load_state_dict(const OptimizerState& s) {
  const std::string who = name_ + "::load_state_dict: ";
  MPX_CHECK(s.optimizer.empty() || s.optimizer == name(), who, "the state was saved by ", s.optimizer,
            "; load it into an optimizer of that kind");
  // Count groups and check that every key is one we understand.
  size_t groups = 0;
  while (s.tensors.count("param_groups." + std::to_string(groups) + ".params")) ++groups;
  MPX_CHECK(groups == param_groups_.size(), who, "the state has ", groups, " parameter groups, this optimizer has ",
            param_groups_.size());

  std::vector<std::unique_ptr<OptimizerOptions>> new_opts;
  std::vector<double> new_initial(groups, -1);
  std::unordered_map<const TensorImpl*, ParamState> new_state;
  std::set<std::string> used;
  auto split_key = [](const std::string& key, const std::string& prefix, int64_t* idx, std::string* rest) {
    if (key.rfind(prefix, 0) != 0) return false;
    const size_t dot = key.find('.', prefix.size());
    if (dot == std::string::npos || dot == prefix.size()) return false;
    const std::string num = key.substr(prefix.size(), dot - prefix.size());
    if (num.find_first_not_of("0123456789") != std::string::npos || num.size() > 12) return false;
    *idx = std::stoll(num);
    *rest = key.substr(dot + 1);
    return true;
  };

  // Group options.
  std::vector<std::map<std::string, double>> hyper(groups);
  for (const auto& [k, v] : s.scalars) {
    int64_t g;
    std::string rest;
    if (split_key(k, "param_groups.", &g, &rest)) {
      MPX_CHECK(g >= 0 && static_cast<size_t>(g) < groups, who, "entry '", k, "' names a group that does not exist");
      if (rest == "initial_lr") new_initial[g] = v;
      else hyper[g][rest] = v;
      used.insert(k);
    }
  }
  for (size_t g = 0; g < groups; ++g) {
    auto o = param_groups_[g].options().clone();
    try {
      o->from_map(hyper[g]);
      o->validate();
    } catch (const Error& e) {
      MPX_ERROR(who, "parameter group ", g, ": ", e.what());
    }
    new_opts.push_back(std::move(o));
  }

  // Per-parameter state, matched to our parameters by the saved group index lists.
  std::vector<std::pair<Tensor, Tensor>> refine;  // (an f32 parameter, its saved master)
  for (size_t g = 0; g < groups; ++g) {
    const std::string key = "param_groups." + std::to_string(g) + ".params";
    const Tensor& ids_t = s.tensors.at(key);
    used.insert(key);
    const auto& params = param_groups_[g].params();
    MPX_CHECK(ids_t.dtype() == kInt64 && ids_t.dim() == 1, who, "'", key, "' must be a 1-d i64 tensor, got ",
              ops::describe(ids_t));
    MPX_CHECK(ids_t.numel() == static_cast<int64_t>(params.size()), who, "parameter group ", g, " has ",
              params.size(), " parameters but the state lists ", ids_t.numel());
    const Tensor ids = ids_t.cpu().contiguous();
    const std::vector<std::string> allowed = buffer_names(*new_opts[g]);
    for (size_t j = 0; j < params.size(); ++j) {
      const Tensor& p = params[j];
      const int64_t id = ids.data_ptr<int64_t>()[j];
      const std::string sp = "state." + std::to_string(id) + ".";
      ParamState ns;
      bool any = false;
      if (auto it = s.scalars.find(sp + "step"); it != s.scalars.end()) {
        MPX_CHECK(it->second >= 0 && std::floor(it->second) == it->second, who, "'", it->first,
                  "' must be a non-negative integer, got ", it->second);
        ns.step = static_cast<int64_t>(it->second);
        used.insert(it->first);
        any = true;
      }
      for (auto it = s.tensors.lower_bound(sp); it != s.tensors.end() && it->first.rfind(sp, 0) == 0; ++it) {
        const std::string bname = it->first.substr(sp.size());
        const Tensor& t = it->second;
        MPX_CHECK(t.defined() && t.sizes() == p.sizes(), who, "'", it->first, "' has shape ",
                  t.defined() ? shape_str(t.sizes()) : "undefined", " but parameter ", j, " of group ", g, " is ",
                  ops::describe(p));
        MPX_CHECK(t.is_floating_point(), who, "'", it->first, "' must be floating, got ", ops::describe(t));
        if (bname == "master") {
          // Without master weights the parameter is its own master: a saved one is not needed.
          if (is_reduced_float(p.dtype()) && master_weights_) ns.master = copy_like(t, p, kFloat32);
          // An f32 parameter (an O2 run resumed at O0, or the state loaded before amp::initialize casts the model)
          // takes the master's digits wherever the master rounds to its value in f16 or bf16.
          else if (!is_reduced_float(p.dtype())) refine.emplace_back(p, t);
        } else {
          MPX_CHECK(std::find(allowed.begin(), allowed.end(), bname) != allowed.end(), who, "unexpected state entry '",
                    it->first, "' for ", name(), " with these options");
          ns.buffers[bname] = copy_like(t, p, state_dtype(p));
        }
        used.insert(it->first);
        any = true;
      }
      if (is_reduced_float(p.dtype()) && master_weights_ && !ns.master.defined()) {
        ns.master = make_master(p);
        any = true;
      }
      if (ns.master.defined()) ns.master.set_requires_grad(true);
      if (any) new_state[p.impl()] = std::move(ns);
    }
  }
  // The rounding mode is this optimizer's configuration (amp sets it, as it sets masters); the
  // seed is the state of its draws.
  std::optional<uint64_t> seed;
  for (const char* k : {"stochastic_rounding.enabled", "stochastic_rounding.low_precision_state"})
    if (auto it = s.scalars.find(k); it != s.scalars.end()) {
      MPX_CHECK(it->second == 0 || it->second == 1, who, "'", k, "' must be 0 or 1, got ", it->second);
      used.insert(k);
    }
  if (auto it = s.tensors.find("stochastic_rounding.seed"); it != s.tensors.end()) {
    const Tensor& t = it->second;
    MPX_CHECK(t.defined() && t.dtype() == kInt64 && t.numel() == 1, who,
              "'stochastic_rounding.seed' must be one i64 value, got ", ops::describe(t));
    seed = static_cast<uint64_t>(t.cpu().contiguous().data_ptr<int64_t>()[0]);
    used.insert(it->first);
  }
  for (const auto& [k, v] : s.tensors)
    MPX_CHECK(used.count(k), who, "unexpected entry '", k, "' (no parameter or group of this optimizer has it)");
  for (const auto& [k, v] : s.scalars)
    MPX_CHECK(used.count(k), who, "unexpected entry '", k, "' (no parameter or group of this optimizer has it)");

  // Everything checked: commit.
  for (size_t g = 0; g < groups; ++g) {
    param_groups_[g].set_options(std::move(new_opts[g]));
    if (new_initial[g] >= 0) param_groups_[g].set_initial_lr(new_initial[g]);
  }
  state_ = std::move(new_state);
  if (seed) rounding_seed_ = *seed;
  NoGradGuard ng;
  for (const auto& [p, saved] : refine) {
    const Tensor m = saved.to(p.device()).to(p.dtype());
    Tensor dst = p;
    dst.copy_(where(m.to(kFloat16).to(p.dtype()).eq(p), m, where(m.to(kBFloat16).to(p.dtype()).eq(p), m, p)));
  }
}

}  // namespace mpx::optim

namespace mpx {

void save(const optim::Optimizer& optimizer, const std::string& path) {
  optim::OptimizerState s = optimizer.state_dict();
  Metadata meta{{"format", "mpx.optimizer"}, {"optimizer", s.optimizer}};
  for (const auto& [k, v] : s.scalars) meta[k] = optim::fmt_double(v);
  save_tensors(s.tensors, path, meta);
}

void load(optim::Optimizer& optimizer, const std::string& path) {
  Metadata meta;
  optim::OptimizerState s;
  s.tensors = load_tensors(path, &meta);
  auto f = meta.find("format");
  MPX_CHECK(f != meta.end() && f->second == "mpx.optimizer", "load(optimizer, '", path,
            "'): the file is not an optimizer state written by mpx::save(optimizer, path)");
  s.optimizer = meta.count("optimizer") ? meta.at("optimizer") : "";
  for (const auto& [k, v] : meta) {
    if (k.rfind("state.", 0) != 0 && k.rfind("param_groups.", 0) != 0 && k.rfind("stochastic_rounding.", 0) != 0)
      continue;
    char* end = nullptr;
    const double d = std::strtod(v.c_str(), &end);
    MPX_CHECK(!v.empty() && end && *end == '\0', "load(optimizer, '", path, "'): metadata entry '",
              k, "' = '", v, "' is not a number");
    s.scalars[k] = d;
  }
  try {
    optimizer.load_state_dict(s);
  } catch (const Error& e) {
    MPX_ERROR("load(optimizer, '", path, "'): ", e.what());
  }
}

}  // namespace mpx
