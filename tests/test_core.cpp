// Tests of the tensor core: dtypes, Half/BFloat16 rounding, views, layouts, RNG, errors.
#include <catch2/catch.hpp>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <vector>
#include <immintrin.h>

#include "core/allocator.h"
#include "core/random.h"
#include "core/threads.h"
#include "ops/elementwise.h"
#include "ops/index.h"
#include "ops/reduction.h"
#include "ops/shape.h"

using namespace mpx;

namespace {
float bits_to_float(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
// The CPU's own F16C conversion (round to nearest even) as an independent reference.
__attribute__((target("f16c"))) uint16_t hw_f16(float f) {
  return static_cast<uint16_t>(_mm_cvtsi128_si32(_mm_cvtps_ph(_mm_set_ss(f), _MM_FROUND_TO_NEAREST_INT)));
}
__attribute__((target("f16c"))) float hw_f16_to_f32(uint16_t h) { return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h))); }
bool have_f16c() { return __builtin_cpu_supports("f16c"); }
}  // namespace

TEST_CASE("f16: all 65536 bit patterns round-trip and decode like the hardware", "[core][half]") {
  for (uint32_t b = 0; b < 65536; ++b) {
    const uint16_t h = static_cast<uint16_t>(b);
    const float f = Half::from_bits(h);
    if (have_f16c()) {
      const float ref = hw_f16_to_f32(h);
      if (std::isnan(ref)) REQUIRE(std::isnan(f));
      else REQUIRE(std::memcmp(&f, &ref, 4) == 0);
    }
    if (std::isnan(f)) {
      REQUIRE(std::isnan(static_cast<float>(Half(f))));
    } else {
      REQUIRE(Half(f).x == h);
    }
  }
}

TEST_CASE("f16: rounding from f32 matches F16C across all exponents", "[core][half]") {
  if (!have_f16c()) SUCCEED("no F16C on this CPU");
  uint64_t state = 12345;
  for (int i = 0; i < 2000000; ++i) {
    state = random::hash(state, i, 7);
    const float f = bits_to_float(static_cast<uint32_t>(state));
    if (std::isnan(f)) continue;
    if (have_f16c()) REQUIRE(Half(f).x == hw_f16(f));
  }
  // Named cases: overflow, subnormals, ties to even, signed zero.
  CHECK(std::isinf(static_cast<float>(Half(65520.0f))));
  CHECK(static_cast<float>(Half(65504.0f)) == 65504.0f);
  CHECK(static_cast<float>(Half(65519.0f)) == 65504.0f);
  CHECK(std::isinf(static_cast<float>(Half(1e6f))));
  CHECK(static_cast<float>(Half(-1e6f)) == -INFINITY);
  CHECK(static_cast<float>(Half(5.9604645e-08f)) == 5.9604645e-08f);  // smallest subnormal
  CHECK(static_cast<float>(Half(2.9802322e-08f)) == 0.0f);            // half of it: tie to even (0)
  CHECK(static_cast<float>(Half(4.4703484e-08f)) == 5.9604645e-08f);  // 0.75 of it rounds up
  CHECK(Half(1.0f + 1.0f / 2048).x == Half(1.0f).x);                 // tie -> even
  CHECK(Half(1.0f + 3.0f / 2048).x == Half(1.0f).x + 2);             // tie -> even (up)
  CHECK(Half(-0.0f).x == 0x8000);
  CHECK(std::isnan(static_cast<float>(Half(NAN))));
}

