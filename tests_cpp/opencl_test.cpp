// Runs on whatever OpenCL device the machine has (PoCL's CPU device in CI).
#include <gtest/gtest.h>

#include <cstdlib>
#include <numeric>
#include <string>
#include <vector>

#include "kernelsmith/error.hpp"
#include "kernelsmith/opencl/opencl.hpp"

namespace ocl = kernelsmith::opencl;

namespace {

const char* kVectorAdd = R"CLC(
__kernel void vadd(__global const float* a, __global const float* b, __global float* c, int n) {
  int i = get_global_id(0);
  if (i < n) c[i] = a[i] + b[i];
}
)CLC";

// Each work-group sums its slice into local memory, then writes one partial sum.
const char* kGroupSum = R"CLC(
__kernel void group_sum(__global const float* x, __global float* out, __local float* scratch) {
  int lid = get_local_id(0);
  scratch[lid] = x[get_global_id(0)];
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int s = get_local_size(0) / 2; s > 0; s >>= 1) {
    if (lid < s) scratch[lid] += scratch[lid + s];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (lid == 0) out[get_group_id(0)] = scratch[0];
}
)CLC";

std::shared_ptr<ocl::Context> context() {
  static auto ctx = ocl::Context::create();
  return ctx;
}

}  // namespace

TEST(OpenCL, DiscoversAtLeastOneDeviceWithProperties) {
  const auto devices = ocl::list_devices();
  ASSERT_FALSE(devices.empty());
  for (const auto& d : devices) {
    EXPECT_FALSE(d.name.empty());
    EXPECT_GT(d.max_work_group_size, 0u);
    EXPECT_GT(d.max_compute_units, 0u);
    EXPECT_GT(d.local_mem_size, 0u);
    EXPECT_FALSE(d.max_work_item_sizes.empty());
  }
}

TEST(OpenCL, SelectsByIndexAndNameAndListsDevicesWhenNothingMatches) {
  const auto devices = ocl::list_devices();
  ASSERT_FALSE(devices.empty());
  const auto& first = devices.front();
  EXPECT_EQ(ocl::select_device("0:0").name, first.name);
  EXPECT_EQ(ocl::select_device("0").global_index, 0);
  EXPECT_EQ(ocl::select_device(first.name.substr(0, 4)).name.substr(0, 4), first.name.substr(0, 4));
  try {
    ocl::select_device("no-such-device-xyz");
    FAIL() << "selecting a missing device did not throw";
  } catch (const kernelsmith::InvalidArgument& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("no-such-device-xyz"), std::string::npos) << message;
    EXPECT_NE(message.find(first.name), std::string::npos) << message;
  }
  EXPECT_THROW(ocl::select_device("7:9"), kernelsmith::InvalidArgument);
  // PoCL names itself only in its platform version; "cpu" matches the device type.
  if (first.platform_version.find("PoCL") != std::string::npos) {
    EXPECT_EQ(ocl::select_device("pocl").name, first.name);
  }
  EXPECT_EQ(ocl::select_device(first.type).type, first.type);
}

TEST(OpenCL, EnvironmentVariableSelectsWhenSelectorIsEmpty) {
  ::setenv(ocl::kDeviceEnvVar, "no-such-device-from-env", 1);
  try {
    ocl::select_device("");
    ::unsetenv(ocl::kDeviceEnvVar);
    FAIL() << "environment selector was ignored";
  } catch (const kernelsmith::InvalidArgument& e) {
    ::unsetenv(ocl::kDeviceEnvVar);
    EXPECT_NE(std::string(e.what()).find(ocl::kDeviceEnvVar), std::string::npos);
  }
}

TEST(OpenCL, ErrorNamesAreMapped) {
  EXPECT_EQ(ocl::error_name(-54), "CL_INVALID_WORK_GROUP_SIZE");
  EXPECT_EQ(ocl::error_name(-11), "CL_BUILD_PROGRAM_FAILURE");
  EXPECT_EQ(ocl::error_name(0), "CL_SUCCESS");
  EXPECT_EQ(ocl::error_name(-4242), "CL_UNKNOWN_ERROR(-4242)");
  try {
    ocl::check(CL_INVALID_KERNEL_ARGS, "clEnqueueNDRangeKernel");
    FAIL();
  } catch (const kernelsmith::OpenCLError& e) {
    EXPECT_EQ(e.code(), CL_INVALID_KERNEL_ARGS);
    EXPECT_NE(std::string(e.what()).find("clEnqueueNDRangeKernel failed: CL_INVALID_KERNEL_ARGS"),
              std::string::npos);
  }
}

