// libFuzzer target: the C ABI's option structs and their struct_size. Each input makes launch
// options (any sizes, counts, strings and limits; spawn or fork; never started) in a heap buffer
// exactly as large as its struct_size says (a read past it is an AddressSanitizer report), and asks
// each *_init_sized to write defaults into a buffer of a fuzzed size. Refusing is fine; reading or
// writing past the caller's struct, crashing or aborting is a finding.
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "ddpspawn/ddpspawn.h"

namespace {

int Worker(int32_t /*rank*/, void* /*user_data*/) { return 0; }

// The struct sizes worth trying most: none, mid-field, each released size and past it, and
// anything.
template <typename Options>
uint32_t StructSize(FuzzedDataProvider& input) {
  const uint32_t sizes[] = {0,
                            3,
                            12,
                            sizeof(Options) - 1,
                            sizeof(Options),
                            sizeof(Options) + 8,
                            std::numeric_limits<uint32_t>::max(),
                            input.ConsumeIntegral<uint32_t>()};
  return sizes[input.ConsumeIntegralInRange<size_t>(0, std::size(sizes) - 1)];
}

// The caller's struct: `struct_size` bytes on the heap (at least the size field itself; at most a
// little past the struct, since a library that refuses a larger size reads no more of it).
struct CallerStruct {
  CallerStruct(uint32_t struct_size, size_t struct_bytes)
      : length(
            std::max<size_t>(sizeof(uint32_t), std::min<size_t>(struct_size, struct_bytes + 64))),
        bytes(std::make_unique<unsigned char[]>(length)) {
    std::memset(bytes.get(), 0xa5, length);
  }
  size_t length;
  std::unique_ptr<unsigned char[]> bytes;
};

template <typename Options>
void InitSized(FuzzedDataProvider& input, ddpspawn_status (*init)(Options*, uint32_t)) {
  const uint32_t size = StructSize<Options>(input);
  CallerStruct caller(size, sizeof(Options));
  (void)init(reinterpret_cast<Options*>(caller.bytes.get()), size);
}

double Limit(FuzzedDataProvider& input) {
  const double specials[] = {0.0,
                             -1.0,
                             1e-300,
                             1e300,
                             std::numeric_limits<double>::infinity(),
                             std::numeric_limits<double>::quiet_NaN(),
                             input.ConsumeFloatingPoint<double>()};
  return specials[input.ConsumeIntegralInRange<size_t>(0, std::size(specials) - 1)];
}

// NULL-terminated, or NULL itself.
const char* const* Strings(FuzzedDataProvider& input, std::vector<std::string>& storage,
                           std::vector<const char*>& pointers) {
  const int count = input.ConsumeIntegralInRange<int>(-1, 3);
  if (count < 0) return nullptr;
  for (int i = 0; i < count; ++i) storage.push_back(input.ConsumeRandomLengthString(64));
  for (const std::string& s : storage) pointers.push_back(s.c_str());
  pointers.push_back(nullptr);
  return pointers.data();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider input(data, size);
  InitSized<ddpspawn_launch_options>(input, ddpspawn_launch_options_init_sized);
  InitSized<ddpspawn_rank_report>(input, ddpspawn_rank_report_init_sized);
  InitSized<ddpspawn_context_options>(input, ddpspawn_context_options_init_sized);
  InitSized<ddpspawn_reducer_options>(input, ddpspawn_reducer_options_init_sized);

  ddpspawn_launch_options full = DDPSPAWN_LAUNCH_OPTIONS_INIT;
  full.nprocs = input.ConsumeIntegral<int32_t>();
  const char* methods[] = {nullptr, "spawn", "fork", "forkserver", ""};
  const std::string method = input.ConsumeRandomLengthString(16);
  const size_t pick = input.ConsumeIntegralInRange<size_t>(0, std::size(methods));
  full.start_method = pick < std::size(methods) ? methods[pick] : method.c_str();
  std::vector<std::string> argv_storage, env_storage;
  std::vector<const char*> argv, env;
  full.argv = Strings(input, argv_storage, argv);
  full.env = Strings(input, env_storage, env);
  full.worker_fn = input.ConsumeBool() ? Worker : nullptr;
  full.timeout_s = Limit(input);
  full.grace_period_s = Limit(input);
  const std::string master_addr = input.ConsumeRandomLengthString(64);
  full.master_addr = input.ConsumeBool() ? master_addr.c_str() : nullptr;
  full.master_port = input.ConsumeIntegral<int32_t>();
  full.struct_size = StructSize<ddpspawn_launch_options>(input);
  CallerStruct caller(full.struct_size, sizeof(full));
  std::memcpy(caller.bytes.get(), &full, std::min(caller.length, sizeof(full)));
  ddpspawn_job* job = nullptr;
  if (ddpspawn_job_create(reinterpret_cast<ddpspawn_launch_options*>(caller.bytes.get()), &job) ==
      DDPSPAWN_OK) {
    if (ddpspawn_job_nprocs(job) < 1) __builtin_trap();
    ddpspawn_job_destroy(job);
  }
  return 0;
}