TEST_CASE("f16: the library's conversion kernels give the header's bits on every exponent and rounding case",
          "[core][half]") {
  // The library is compiled for this CPU, this file is not: the conversions must not depend on
  // that. Every sign, exponent and a third of the kept mantissas, with dropped bits that round
  // down, tie (to even both ways) and round up; NaNs included.
  std::vector<float> v;
  for (uint32_t sign : {0u, 1u})
    for (uint32_t e = 0; e < 256; ++e)
      for (uint32_t m = 0; m < 1024; m += 3)
        for (uint32_t low : {0x0u, 0x1u, 0xfffu, 0x1000u, 0x1001u, 0x1fffu})
          v.push_back(bits_to_float(sign << 31 | e << 23 | m << 13 | low));
  const Tensor f = tensor(v, {static_cast<int64_t>(v.size())});
  const Tensor h = f.to(kFloat16);
  const Tensor back = h.to(kFloat32);
  const auto* hb = static_cast<const Half*>(h.raw_data());
  const auto* bb = static_cast<const float*>(back.raw_data());
  for (size_t i = 0; i < v.size(); ++i) {
    const Half ref(v[i]);
    REQUIRE(hb[i].x == ref.x);
    const float up = ref;
    REQUIRE(std::memcmp(&bb[i], &up, 4) == 0);
  }
}

TEST_CASE("bf16: round to nearest even, inf and NaN", "[core][half]") {
  CHECK(static_cast<float>(BFloat16(1.0f)) == 1.0f);
  CHECK(BFloat16(1.0f + 1.0f / 256).x == BFloat16(1.0f).x);           // tie, even stays
  CHECK(BFloat16(1.0f + 3.0f / 256).x == BFloat16(1.0f).x + 2);       // tie, odd rounds up
  CHECK(BFloat16(1.0f + 1.5f / 256).x == BFloat16(1.0f).x + 1);       // above half rounds up
  CHECK(std::isinf(static_cast<float>(BFloat16(3.4028235e38f))));     // f32 max rounds past bf16 max
  CHECK(static_cast<float>(BFloat16(INFINITY)) == INFINITY);
  CHECK(std::isnan(static_cast<float>(BFloat16(NAN))));
  CHECK(std::isnan(static_cast<float>(BFloat16(bits_to_float(0x7f800001u)))));  // NaN never becomes inf
  CHECK(static_cast<float>(BFloat16(1e-40f)) == bits_to_float(BFloat16(1e-40f).x << 16));  // subnormals kept
  // Every bf16 value round-trips.
  for (uint32_t b = 0; b < 65536; ++b) {
    const float f = BFloat16::from_bits(static_cast<uint16_t>(b));
    if (!std::isnan(f)) REQUIRE(BFloat16(f).x == b);
  }
}

TEST_CASE("dtype names, sizes and promotion", "[core]") {
  CHECK(element_size(kBFloat16) == 2);
  CHECK(element_size(kInt64) == 8);
  CHECK(dtype_from_name("bf16") == kBFloat16);
  CHECK_THROWS_WITH(dtype_from_name("f8"), Catch::Contains("unknown dtype 'f8'"));
  CHECK(promote_types(kFloat16, kFloat32) == kFloat32);
  CHECK(promote_types(kFloat16, kBFloat16) == kFloat32);
  CHECK(promote_types(kInt64, kFloat16) == kFloat16);
  CHECK(promote_types(kBool, kUInt8) == kUInt8);
  CHECK((ones({2}, kFloat16) + ones({2}, kFloat32)).dtype() == kFloat32);
  CHECK((ones({2}, kInt64) + ones({2}, kFloat16)).dtype() == kFloat16);
  CHECK((ones({2}, kInt64) / ones({2}, kInt64)).dtype() == kFloat32);
  CHECK((ones({2}, kFloat16) * 3.5).dtype() == kFloat16);
}

TEST_CASE("f16 arithmetic overflows like the GPU", "[core][half]") {
  Tensor a = full({4}, 60000.0, kFloat16);
  Tensor s = a + a;
  CHECK(std::isinf(s[0].item<float>()));
  CHECK_FALSE(s.all_finite());
  Tensor tiny = full({1}, 1e-8, kFloat16);
  CHECK(tiny.item<float>() == 0.0f);
  CHECK(full({1}, 1e-6, kFloat16).item<float>() > 0.0f);  // a subnormal, not flushed
}

TEST_CASE("CPU allocations are 64-byte aligned", "[core]") {
  for (int64_t n : {1, 3, 17, 1000, 12345}) {
    Tensor t = empty({n}, kUInt8);
    CHECK(reinterpret_cast<uintptr_t>(t.raw_data()) % 64 == 0);
  }
}