TEST(OpenCL, BuildFailureCarriesTheCompilerLog) {
  try {
    context()->build("__kernel void broken(__global float* x) { x[0] = undeclared_name; }");
    FAIL() << "a broken program built";
  } catch (const kernelsmith::OpenCLError& e) {
    const std::string message = e.what();
    EXPECT_EQ(e.code(), CL_BUILD_PROGRAM_FAILURE);
    EXPECT_NE(message.find("CL_BUILD_PROGRAM_FAILURE"), std::string::npos);
    EXPECT_NE(message.find("undeclared_name"), std::string::npos) << message;
    // Temporary source paths are replaced by "kernel.cl" (PoCL names its temp files tempfile_*).
    EXPECT_EQ(message.find("tempfile_"), std::string::npos) << message;
  }
}

TEST(OpenCL, VectorAddIsCorrectThroughCopiedAndWrappedBuffers) {
  auto ctx = context();
  auto program = ctx->build(kVectorAdd);
  EXPECT_EQ(program->kernel_names(), std::vector<std::string>{"vadd"});
  auto kernel = program->kernel("vadd");
  const int n = 1000;
  std::vector<float> a(n), b(n), c(n, -1.f);
  std::iota(a.begin(), a.end(), 0.f);
  for (int i = 0; i < n; ++i) b[i] = 2.f * static_cast<float>(i);

  auto da = ctx->allocate(n * sizeof(float));
  auto db = ctx->allocate(n * sizeof(float));
  auto dc = ctx->allocate(n * sizeof(float));
  da->write(a.data(), n * sizeof(float));
  db->write(b.data(), n * sizeof(float));
  // Global size rounded up past n: the kernel's bounds check must hold.
  ctx->launch(*kernel,
              {ocl::KernelArg::buffer(*da), ocl::KernelArg::buffer(*db), ocl::KernelArg::buffer(*dc),
               ocl::KernelArg::value<cl_int>(n)},
              {1024}, {64})
      ->wait();
  dc->read(c.data(), n * sizeof(float));
  for (int i = 0; i < n; ++i) ASSERT_FLOAT_EQ(c[i], 3.f * static_cast<float>(i)) << i;

  if (ctx->host_zero_copy()) {
    std::vector<float> out(n, 0.f);
    auto wa = ctx->wrap_host(a.data(), n * sizeof(float));
    auto wb = ctx->wrap_host(b.data(), n * sizeof(float));
    auto wc = ctx->wrap_host(out.data(), n * sizeof(float));
    EXPECT_TRUE(wc->wraps_host());
    ctx->launch(*kernel,
                {ocl::KernelArg::buffer(*wa), ocl::KernelArg::buffer(*wb), ocl::KernelArg::buffer(*wc),
                 ocl::KernelArg::value<cl_int>(n)},
                {static_cast<std::size_t>(n)});
    wc->sync_host();
    for (int i = 0; i < n; ++i) ASSERT_FLOAT_EQ(out[i], 3.f * static_cast<float>(i)) << i;
  }
}

TEST(OpenCL, LocalMemoryAndOffsetArguments) {
  auto ctx = context();
  auto kernel = ctx->build(kGroupSum)->kernel("group_sum");
  const std::size_t groups = 4, group_size = 16;
  std::vector<float> x(groups * group_size, 1.f), out(groups, 0.f);
  auto dx = ctx->allocate(x.size() * sizeof(float));
  auto dout = ctx->allocate(out.size() * sizeof(float));
  dx->write(x.data(), x.size() * sizeof(float));
  ctx->launch(*kernel,
              {ocl::KernelArg::buffer(*dx), ocl::KernelArg::buffer(*dout),
               ocl::KernelArg::local(group_size * sizeof(float))},
              {x.size()}, {group_size});
  dout->read(out.data(), out.size() * sizeof(float));
  for (float v : out) EXPECT_FLOAT_EQ(v, static_cast<float>(group_size));

  // An offset shifts get_global_id: only the upper half is written.
  auto vadd = ctx->build(kVectorAdd)->kernel("vadd");
  const int n = 64;
  std::vector<float> ones(n, 1.f), result(n, 0.f);
  auto da = ctx->allocate(n * sizeof(float));
  auto dc = ctx->allocate(n * sizeof(float));
  da->write(ones.data(), n * sizeof(float));
  dc->write(result.data(), n * sizeof(float));
  ctx->launch(*vadd,
              {ocl::KernelArg::buffer(*da), ocl::KernelArg::buffer(*da), ocl::KernelArg::buffer(*dc),
               ocl::KernelArg::value<cl_int>(n)},
              {n / 2}, {}, {n / 2});
  dc->read(result.data(), n * sizeof(float));
  for (int i = 0; i < n; ++i) EXPECT_FLOAT_EQ(result[i], i < n / 2 ? 0.f : 2.f) << i;
}

