// Sharded checkpoints (core/model/sharded_checkpoint.h) in real jobs of tests/ddp/zero_worker:
// saved by shard_grad_op and full_shard ranks, each writing its own shard, and loaded on another
// number of ranks (2 -> 3, 4 -> 2, 3 -> 2), each rank reading only the saved shards that hold its
// rows now. The weights and the optimizer state come back bit for bit, training goes on as a plain
// optimizer resumed from the same state does, and a missing, damaged or foreign shard, a missing
// common file, or a directory that is not a checkpoint, is refused by name.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/launch/launcher.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ddpspawn {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// 3 steps on from the loaded state against one process on every rank's batches (float32, lr 0.01):
// the all-reduced mean of batch means is not bit-equal to one mean of all batches; observed at most
// 1.2e-7 here (zero_redundancy_optimizer_test sees the same).
constexpr double kTolerance = 1e-6;

struct Outcome {
  absl::Status status;
  std::map<std::string, std::string> fields;
};

Outcome RunWorker(int nprocs, const std::string& optimizer, const std::string& stage,
                  const std::string& mode) {
  LaunchSpec spec;
  spec.nprocs = nprocs;
  spec.argv = {"tests/ddp/zero_worker", "4", optimizer, stage, mode};
  spec.timeout = absl::Seconds(120);
  Outcome outcome;
  absl::StatusOr<std::unique_ptr<Job>> job = Job::Create(spec);
  if (!job.ok()) {
    outcome.status = job.status();
    return outcome;
  }
  outcome.status = (*job)->Start();
  if (outcome.status.ok()) outcome.status = (*job)->Wait();
  for (absl::string_view field : absl::StrSplit((*job)->result().value_or(""), ' ')) {
    std::pair<std::string, std::string> kv = absl::StrSplit(field, absl::MaxSplits('=', 1));
    outcome.fields[kv.first] = kv.second;
  }
  return outcome;
}

double Number(const Outcome& outcome, const std::string& key) {
  double value = -1;
  auto found = outcome.fields.find(key);
  EXPECT_TRUE(found != outcome.fields.end() && absl::SimpleAtod(found->second, &value)) << key;
  return value;
}

// A fresh directory of this test's own, removed at the end.
class ShardedCheckpointTest : public testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = absl::StrCat(testing::TempDir(), "/sharded.XXXXXX");
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    root_ = pattern;
  }
  void TearDown() override { fs::remove_all(root_); }
  std::string root_;
};

std::set<std::string> FilesIn(const std::string& dir) {
  std::set<std::string> names;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir)) {
    names.insert(entry.path().filename().string());
  }
  return names;
}

struct Resharding {
  std::string stage, optimizer;
  int saved_ranks, loaded_ranks;
  std::string shards_read;  // what each loading rank reads: saved ranks '+', ranks ','
};

void PrintTo(const Resharding& c, std::ostream* out) {
  *out << c.stage << " " << c.optimizer << " saved on " << c.saved_ranks << " ranks, loaded on "
       << c.loaded_ranks;
}

class ReshardingTest : public ShardedCheckpointTest,
                       public testing::WithParamInterface<Resharding> {};

TEST_P(ReshardingTest, LoadsExactlyAndGoesOn) {
  const Resharding& c = GetParam();
  const std::string dir = root_ + "/ckpt";
  Outcome saved = RunWorker(c.saved_ranks, c.optimizer, c.stage, "save:" + dir);
  ASSERT_TRUE(saved.status.ok()) << saved.status;
  // Written twice, the second replacing the first: one shard per rank and the common file, nothing
  // left of the staging or of the previous checkpoint.
  std::set<std::string> expected = {"common"};
  for (int r = 0; r < c.saved_ranks; ++r) {
    expected.insert(absl::StrCat("shard-", r, "-of-", c.saved_ranks));
  }
  EXPECT_EQ(FilesIn(dir), expected);
  EXPECT_FALSE(fs::exists(dir + ".partial"));
  EXPECT_FALSE(fs::exists(dir + ".previous"));

  Outcome loaded = RunWorker(c.loaded_ranks, c.optimizer, c.stage, "load:" + dir);
  ASSERT_TRUE(loaded.status.ok()) << loaded.status;
  std::cerr << "observed: " << absl::StrJoin(loaded.fields, " ", absl::PairFormatter("=")) << "\n";
  EXPECT_EQ(Number(loaded, "loaded_weight_diff"), 0.0);
  EXPECT_EQ(Number(loaded, "loaded_state_diff"), 0.0);
  EXPECT_EQ(Number(loaded, "saved_world"), c.saved_ranks);
  EXPECT_EQ(Number(loaded, "saved_step"), 4);  // the second save's
  EXPECT_EQ(loaded.fields["shards_read"], c.shards_read);
  EXPECT_LT(Number(loaded, "resumed_diff"), kTolerance);
}

