// CLI tests: a resumed checkpoint whose metadata fields are damaged is refused, naming the field and the file.
#include <catch2/catch.hpp>

#include <filesystem>
#include <string>

#include <mpx/mpx.h>

#include "tests/cli_util.h"

namespace fs = std::filesystem;
using mpx::testing::run_mpx;

// Before: "epoch": "1e300" or "nan" became an int64 by a cast (undefined behaviour; the resume
// then trained practically forever), "-5" silently trained extra epochs, and a bad rng.seed
// printed the bare text "(stoull)".
TEST_CASE("cli: damaged checkpoint fields are refused with the field and the file named", "[cli]") {
  if (!mpx::testing::have_fashion()) return;
  const fs::path dir = mpx::testing::cli_temp_dir("mpx_cli_fields_", "run");
  const auto r = run_mpx("train --limit-train 256 --limit-test 128 -b 64 --epochs 1 --out '" + dir.string() + "'");
  REQUIRE(r.rc == 0);
  mpx::Metadata meta;
  const mpx::TensorDict t = mpx::load_tensors((dir / "checkpoint.safetensors").string(), &meta);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"epoch", "1e300"}, {"epoch", "nan"}, {"epoch", "-5"}, {"global_step", "12.5"},
      {"rng.seed", "12ab"}, {"rng.offset", "-1"}, {"amp.loss_scaler0.loss_scale", "inf"},
      {"amp.loss_scaler0.unskipped", "1e300"}};
  for (const auto& [key, value] : cases) {
    INFO(key << " = " << value);
    mpx::Metadata bad = meta;
    bad[key] = value;
    bad.erase("checksum");  // as a file edited by hand or written by an older mpx: only the fields decide
    const fs::path ck = dir / "damaged.safetensors";
    mpx::save_tensors(t, ck.string(), bad);
    const auto res = run_mpx("train --resume '" + ck.string() + "' --out '" + (dir / "resumed").string() + "' --overwrite");
    CHECK(res.rc == 1);
    CHECK_THAT(res.out, Catch::Contains("field \"" + key + "\"") && Catch::Contains(ck.string()) &&
                            Catch::Contains("\"" + value + "\""));
    CHECK_THAT(res.out, !Catch::Contains("stoull") && !Catch::Contains("does not fit this run"));
  }
  fs::remove_all(dir.parent_path());
}