TEST(OpenCL, LaunchErrorsNameTheStatusAndTheCall) {
  auto ctx = context();
  auto kernel = ctx->build(kVectorAdd)->kernel("vadd");
  auto buf = ctx->allocate(64 * sizeof(float));
  const std::vector<ocl::KernelArg> args = {ocl::KernelArg::buffer(*buf), ocl::KernelArg::buffer(*buf),
                                            ocl::KernelArg::buffer(*buf), ocl::KernelArg::value<cl_int>(64)};
  // A local size beyond the device's maximum.
  const std::size_t too_big = ctx->device().max_work_group_size * 2;
  try {
    ctx->launch(*kernel, args, {too_big}, {too_big});
    FAIL() << "oversized work-group launched";
  } catch (const kernelsmith::OpenCLError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("clEnqueueNDRangeKernel"), std::string::npos) << message;
    EXPECT_TRUE(message.find("CL_INVALID_WORK_GROUP_SIZE") != std::string::npos ||
                message.find("CL_INVALID_WORK_ITEM_SIZE") != std::string::npos)
        << message;
  }
  // A scalar of the wrong size (double for an int parameter).
  std::vector<ocl::KernelArg> bad = args;
  bad[3] = ocl::KernelArg::value<double>(64.0);
  try {
    ctx->launch(*kernel, bad, {64});
    FAIL() << "a wrong-size scalar was accepted";
  } catch (const kernelsmith::OpenCLError& e) {
    EXPECT_EQ(e.code(), CL_INVALID_ARG_SIZE) << e.what();
    EXPECT_NE(std::string(e.what()).find("argument 3"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ctx->launch(*kernel, {args[0]}, {64}), kernelsmith::InvalidArgument);
  EXPECT_THROW(ctx->build(kVectorAdd)->kernel("nope"), kernelsmith::InvalidArgument);
}

TEST(OpenCL, ProfilingTimesArePositiveAndLaunchesAreCounted) {
  auto ctx = context();
  auto kernel = ctx->build(kVectorAdd)->kernel("vadd");
  const int n = 1 << 16;
  auto buf = ctx->allocate(n * sizeof(float));
  const std::vector<ocl::KernelArg> args = {ocl::KernelArg::buffer(*buf), ocl::KernelArg::buffer(*buf),
                                            ocl::KernelArg::buffer(*buf), ocl::KernelArg::value<cl_int>(n)};
  const auto before = ocl::launch_count();
  auto event = ctx->launch(*kernel, args, {static_cast<std::size_t>(n)});
  EXPECT_GT(event->seconds(), 0.0);
  EXPECT_EQ(ocl::launch_count(), before + 1);
  EXPECT_EQ(ocl::launched_since(before), std::vector<std::string>{"vadd"});

  const auto samples = ocl::profile_calls(
      *ctx,
      [&] {
        ctx->launch(*kernel, args, {static_cast<std::size_t>(n)});
        ctx->launch(*kernel, args, {static_cast<std::size_t>(n)});
      },
      1, 3);
  ASSERT_EQ(samples.size(), 3u);
  for (double s : samples) EXPECT_GT(s, 0.0);
  EXPECT_EQ(ocl::launch_count(), before + 1 + 2 * 4);
}

TEST(OpenCL, ProgramCacheHitsOnSameSourceAndOptionsOnly) {
  auto ctx = ocl::Context::create();
  auto first = ctx->build(kVectorAdd, "-DUNUSED=1");
  auto second = ctx->build(kVectorAdd, "-DUNUSED=1");
  EXPECT_EQ(first.get(), second.get());
  auto stats = ctx->cache_stats();
  EXPECT_EQ(stats.hits, 1u);
  EXPECT_EQ(stats.misses, 1u);
  auto other = ctx->build(kVectorAdd, "-DUNUSED=2");
  EXPECT_NE(other.get(), first.get());
  EXPECT_EQ(ctx->cache_stats().entries, 2u);
  ctx->clear_cache();
  EXPECT_EQ(ctx->cache_stats().entries, 0u);
}