TEST_CASE("views share storage and have the right strides", "[core][view]") {
  Tensor x = arange(24.0, kFloat32).view({2, 3, 4});
  CHECK(x.strides() == IntList{12, 4, 1});
  Tensor p = x.permute({2, 0, 1});
  CHECK(p.sizes() == IntList{4, 2, 3});
  CHECK(p.strides() == IntList{1, 12, 4});
  CHECK_FALSE(p.is_contiguous());
  CHECK(p.contiguous().is_contiguous());
  CHECK(p.contiguous()[1][0][2].item<float>() == x[0][2][1].item<float>());
  Tensor t = x.transpose(0, 2);
  CHECK(t.sizes() == IntList{4, 3, 2});
  CHECK(x.narrow(2, 1, 2).sizes() == IntList{2, 3, 2});
  CHECK(x.narrow(2, 1, 2)[1][2][1].item<float>() == 12 + 8 + 2);
  CHECK(x.slice(2, 0, 4, 2).strides() == IntList{12, 4, 2});
  CHECK(x.slice(2, -2, 4).size(2) == 2);
  CHECK(x.select(1, -1).sizes() == IntList{2, 4});
  CHECK(x.unsqueeze(0).sizes() == IntList{1, 2, 3, 4});
  CHECK(x.unsqueeze(-1).sizes() == IntList{2, 3, 4, 1});
  CHECK(x.unsqueeze(0).squeeze(0).sizes() == x.sizes());
  CHECK(x.flatten(1).sizes() == IntList{2, 12});
  CHECK(x.flatten().sizes() == IntList{24});
  CHECK(x.reshape({-1, 6}).sizes() == IntList{4, 6});
  Tensor e = ones({3, 1}).expand({2, 3, 5});
  CHECK(e.strides() == IntList{0, 1, 0});
  // A view sees writes through another view.
  Tensor v = x.view({6, 4});
  {
    v[0].fill_(100.0);
  }
  CHECK(x[0][0][3].item<float>() == 100.0f);
  CHECK(x.version() == v.version());
  // reshape copies when a view is impossible.
  Tensor r = p.reshape({24});
  CHECK(r.is_contiguous());
  CHECK_THROWS_WITH(p.view({24}), Catch::Contains("use reshape()"));
  CHECK_THROWS_WITH(x.view({5, 5}), Catch::Contains("invalid for input of size 24"));
  CHECK_THROWS_WITH(x.permute({0, 0, 1}), Catch::Contains("repeated"));
  CHECK_THROWS_WITH(x.narrow(0, 1, 5), Catch::Contains("out of bounds"));
  CHECK_THROWS_WITH(ones({3}).expand({2, 4}), Catch::Contains("cannot expand"));
  CHECK_THROWS_WITH(x.size(3), Catch::Contains("out of range"));
}

TEST_CASE("broadcasting follows numpy rules", "[core][view]") {
  CHECK(broadcast_shapes({3, 1, 5}, {4, 1}) == IntList{3, 4, 5});
  CHECK(broadcast_shapes({}, {2, 2}) == IntList{2, 2});
  Tensor a = arange(3.0, kFloat32).view({3, 1});
  Tensor b = arange(4.0, kFloat32).view({1, 4});
  Tensor c = a * 10.0 + b;
  CHECK(c.sizes() == IntList{3, 4});
  CHECK(c[2][3].item<float>() == 23.0f);
  CHECK_THROWS_WITH(ones({2, 3}) + ones({4}), Catch::Contains("cannot be broadcast") && Catch::Contains("[2, 3]") &&
                                                Catch::Contains("[4]"));
}

