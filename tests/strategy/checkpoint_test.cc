// Checkpoint integrity: a checkpoint carries a checksum of its archive, and a file with flipped
// bytes, cut short or stripped of its header is refused before anything is loaded from it; an
// untouched one, and one written before checksums (format 1), loads. Each rank's RNG state comes
// back as its own.
#include "core/model/checkpoint.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/optim/sgd.h>
#include <torch/serialize/archive.h>

#include <fstream>
#include <iterator>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "core/model/weights_io.h"
#include "core/strategy/checkpoint_io.h"
#include "core/train/models/mlp_module.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ddpspawn {
namespace {

using ::testing::HasSubstr;

// 64x512 + 512x10 weights: the middle of the file is tensor data.
constexpr char kModel[] = "mlp:64,512,10";

std::shared_ptr<LightningModule> Mlp(int seed) {
  at::manual_seed(seed);
  absl::StatusOr<std::shared_ptr<LightningModule>> module = MakeMlpModule(kModel, true, {});
  EXPECT_TRUE(module.ok()) << module.status();
  return module.value_or(nullptr);
}

// Flips 16 bytes in the middle of `bytes`.
std::string Damaged(std::string bytes) {
  for (size_t i = 0; i < 16; ++i) bytes[bytes.size() / 2 + i] ^= 0x5a;
  return bytes;
}

bool SameState(LightningModule& a, LightningModule& b) {
  NamedTensors x = a.named_state(), y = b.named_state();
  if (x.size() != y.size()) return false;
  for (size_t i = 0; i < x.size(); ++i) {
    if (!x[i].second.equal(y[i].second)) return false;
  }
  return true;
}

TEST(CheckpointTest, FlippedBytesAreRefusedAndLoadNothing) {
  std::shared_ptr<LightningModule> saved = Mlp(1);
  absl::StatusOr<std::string> bytes = SerializeCheckpoint(*saved, nullptr, {});
  ASSERT_TRUE(bytes.ok()) << bytes.status();

  std::shared_ptr<LightningModule> target = Mlp(2), before = Mlp(2);
  ASSERT_FALSE(SameState(*target, *saved));
  absl::Status damaged = RestoreCheckpoint(Damaged(*bytes), *target, nullptr, nullptr);
  EXPECT_EQ(damaged.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(damaged.message(), HasSubstr("corrupt: checksum mismatch (stored crc32 "));
  EXPECT_THAT(damaged.message(), HasSubstr("it was not loaded"));
  EXPECT_TRUE(SameState(*target, *before));  // untouched

  ASSERT_TRUE(RestoreCheckpoint(*bytes, *target, nullptr, nullptr).ok());
  EXPECT_TRUE(SameState(*target, *saved));
}

TEST(CheckpointTest, ResumeRefusesADamagedFileOnDisk) {
  std::shared_ptr<LightningModule> saved = Mlp(3);
  torch::optim::SGD optimizer(saved->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  TrainingState state;
  state.epoch = 4;
  state.global_step = 40;
  absl::StatusOr<std::string> bytes = SerializeCheckpoint(*saved, &optimizer, state);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  const std::string path = absl::StrCat(testing::TempDir(), "/damaged.ckpt");
  std::shared_ptr<CheckpointIO> io = MakeAtomicFileCheckpointIO();
  ASSERT_TRUE(io->Save(*bytes, path).ok());
  {
    std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(static_cast<std::streamoff>(bytes->size() / 2));
    file.write("sixteen bytes!!!", 16);
  }
  absl::StatusOr<std::string> loaded = io->Load(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  std::shared_ptr<LightningModule> target = Mlp(4);
  torch::optim::SGD resumed(target->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  TrainingState restored;
  absl::Status status = RestoreCheckpoint(*loaded, *target, &resumed, &restored);
  EXPECT_THAT(status.message(), HasSubstr("checksum mismatch")) << status;
  EXPECT_EQ(restored.global_step, 0);

  ASSERT_TRUE(io->Save(*bytes, path).ok());
  loaded = io->Load(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_TRUE(RestoreCheckpoint(*loaded, *target, &resumed, &restored).ok());
  EXPECT_EQ(restored.epoch, 4);
  EXPECT_EQ(restored.global_step, 40);
  EXPECT_TRUE(SameState(*target, *saved));
}

TEST(CheckpointTest, TruncatedOrStrippedFilesAreRefused) {
  std::shared_ptr<LightningModule> saved = Mlp(5), target = Mlp(6);
  absl::StatusOr<std::string> bytes = SerializeCheckpoint(*saved, nullptr, {});
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  absl::Status cut =
      RestoreCheckpoint(bytes->substr(0, bytes->size() - 100), *target, nullptr, nullptr);
  EXPECT_THAT(cut.message(), HasSubstr("corrupt"));
  EXPECT_THAT(cut.message(), HasSubstr("truncated"));
  // The archive alone, its checksum header gone.
  absl::Status stripped =
      RestoreCheckpoint(bytes->substr(bytes->find('\n') + 1), *target, nullptr, nullptr);
  EXPECT_THAT(stripped.message(), HasSubstr("checksum header is missing"));
  absl::Status newer =
      RestoreCheckpoint("ddpspawn-checkpoint-9 whatever\n", *target, nullptr, nullptr);
  EXPECT_THAT(newer.message(), HasSubstr("newer version"));
  EXPECT_FALSE(RestoreCheckpoint("not a checkpoint", *target, nullptr, nullptr).ok());
}

// Checkpoints written before checksums existed (a bare LibTorch archive that says format 1) still
// load.
TEST(CheckpointTest, FormatOneWithoutAChecksumStillLoads) {
  std::shared_ptr<LightningModule> saved = Mlp(7), target = Mlp(8);
  torch::serialize::OutputArchive archive;
  archive.write("format", c10::IValue(std::string("ddpspawn-checkpoint-1")));
  for (const auto& [name, tensor] : saved->named_state()) archive.write("model." + name, tensor);
  std::ostringstream out;
  archive.save_to(out);
  absl::Status status = RestoreCheckpoint(out.str(), *target, nullptr, nullptr);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_TRUE(SameState(*target, *saved));
}

// A damaged torch.save file whose zip directory points past its end (the input tools/fuzz found) is
// an error, as foreign weights and as a format-1 checkpoint (an archive without a checksum).
// LibTorch's own in-memory readers copied past the end of the buffer there, which ASan reports
// (--config=asan).
TEST(CheckpointTest, AnArchiveThatPointsPastItsEndIsAnError) {
  std::ifstream in("fuzz/corpus/weights/regression_zip_directory_past_end", std::ios::binary);
  ASSERT_TRUE(in) << "the fuzz corpus file is missing from the test's data";
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_GT(bytes.size(), 4096u);
  EXPECT_EQ(ReadWeightsFromAnyFormat(bytes).status().code(), absl::StatusCode::kInvalidArgument);
  std::shared_ptr<LightningModule> target = Mlp(3);
  EXPECT_EQ(RestoreCheckpoint(bytes, *target, nullptr, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
}

// A torch.save file holding a tensor of a dtype no operation here supports (UInt5, found by
// tools/fuzz) is refused by name; it used to be returned, and copying it into a model threw through
// the launcher.
TEST(CheckpointTest, WeightsOfAnExoticDtypeAreRefused) {
  std::ifstream in("fuzz/corpus/weights/regression_uint5_tensor", std::ios::binary);
  ASSERT_TRUE(in) << "the fuzz corpus file is missing from the test's data";
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  absl::StatusOr<NamedTensors> weights = ReadWeightsFromAnyFormat(bytes);
  EXPECT_EQ(weights.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(weights.status().message(), HasSubstr("' is UInt5 (Strided); weights are dense"));
}

// Damaged torch.save files (found by tools/fuzz) whose pickle states a 4 GB string or a memo index
// of 1.9 billion: LibTorch's unpickler allocated that much (the memo table 28 GB) before it found
// the bytes missing. Each is refused before it reads the pickle, naming the size.
TEST(CheckpointTest, APickleStatingSizesBeyondItsBytesIsRefusedUnread) {
  for (const auto& [file, size] :
       {std::pair<std::string, std::string>{"regression_pickle_string_of_4gb", "a length of"},
        std::pair<std::string, std::string>{"regression_pickle_memo_index_of_28gb",
                                            "memo index 1869874021"}}) {
    std::ifstream in("fuzz/corpus/weights/" + file, std::ios::binary);
    ASSERT_TRUE(in) << file << " is missing from the test's data";
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    absl::StatusOr<NamedTensors> weights = ReadWeightsFromAnyFormat(bytes);
    EXPECT_EQ(weights.status().code(), absl::StatusCode::kInvalidArgument) << file;
    EXPECT_THAT(weights.status().message(), HasSubstr("the archive's data.pkl is damaged")) << file;
    EXPECT_THAT(weights.status().message(), HasSubstr(size)) << file;
  }
}

// Resuming gives each rank the generator state it saved: reading the states into one tensor made
// every rank's the last rank's.
TEST(CheckpointTest, EveryRanksRngStateComesBackAsItsOwn) {
  TrainingState state;
  for (int rank = 0; rank < 3; ++rank) {
    at::manual_seed(100 + rank);
    state.cpu_rng_per_rank.push_back(at::detail::getDefaultCPUGenerator().get_state());
  }
  absl::StatusOr<std::string> bytes = SerializeCheckpoint(*Mlp(1), nullptr, state);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  TrainingState restored;
  absl::Status status = RestoreCheckpoint(*bytes, *Mlp(2), nullptr, &restored);
  ASSERT_TRUE(status.ok()) << status;
  ASSERT_EQ(restored.cpu_rng_per_rank.size(), 3u);
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_TRUE(restored.cpu_rng_per_rank[rank].equal(state.cpu_rng_per_rank[rank]))
        << "rank " << rank << " got another rank's generator state";
  }
}

}  // namespace
}  // namespace ddpspawn
