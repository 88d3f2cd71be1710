// Tests for saving, loading and resuming as users order those calls: O2 masters against weights loaded into the model, tied weights named once, RNG state, and the errors of bad state.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include <mpx/mpx.h>

#include "test_util.h"

using namespace mpx;

namespace {

// A folder of its own per case, removed at the end.
struct TempDir {
  std::string path;
  TempDir() {
    std::string t = (std::filesystem::temp_directory_path() / "mpx_resume_XXXXXX").string();
    REQUIRE(::mkdtemp(t.data()) != nullptr);
    path = t;
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string operator/(const std::string& f) const { return path + "/" + f; }
};

// One amp step of a Linear on a fixed batch.
void amp_step(nn::Linear& m, optim::Optimizer& opt, uint64_t seed) {
  manual_seed(seed);
  const Tensor x = randn({5, 4});
  Tensor loss = m(x).to(kFloat32).square().mean();
  amp::scale_loss(loss, opt).backward();
  opt.step();
  opt.zero_grad();
}

std::set<std::string> keys(const nn::Module& m) {
  std::set<std::string> r;
  for (const auto& [k, t] : m.state_dict()) r.insert(k);
  return r;
}

struct Fresh {
  nn::Linear m{nn::LinearOptions(4, 3)};
  optim::SGD opt{m->parameters(), optim::SGDOptions(0.05).momentum(0.9)};
};

}  // namespace

TEST_CASE("O2: weights loaded into the model after amp::initialize are where the next step starts, and a loaded "
          "optimizer's masters are kept wherever they round to the model",
          "[amp][optim][checkpoint]") {
  TempDir dir;
  const auto o2 = amp::Options().opt_level("O2").verbosity(0);
  {  // a run of three steps, saved after two
    amp::reset();
    manual_seed(1);
    Fresh a;
    amp::initialize(a.m, a.opt, o2);
    amp_step(a.m, a.opt, 10);
    amp_step(a.m, a.opt, 11);
    save(a.m, dir / "m.safetensors");
    save(a.opt, dir / "opt.safetensors");
    amp_step(a.m, a.opt, 12);
    save(a.m, dir / "m3.safetensors");
    save(a.opt, dir / "opt3.safetensors");
  }
  const TensorDict want_model = load_tensors(dir / "m3.safetensors"), want_opt = load_tensors(dir / "opt3.safetensors");
  // apex's order (initialize, model, optimizer), the optimizer before the model, and both into the f32 model
  // before amp::initialize casts it: each continues bit for bit.
  for (const std::string order : {"imo", "iom", "moi"}) {
    INFO("order " << order);
    amp::reset();
    Fresh r;
    for (const char c : order) {
      if (c == 'i') amp::initialize(r.m, r.opt, o2);
      if (c == 'm') load(r.m, dir / "m.safetensors");
      if (c == 'o') load(r.opt, dir / "opt.safetensors");
    }
    amp_step(r.m, r.opt, 12);
    CHECK(equal(r.m->weight, want_model.at("weight")));
    CHECK(equal(r.opt.master(r.m->weight), want_opt.at("state.0.master")));
  }
  {  // fine-tuning: the model alone, with a fresh optimizer
    amp::reset();
    manual_seed(2);  // other initial weights than the saved run's
    Fresh r;
    amp::initialize(r.m, r.opt, o2);
    load(r.m, dir / "m.safetensors");
    const Tensor loaded = r.m->weight.clone();
    CHECK(equal(r.opt.master(r.m->weight), loaded.to(kFloat32)));  // the accessor sees the load too
    for (auto& g : r.opt.param_groups()) g.options().set_lr(0.0);
    amp_step(r.m, r.opt, 12);
    CHECK(equal(r.m->weight, loaded));  // was: the fresh model's initial weights came back
  }
  amp::reset();
}

TEST_CASE("a tied weight named once, as safetensors' save_model writes it, loads strictly", "[nn][checkpoint]") {
  struct TiedImpl : nn::Module {
    TiedImpl() {
      emb = register_module("encoder", nn::Embedding(10, 4));
      head = register_module("decoder", nn::Linear(nn::LinearOptions(4, 10).bias(false)));
      head->weight = head->replace_parameter("weight", emb->weight);
    }
    nn::Embedding emb{nullptr};
    nn::Linear head{nullptr};
  };
  TempDir dir;
  auto tied = std::make_shared<TiedImpl>();
  CHECK(keys(*tied) == std::set<std::string>{"encoder.weight", "decoder.weight"});
  const Tensor w = randn({10, 4});
  for (const char* name : {"encoder.weight", "decoder.weight"}) {
    INFO(name);
    save_tensors({{name, w}}, dir / "one.safetensors");
    auto m = std::make_shared<TiedImpl>();
    load(m, dir / "one.safetensors");
    CHECK(equal(m->emb->weight, w));
    CHECK(equal(m->head->weight, w));
  }
  save_tensors({{"other", w}}, dir / "none.safetensors");
  CHECK_THROWS_WITH(load(tied, dir / "none.safetensors"),
                    Catch::Contains("none.safetensors") && Catch::Contains("\"encoder.weight\", \"decoder.weight\""));
}

TEST_CASE("get_rng_state and set_rng_state repeat the draws that follow", "[random][checkpoint]") {
  manual_seed(7);
  (void)rand({3});
  const Tensor state = get_rng_state();
  CHECK(state.dtype() == kInt64);
  CHECK(state.sizes() == IntList{2});
  const Tensor first = randn({4}), dropped = dropout(ones({64}), 0.5, true);
  (void)rand({100});
  set_rng_state(state);
  CHECK(equal(randn({4}), first));
  CHECK(equal(dropout(ones({64}), 0.5, true), dropped));
  CHECK_THROWS_WITH(set_rng_state(zeros({2})), Catch::Contains("two i64 values"));
  CHECK_THROWS_WITH(set_rng_state(Tensor()), Catch::Contains("undefined"));
}

TEST_CASE("amp::load_state_dict names a GradScaler's state and refuses a scale above max_loss_scale", "[amp]") {
  amp::reset();
  nn::Linear m(2, 2);
  optim::SGD opt(m->parameters(), optim::SGDOptions(0.1));
  amp::initialize(m, opt, amp::Options().opt_level("O2").verbosity(0));
  amp::GradScaler scaler;
  CHECK_THROWS_WITH(amp::load_state_dict(scaler.state_dict()), Catch::Contains("GradScaler::load_state_dict"));
  CHECK_THROWS_WITH(amp::load_state_dict({{"loss_scale", 2.0}}), Catch::Contains("no \"loss_scaler0.loss_scale\""));
  CHECK_THROWS_WITH(amp::load_state_dict({{"loss_scaler0.loss_scale", 1e30}, {"loss_scaler0.unskipped", 0.0}}),
                    Catch::Contains("above max_loss_scale"));
  amp::load_state_dict({{"loss_scaler0.loss_scale", 1024.0}, {"loss_scaler0.unskipped", 3.0}});
  CHECK(amp::loss_scale() == 1024.0);
  amp::reset();
}

TEST_CASE("saving through a symbolic link replaces the link's target and keeps the link", "[serialize]") {
  TempDir dir;
  save_tensors({{"a", ones({2})}}, dir / "target.safetensors");
  std::filesystem::create_symlink("target.safetensors", dir / "link.safetensors");
  save_tensors({{"a", zeros({3})}}, dir / "link.safetensors");
  CHECK(std::filesystem::is_symlink(dir / "link.safetensors"));
  CHECK(equal(load_tensors(dir / "target.safetensors").at("a"), zeros({3})));
}