// zero_worker's model: Linear(8, 32), Linear(32, 16), Linear(16, 1). At 4 ranks each owns 8 rows of
// the first weight, 4 of the second, and rank 0 alone the last layer's single row; at 2, 16, 8 and
// rank 0 again. So from 4 to 2, rank 0 reads shards 0 and 1 and rank 1 reads 2 and 3; from 2 to 3,
// rank 0's 11 rows of 32 lie in shard 0, rank 1's (11 to 22) in both, rank 2's in shard 1.
INSTANTIATE_TEST_SUITE_P(Strategies, ReshardingTest,
                         testing::Values(Resharding{"shard_grad_op", "adam", 2, 3, "0,0+1,1"},
                                         Resharding{"shard_grad_op", "adagrad", 4, 2, "0+1,2+3"},
                                         Resharding{"full_shard", "adam", 4, 2, "0+1,2+3"},
                                         Resharding{"full_shard", "sgd", 2, 3, "0,0+1,1"},
                                         Resharding{"full_shard", "adamw", 3, 2, "0+1,1+2"}),
                         [](const testing::TestParamInfo<Resharding>& info) {
                           return absl::StrCat(info.param.stage, "_", info.param.optimizer, "_",
                                               info.param.saved_ranks, "_to_",
                                               info.param.loaded_ranks);
                         });

TEST_F(ShardedCheckpointTest, RefusesWhatIsNotTheSavedCheckpoint) {
  const std::string dir = root_ + "/ckpt";
  ASSERT_TRUE(RunWorker(2, "adam", "shard_grad_op", "save:" + dir).status.ok());
  const std::string shard = dir + "/shard-1-of-2";
  const std::string kept = root_ + "/kept";
  ASSERT_TRUE(fs::copy_file(shard, kept));

  {  // One byte changed.
    std::fstream file(shard, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(200);
    file.put('\x7f');
  }
  Outcome damaged = RunWorker(2, "adam", "shard_grad_op", "load:" + dir);
  EXPECT_THAT(damaged.status.message(), HasSubstr(absl::StrCat("the shard file ", shard)));
  EXPECT_THAT(damaged.status.message(), HasSubstr("damaged or from another save"));

  // Another save's shard 1, of the same model and world: well formed, but not this save's.
  const std::string other = root_ + "/other";
  ASSERT_TRUE(RunWorker(2, "adagrad", "shard_grad_op", "save:" + other).status.ok());
  fs::copy_file(other + "/shard-1-of-2", shard, fs::copy_options::overwrite_existing);
  Outcome foreign = RunWorker(2, "adam", "shard_grad_op", "load:" + dir);
  EXPECT_THAT(foreign.status.message(), HasSubstr("damaged or from another save"));

  fs::remove(shard);
  Outcome missing = RunWorker(2, "adam", "shard_grad_op", "load:" + dir);
  EXPECT_THAT(
      missing.status.message(),
      HasSubstr(absl::StrCat("the shard file ", shard, " (saved by rank 1 of 2) is missing")));
  // Rank 1 needed it; rank 0 did not, and says which rank failed.
  EXPECT_THAT(missing.status.message(), HasSubstr("rank 1"));

  fs::copy_file(kept, shard);
  fs::remove(dir + "/common");
  Outcome no_common = RunWorker(2, "adam", "shard_grad_op", "load:" + dir);
  EXPECT_THAT(no_common.status.message(),
              HasSubstr(absl::StrCat(dir, " is not a sharded checkpoint: it has no common file")));
}

TEST_F(ShardedCheckpointTest, LeavesAnotherDirectoryAlone) {
  const std::string dir = root_ + "/results";
  fs::create_directory(dir);
  std::ofstream(dir + "/notes.txt") << "mine";
  Outcome refused = RunWorker(2, "adam", "full_shard", "save:" + dir);
  EXPECT_THAT(refused.status.message(),
              HasSubstr(absl::StrCat(dir, " exists and is not a sharded checkpoint")));
  EXPECT_EQ(FilesIn(dir), std::set<std::string>{"notes.txt"});
}

}  // namespace
}  // namespace ddpspawn
