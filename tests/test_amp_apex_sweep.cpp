// apex's tests/L0/run_amp/test_multiple_models_optimizers_losses.py as a sweep: O0-O3 x three ways of
// clearing gradients x one or per-loss scalers x an inf injected into either loss, iteration and
// weight, for 2 or 3 models and 1 or 2 optimizers, against the same loop run without amp.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <mpx/mpx.h>

using namespace mpx;

namespace {

// The parameter whose incoming gradient gets an inf in its first element (null: none). apex
// writes `param.grad[0] = inf` between backward and unscale; mpx's scale_loss(...).backward()
// does both at once, so the inf is injected on the way into the parameter instead.
const TensorImpl* g_inject = nullptr;

struct InjectInf : autograd::Function<InjectInf> {
  static Tensor forward(autograd::Context& ctx, const Tensor& w) {
    ctx.saved_data["param"] = static_cast<int64_t>(reinterpret_cast<intptr_t>(w.impl()));
    return w.clone();
  }
  static tensor_list backward(autograd::Context& ctx, const tensor_list& g) {
    if (reinterpret_cast<intptr_t>(g_inject) != ctx.saved_data["param"].toInt()) return {g[0]};
    Tensor r = g[0].clone();
    r.narrow(0, 0, 1).fill_(std::numeric_limits<double>::infinity());
    return {r};
  }
};

// apex's MyModel: an f32 and an f16 weight, loss = sum(x * weight0 * weight1) in f32.
struct MyModelImpl : nn::Module {
  explicit MyModelImpl(double unique) {
    weight0 = register_parameter("weight0", arange(2.0, kFloat32) + unique);
    weight1 = register_parameter("weight1", (arange(2.0, kFloat32) + (1.0 + unique)).to(kFloat16));
  }
  Tensor forward(const Tensor& x) {
    return sum(x * InjectInf::apply(weight0).to(kFloat32) * InjectInf::apply(weight1).to(kFloat32));
  }
  Tensor weight0, weight1;
};
MPX_MODULE(MyModel);

// One of apex's four tests: optimizers as (model, lr) groups with a momentum each, and the two
// losses as sums of model outputs, each scaled into some of the optimizers.
struct Layout {
  const char* name;
  int models;
  std::vector<std::vector<std::pair<int, double>>> groups;  // per optimizer
  std::vector<double> momentum;                             // per optimizer
  std::vector<std::vector<int>> loss_models;                // per loss
  std::vector<std::vector<int>> loss_opts;                  // per loss
};

const std::vector<Layout>& layouts() {
  static const std::vector<Layout> l = {
      {"2models2losses1optimizer", 2, {{{0, 0.25}, {1, 0.5}}}, {0.125}, {{0}, {1}}, {{0}, {0}}},
      {"3models2losses1optimizer", 3, {{{0, 0.25}, {1, 0.5}, {2, 0.125}}}, {0.125}, {{0, 2}, {1, 2}}, {{0}, {0}}},
      {"2models2losses2optimizers", 2, {{{0, 0.25}}, {{1, 0.5}}}, {0.125, 0.25}, {{0}, {1}}, {{0}, {1}}},
      {"3models2losses2optimizers", 3, {{{0, 0.25}, {1, 1.0}}, {{2, 0.5}}}, {0.5, 0.25}, {{0, 1}, {2, 1}}, {{0}, {0, 1}}},
  };
  return l;
}

// Where the inf goes (iteration -1: nowhere).
struct Injection {
  int iteration = -1;
  int backward = 0;
  int model = 0;
  bool fp16 = false;  // weight1 (f16) or weight0 (f32)
};

struct Run {
  std::vector<MyModel> models;
  std::vector<std::unique_ptr<optim::SGD>> opts;
  explicit Run(const Layout& lay) {
    for (int m = 0; m < lay.models; ++m) models.emplace_back(static_cast<double>(m + 1));
    for (size_t o = 0; o < lay.groups.size(); ++o) {
      std::vector<optim::ParamGroup> groups;
      for (auto [m, lr] : lay.groups[o])
        groups.emplace_back(models[m]->parameters(), std::make_unique<optim::SGDOptions>(
                                                         optim::SGDOptions(lr).momentum(lay.momentum[o])));
      opts.push_back(std::make_unique<optim::SGD>(std::move(groups), optim::SGDOptions(0.1)));
    }
  }
  Tensor loss(const Layout& lay, int l, const Tensor& x) {
    Tensor r;
    for (int m : lay.loss_models[l]) r = r.defined() ? r + models[m](x) : models[m](x);
    return r;
  }
  const TensorImpl* target(const Injection& inj) const {
    return inj.fp16 ? models[inj.model]->weight1.impl() : models[inj.model]->weight0.impl();
  }
  // Every parameter in optimizer order, and what the steps update (amp's master params).
  std::vector<Tensor> params() const {
    std::vector<Tensor> r;
    for (const auto& o : opts)
      for (const auto& p : o->parameters()) r.push_back(p);
    return r;
  }
  std::vector<Tensor> masters() const {
    std::vector<Tensor> r;
    for (const auto& o : opts)
      for (const auto& p : amp::master_params(*o)) r.push_back(p);
    return r;
  }
};

// The optimizers that skip their step: those the overflowing loss was scaled into.
std::set<int> skipped_opts(const Layout& lay, const Injection& inj, int iteration) {
  if (inj.iteration != iteration) return {};
  return {lay.loss_opts[inj.backward].begin(), lay.loss_opts[inj.backward].end()};
}

struct Reference {
  std::vector<std::vector<Tensor>> grads;  // per iteration, in optimizer order
  std::vector<Tensor> final_params;
};

// The loop without amp, where the steps apex skips are simply not taken.
Reference reference(const Layout& lay, const Injection& inj, int iters, const Tensor& x) {
  Run run(lay);
  Reference ref;
  for (int i = 0; i < iters; ++i) {
    for (auto& o : run.opts) o->zero_grad();
    Tensor l0 = run.loss(lay, 0, x), l1 = run.loss(lay, 1, x);
    l0.backward();
    l1.backward();
    std::vector<Tensor> g;
    for (const auto& p : run.params()) g.push_back(p.grad().to(kFloat32).clone());
    ref.grads.push_back(g);
    const auto skip = skipped_opts(lay, inj, i);
    for (size_t o = 0; o < run.opts.size(); ++o)
      if (!skip.count(static_cast<int>(o))) run.opts[o]->step();
  }
  for (const auto& p : run.params()) ref.final_params.push_back(p.detach().to(kFloat32).clone());
  return ref;
}

bool close(const Tensor& a, const Tensor& b) { return allclose(a.to(kFloat32), b.to(kFloat32), 1e-5, 1e-6); }

// One apex configuration; returns "" or what differed.
std::string run_amp(const Layout& lay, const std::string& level, const std::string& how_to_zero, bool per_loss_scalers,
                    const Injection& inj) {
  const Tensor x = ones({2});
  const int iters = inj.iteration >= 0 ? 3 : 2;
  const Reference ref = reference(lay, inj, iters, x);
  Run run(lay);
  amp::reset();
  std::vector<amp::ModelRef> refs;
  for (auto& m : run.models) refs.emplace_back(m);
  std::vector<amp::OptimizerRef> orefs;
  for (auto& o : run.opts) orefs.emplace_back(*o);
  amp::initialize(refs, orefs,
                  amp::Options().opt_level(level).verbosity(0).keep_model_dtypes().num_losses(per_loss_scalers ? 2 : 1));
  // apex's test sets _loss_scale to 4 and 16 directly.
  std::map<std::string, double> sd = {{"loss_scaler0.loss_scale", 4.0}, {"loss_scaler0.unskipped", 0}};
  if (per_loss_scalers) sd.insert({{"loss_scaler1.loss_scale", 16.0}, {"loss_scaler1.unskipped", 0}});
  amp::load_state_dict(sd);
  const int loss_ids[2] = {0, per_loss_scalers ? 1 : 0};

  std::ostringstream err;
  for (int i = 0; i < iters; ++i) {
    if (how_to_zero == "none") {
      for (auto& m : run.models)
        for (auto& p : m->parameters()) p.mutable_grad() = Tensor();
    } else if (how_to_zero == "model") {
      for (auto& m : run.models) m->zero_grad();
    } else {
      for (auto& o : run.opts) o->zero_grad();
    }
    Tensor losses[2] = {run.loss(lay, 0, x), run.loss(lay, 1, x)};
    for (int b = 0; b < 2; ++b) {
      std::vector<amp::OptimizerRef> to;
      for (int o : lay.loss_opts[b]) to.emplace_back(*run.opts[o]);
      g_inject = i == inj.iteration && b == inj.backward ? run.target(inj) : nullptr;
      amp::scale_loss(losses[b], to, amp::ScaleLossOptions().loss_id(loss_ids[b])).backward();
      g_inject = nullptr;
    }
    if (i != inj.iteration) {
      const auto masters = run.masters();
      for (size_t k = 0; k < masters.size(); ++k)
        if (!masters[k].grad().defined() || !close(masters[k].grad(), ref.grads[i][k]))
          err << "iteration " << i << ": gradient of master " << k << " differs from the reference; ";
    }
    for (auto& o : run.opts) o->step();
  }
  const auto params = run.params(), masters = run.masters();
  for (size_t k = 0; k < params.size(); ++k) {
    if (!close(params[k], ref.final_params[k])) err << "final parameter " << k << " differs from the reference; ";
    if (!close(params[k], masters[k].to(params[k].dtype()))) err << "parameter " << k << " differs from its master; ";
  }
  // The overflowing loss's scaler backs off once; the others keep their scale (2000 clean steps to grow).
  for (int s = 0; s < (per_loss_scalers ? 2 : 1); ++s) {
    double want = s == 0 ? 4.0 : 16.0;
    if (inj.iteration >= 0 && loss_ids[inj.backward] == s) want /= 2;
    if (amp::loss_scale(s) != want) err << "loss scale " << s << " is " << amp::loss_scale(s) << ", expected " << want << "; ";
  }
  amp::reset();
  return err.str();
}

}  // namespace