TEST_CASE("channels-last layout keeps values and logical shape", "[core][layout]") {
  Tensor x = randn({2, 3, 4, 5});
  Tensor cl = x.contiguous(MemoryFormat::ChannelsLast);
  CHECK(cl.sizes() == x.sizes());
  CHECK(cl.strides() == IntList{60, 1, 15, 3});
  CHECK(cl.is_contiguous(MemoryFormat::ChannelsLast));
  CHECK_FALSE(cl.is_contiguous());
  CHECK(cl.suggest_memory_format() == MemoryFormat::ChannelsLast);
  CHECK(equal(cl, x));
  CHECK(equal(cl.contiguous(), x));
  // Elementwise ops on channels-last inputs are correct.
  CHECK(allclose(relu(cl) * 2.0, relu(x) * 2.0));
  CHECK(x.to(MemoryFormat::ChannelsLast).is_contiguous(MemoryFormat::ChannelsLast));
  // *_like keeps the layout, as PyTorch's preserve_format does; other tensors stay row-major.
  for (const Tensor& t : {zeros_like(cl), ones_like(cl, kFloat16), empty_like(cl), full_like(cl, 2.0), randn_like(cl)}) {
    CHECK(t.is_contiguous(MemoryFormat::ChannelsLast));
    CHECK(t.sizes() == x.sizes());
  }
  CHECK(equal(ones_like(cl), ones({2, 3, 4, 5})));
  CHECK(ones_like(x).is_contiguous());
  CHECK(zeros_like(x.transpose(0, 1)).is_contiguous());
}

TEST_CASE("dtype conversion goes through every pair", "[core]") {
  Tensor base = tensor(std::vector<double>{-2, 0, 1, 3, 100}, {5});  // exact in every dtype
  for (DType a : {kFloat32, kFloat16, kBFloat16, kFloat64, kInt64, kInt32, kUInt8, kBool}) {
    for (DType b : {kFloat32, kFloat16, kBFloat16, kFloat64, kInt64, kInt32}) {
      Tensor x = (a == kUInt8 ? abs(base) : base).to(a);
      Tensor y = x.to(b);
      CHECK(y.dtype() == b);
      CHECK(allclose(y.to(kFloat64), x.to(kFloat64)));
    }
  }
  CHECK(tensor(std::vector<double>{2.9, -2.9}).to(kInt64)[0].item<int64_t>() == 2);  // truncation like C/PyTorch
  CHECK(tensor(std::vector<double>{0.0, 0.5}).to(kBool)[1].item<bool>());
}

TEST_CASE("seeded RNG is reproducible across runs and thread counts", "[core][rng]") {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  manual_seed(42);
  Tensor a = randn({300000});
  Tensor u = rand({1000});
  omp_set_num_threads(2);
  manual_seed(42);
  Tensor b = randn({300000});
  Tensor v = rand({1000});
  omp_set_num_threads(saved);
  CHECK(equal(a, b));
  CHECK(equal(u, v));
  Tensor c = randn({300000});
  CHECK_FALSE(equal(a, c));  // the generator advanced
  CHECK(std::abs(mean(a).item<double>()) < 0.01);
  CHECK(std::abs(var(a, {0}).item<double>() - 1.0) < 0.02);
  CHECK(min(u).item<float>() >= 0.0f);
  CHECK(max(u).item<float>() < 1.0f);
  Tensor ri = randint(3, 7, {5000});
  CHECK(ri.dtype() == kInt64);
  CHECK(min(ri).item<int64_t>() == 3);
  CHECK(max(ri).item<int64_t>() == 6);
}

TEST_CASE("seed 0 has no fixed point: its first draws are as random as any other seed's", "[core][rng]") {
  // The hash once mapped (seed 0, position 0) to 0, so seed 0's first uniform was exactly 0 and
  // its first multinomial draw always took the first category, whatever its probability.
  CHECK(random::uniform(0, 0, 0) > 0.0);
  manual_seed(0);
  CHECK(rand({1}).item<double>() > 0.0);
  int first = 0;
  for (uint64_t seed = 0; seed < 64; ++seed) {
    manual_seed(seed);
    first += multinomial(tensor<float>({1e-4f, 1.0f}), 1).item<int64_t>() == 0;
  }
  CHECK(first == 0);
}

TEST_CASE("sums are identical on one and two threads", "[core][rng]") {
  const int saved = omp_get_max_threads();
  manual_seed(3);
  Tensor x = randn({1 << 20});
  omp_set_num_threads(1);
  const double s1 = sum(x).item<double>();
  omp_set_num_threads(2);
  const double s2 = sum(x).item<double>();
  omp_set_num_threads(saved);
  CHECK(s1 == s2);
}

