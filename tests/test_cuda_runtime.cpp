// Tests of the CUDA runtime layer: device queries, the stream-ordered pool's statistics, pinned
// memory and non-blocking copies, streams and events, and the no-GPU errors.
#include <catch2/catch.hpp>

#include "core/random.h"
#include "tests/test_util.h"

using namespace mpx;

TEST_CASE("without a device the CUDA API says so clearly", "[cuda][runtime]") {
  if (cuda_is_available()) {
    CHECK(cuda_device_count() >= 1);
    CHECK(cuda::version_string().find("CUDA runtime") != std::string::npos);
    return;
  }
  CHECK(cuda_device_count() == 0);
  CHECK_FALSE(cuda::is_capturing());
  const std::string err = testing::error_of([] { (void)ones({2}).to(Device::cuda()); });
  CHECK(err.find("cuda") != std::string::npos);
  CHECK(err.find("Device::cpu()") != std::string::npos);
  CHECK_FALSE(testing::error_of([] { cuda::memory_stats(); }).empty());
}

TEST_CASE("cuda device properties and memory statistics of the pool", "[cuda][runtime]") {
  if (!testing::cuda_ready()) return;
  const auto props = cuda::device_properties();
  CHECK(!props.name.empty());
  CHECK(props.multiprocessors > 0);
  CHECK(props.total_memory > 0);
  cuda::synchronize();
  const auto before = cuda::memory_stats();
  cuda::reset_peak_memory_stats();
  const int64_t bytes = int64_t{64} << 20;
  {
    Tensor t = empty({bytes / 4}, TensorOptions().device(Device::cuda()));
    t.fill_(1.0);
    cuda::synchronize();
    const auto during = cuda::memory_stats();
    CHECK(during.allocated >= before.allocated + bytes);
    CHECK(during.reserved >= during.allocated);
    CHECK(during.peak_allocated >= during.allocated);
  }
  cuda::synchronize();
  const auto after = cuda::memory_stats();
  CHECK(after.allocated <= before.allocated);        // freed back to the pool...
  CHECK(after.reserved >= before.allocated + bytes);  // ...which keeps it cached
  CHECK(after.peak_allocated >= before.allocated + bytes);
  cuda::empty_cache();
  CHECK(cuda::memory_stats().reserved <= after.reserved);
}

TEST_CASE("cuda memory_stats counts live tensor bytes rounded up to 512 as PyTorch does", "[cuda][runtime]") {
  if (!testing::cuda_ready()) return;
  cuda::synchronize();
  const int64_t before = cuda::memory_stats().allocated;
  cuda::reset_peak_memory_stats();
  CHECK(cuda::memory_stats().peak_allocated == before);
  {
    const Tensor small = empty({1000}, TensorOptions(kUInt8).device(Device::cuda()));
    CHECK(cuda::memory_stats().allocated == before + 1024);
    const Tensor big = empty({(int64_t{64} << 20) + 1}, TensorOptions(kUInt8).device(Device::cuda()));
    CHECK(cuda::memory_stats().allocated == before + 1024 + (int64_t{64} << 20) + 512);
    const Tensor exact = empty({128}, TensorOptions(kFloat32).device(Device::cuda()));
    CHECK(cuda::memory_stats().allocated == before + 1024 + (int64_t{64} << 20) + 512 + 512);
  }
  CHECK(cuda::memory_stats().allocated == before);
  CHECK(cuda::memory_stats().peak_allocated == before + 1024 + (int64_t{64} << 20) + 1024);
  cuda::reset_peak_memory_stats();
  CHECK(cuda::memory_stats().peak_allocated == before);
}

TEST_CASE("cuda pinned memory and non-blocking copies", "[cuda][runtime]") {
  if (!testing::cuda_ready()) return;
  manual_seed(4);
  const Tensor src = randn({1000, 37});
  CHECK_FALSE(cuda::is_pinned(src));
  const Tensor pinned = cuda::pin_memory(src);
  CHECK(cuda::is_pinned(pinned));
  CHECK(testing::rel_err(pinned, src) == 0.0);
  // The copy may still be in flight when to() returns; the pinned source must stay valid even
  // though our handle to it is dropped right away.
  Tensor dev;
  {
    const Tensor tmp = cuda::pin_memory(src * 2.0);
    dev = tmp.to(Device::cuda(), /*non_blocking=*/true);
  }
  CHECK(testing::rel_err(dev, src * 2.0) == 0.0);
  CHECK(testing::rel_err(pinned.to(Device::cuda(), true), src) == 0.0);
  CHECK_FALSE(testing::error_of([] { (void)cuda::pin_memory(ones({2}).to(Device::cuda())); }).empty());
}

TEST_CASE("cuda streams and events order and time device work", "[cuda][runtime]") {
  if (!testing::cuda_ready()) return;
  const cuda::Stream main = cuda::current_stream();
  const cuda::Stream side = cuda::new_stream();
  CHECK_FALSE(side == main);
  Tensor x = randn({1 << 20}).to(Device::cuda());
  Tensor y;
  cuda::Event ready, start, end;
  start.record();
  ready.record();
  {
    cuda::StreamGuard g(side);
    CHECK(cuda::current_stream() == side);
    ready.wait(side);  // side stream sees x
    y = x * 3.0;
  }
  CHECK(cuda::current_stream() == main);
  cuda::Event done;
  done.record(side);
  done.wait(main);
  end.record();
  end.synchronize();
  CHECK(end.query());
  CHECK(start.elapsed_ms(end) >= 0.0f);
  CHECK(testing::rel_err(y, x.cpu() * 3.0) == 0.0);
}

TEST_CASE("cuda device errors name the device and the fix", "[cuda][runtime]") {
  if (!testing::cuda_ready()) return;
  const int n = cuda_device_count();
  const std::string err = testing::error_of([n] { (void)ones({2}).to(Device::cuda(n)); });
  CHECK(err.find("does not exist") != std::string::npos);
  const std::string mixed = testing::error_of([] { (void)(ones({2}) + ones({2}).to(Device::cuda())); });
  CHECK(mixed.find("cuda") != std::string::npos);
}