TEST_CASE("apex test_multiple_models_optimizers_losses: the whole sweep matches the loop without amp", "[amp][apex]") {
  int configurations = 0;
  for (const Layout& lay : layouts())
    for (const std::string level : {"O0", "O1", "O2", "O3"})
      for (const std::string how_to_zero : {"none", "model", "optimizer"})
        for (bool per_loss : {true, false}) {
          // apex injects only where the scale is dynamic (O1, O2).
          std::vector<Injection> injections = {Injection{}};
          if (level == "O1" || level == "O2")
            for (int it : {0, 1})
              for (bool fp16 : {true, false})
                for (int b : {0, 1})
                  for (int m : lay.loss_models[b]) injections.push_back({it, b, m, fp16});
          for (const Injection& inj : injections) {
            INFO(lay.name << " " << level << " zero via " << how_to_zero << (per_loss ? ", per-loss scalers" : ", one scaler")
                          << ", inf at iteration " << inj.iteration << " backward " << inj.backward << " model " << inj.model
                          << (inj.fp16 ? " fp16" : " fp32"));
            CHECK(run_amp(lay, level, how_to_zero, per_loss, inj) == "");
            ++configurations;
          }
        }
  CHECK(configurations == 672);
}

// The regression this sweep found: O2 master gradients leaked from one iteration into the next
// when the loop cleared gradients through the model (3.75 instead of 1.75).
TEST_CASE("O2 master gradients belong to one step: clearing through the model does not leak them", "[amp][apex]") {
  MyModel net(1.0);
  optim::SGD opt(net->parameters(), optim::SGDOptions(0.0));
  amp::reset();
  amp::initialize(net, opt, amp::Options().opt_level("O2").verbosity(0).keep_model_dtypes());
  amp::load_state_dict({{"loss_scaler0.loss_scale", 4.0}, {"loss_scaler0.unskipped", 0}});
  const Tensor x = ones({2});
  for (int i = 0; i < 2; ++i) {
    net->zero_grad();
    amp::scale_loss(net(x), opt).backward();
    const Tensor mg = amp::master_params(opt)[1].grad();
    REQUIRE(mg.defined());
    CHECK(mg.dtype() == kFloat32);
    CHECK(allclose(mg, tensor(std::vector<float>{1, 2})));  // x * weight0, this iteration's alone
    opt.step();
    CHECK_FALSE(amp::master_params(opt)[1].grad().defined());
  }
  amp::reset();
}