TEST_CASE("set_num_threads / get_num_threads are torch's, over OpenMP", "[core]") {
  const int saved = get_num_threads();
  CHECK(saved == omp_get_max_threads());
  set_num_threads(1);
  CHECK(get_num_threads() == 1);
  CHECK(omp_get_max_threads() == 1);  // the team size every CPU kernel uses
  set_num_threads(3);
  CHECK(get_num_threads() == 3);
  CHECK_THROWS_WITH(set_num_threads(0), Catch::Contains("at least 1, got 0"));
  CHECK(get_num_threads() == 3);
  set_num_threads(saved);
}

TEST_CASE("errors name op, shapes, dtypes and devices", "[core][errors]") {
  CHECK_THROWS_AS(ones({2}).to(Device::cuda()), Error);
  CHECK_THROWS_WITH(Device("gpu"), Catch::Contains("bad device 'gpu'"));
  CHECK(Device("cuda:1").index == 1);
  CHECK_THROWS_WITH(ones({2, 2}).item<float>(), Catch::Contains("one element") && Catch::Contains("f32[2, 2]"));
  CHECK_THROWS_WITH(ones({2}).data_ptr<double>(), Catch::Contains("f32"));
  CHECK_THROWS_WITH(ones({2}, kInt64).set_requires_grad(true), Catch::Contains("only floating"));
  CHECK_THROWS_WITH(tensor(std::vector<float>{1, 2, 3}, {2, 2}), Catch::Contains("do not fill shape [2, 2]"));
  CHECK_THROWS_WITH(ones({2}, kBool) + ones({2}, kBool), Catch::Contains("add") && Catch::Contains("bool"));
}

TEST_CASE("factories", "[core]") {
  CHECK(zeros({2, 3}).sizes() == IntList{2, 3});
  CHECK(sum(ones({2, 3}, kFloat16)).item<float>() == 6.0f);
  CHECK(full({2}, 7.0, kInt32)[1].item<int>() == 7);
  CHECK(arange(5).dtype() == kInt64);
  CHECK(arange(5.0).dtype() == kFloat32);  // LibTorch's inference (test_libtorch_idioms has the rest)
  CHECK(arange(0.0, 1.0, 0.25, kFloat32).numel() == 4);
  CHECK(scalar_tensor(3.0).dim() == 0);
  CHECK(scalar_tensor(3.0).numel() == 1);
  CHECK(zeros({0, 3}).numel() == 0);
  CHECK(sum(zeros({0, 3})).item<float>() == 0.0f);
  CHECK(zeros({2}, TensorOptions().requires_grad(true)).requires_grad());
  CHECK(cuda_is_available() == (cuda_device_count() > 0));
}

TEST_CASE("cpu::memory_stats counts live tensor bytes and their peak", "[core][memory]") {
  const int64_t before = cpu::memory_stats().allocated;
  cpu::reset_peak_memory_stats();
  CHECK(cpu::memory_stats().peak_allocated == before);
  {
    Tensor a = empty({1024, 256});  // 1 MiB of f32
    CHECK(cpu::memory_stats().allocated == before + (1 << 20));
    {
      Tensor b = empty({3}, TensorOptions().dtype(kUInt8));  // rounded up to one 64-byte line
      CHECK(cpu::memory_stats().allocated == before + (1 << 20) + 64);
    }
    CHECK(cpu::memory_stats().allocated == before + (1 << 20));
  }
  const auto s = cpu::memory_stats();
  CHECK(s.allocated == before);
  CHECK(s.peak_allocated == before + (1 << 20) + 64);
  cpu::reset_peak_memory_stats();
  CHECK(cpu::memory_stats().peak_allocated == before);
}

TEST_CASE("copies into channels-last: the layout conversion and same-layout casts keep every value", "[core]") {
  manual_seed(7);
  for (const IntList& shape : {IntList{2, 3, 5, 7}, IntList{3, 40, 9, 33}, IntList{1, 64, 1, 1}}) {
    INFO(shape_str(shape));
    const Tensor x = randn(shape);
    const Tensor cl = x.contiguous(MemoryFormat::ChannelsLast);  // row-major -> NHWC transpose
    CHECK(cl.is_contiguous(MemoryFormat::ChannelsLast));
    CHECK(equal(cl, x));
    const Tensor h = cl.to(kBFloat16);  // NHWC -> NHWC with a cast: one flat pass
    CHECK(equal(h.contiguous(), x.to(kBFloat16)));
    Tensor back = empty(shape, TensorOptions().memory_format(MemoryFormat::ChannelsLast));
    back.copy_(h);
    CHECK(equal(back, x.to(kBFloat16).to(kFloat32)));
    // A strided (non-dense) destination still takes the general path.
    Tensor wide = zeros({shape[0], shape[1], shape[2], shape[3] * 2});
    Tensor view = wide.narrow(3, 0, shape[3]);
    view.copy_(cl);
    CHECK(equal(view, x));
  }
}

TEST_CASE("contiguous copies of transposed views match an element walk, tile edges and casts included", "[core][copy]") {
  manual_seed(11);
  // Each view's source has its unit stride on a dim other than the last (the tiled transpose path).
  struct Case { IntList shape; IntList perm; };
  for (const Case& c : {Case{{70, 37}, {1, 0}}, Case{{3, 40, 5}, {0, 2, 1}}, Case{{33, 2, 65}, {2, 1, 0}},
                        Case{{2, 3, 4, 31}, {0, 3, 1, 2}}, Case{{1, 1}, {1, 0}}}) {
    const Tensor x = randn(c.shape);
    const Tensor v = x.permute(c.perm);
    INFO(shape_str(v.sizes()) << " strides " << shape_str(v.strides()));
    const float* src = x.data_ptr<float>();
    for (DType dt : {kFloat32, kBFloat16, kFloat64}) {
      const Tensor got = v.to(dt).contiguous().to(kFloat64);
      const double* g = got.data_ptr<double>();
      bool same = true;
      for (int64_t i = 0; i < v.numel(); ++i) {
        int64_t rem = i, off = 0;
        for (int64_t d = v.dim() - 1; d >= 0; --d) {
          off += (rem % v.size(d)) * v.stride(d);
          rem /= v.size(d);
        }
        const double want = dt == kBFloat16 ? static_cast<double>(static_cast<float>(BFloat16(src[off]))) : src[off];
        same = same && g[i] == want;
      }
      CHECK(same);
    }
  }
}

TEST_CASE("copy_ between overlapping views of one tensor reads before it writes", "[core][copy]") {
  // Large enough that the copy runs on several threads in chunks.
  const int64_t n = 100003;
  Tensor x = arange(n);
  const Tensor expect = arange(int64_t{1}, n);
  x.narrow(0, 0, n - 1).copy_(x.narrow(0, 1, n - 1));  // shift left by one
  CHECK(equal(x.narrow(0, 0, n - 1), expect));
  Tensor y = arange(n);
  y.narrow(0, 1, n - 1).copy_(y.narrow(0, 0, n - 1));  // shift right by one
  CHECK(equal(y.narrow(0, 1, n - 1), arange(n - 1)));
  Tensor a = randn({400, 400});
  const Tensor at = a.t().contiguous();
  a.copy_(a.t());  // transpose in place
  CHECK(equal(a, at));
  Tensor same = randn({1000});
  const Tensor before = same.clone();
  same.copy_(same);  // the same elements: nothing to protect
  CHECK(equal(same, before));
}

TEST_CASE("writing into an expanded tensor is a clear error", "[core][copy]") {
  Tensor base = zeros({1, 5});
  Tensor e = base.expand({3, 5});
  CHECK_THROWS_WITH(e.copy_(ones({3, 5})), Catch::Contains("expanded (stride 0)"));
  CHECK_THROWS_WITH(e.add_(1.0), Catch::Contains("expanded (stride 0)"));
  CHECK(equal(base, zeros({1, 5})));
  base.expand({1, 5}).copy_(ones({1, 5}));  // size-1 dims are not expanded
  CHECK(equal(base, ones({1, 5})));
}
