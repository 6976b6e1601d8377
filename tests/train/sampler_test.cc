// DistributedSampler: shards cover the dataset, padding and drop_last counts, shuffling is per
// epoch, the same on every rank and seeded, and (when tools/setup's Python has torch) index for
// index equal to PyTorch's sampler; batch counts do not overflow; the rest of an epoch dealt to
// another number of ranks (set_start, EpochPositionAfter) takes every sample not yet taken exactly
// once.
#include "core/train/data/sampler.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/venv.h"

namespace ddpspawn {
namespace {

struct Config {
  int64_t n;
  int replicas;
};

std::vector<Config> AllConfigs() {
  std::vector<Config> configs;
  for (int64_t n : {10, 11, 12, 7})
    for (int replicas : {1, 2, 3, 4}) configs.push_back({n, replicas});
  return configs;
}

std::string Name(const Config& config) {
  return absl::StrCat("n=", config.n, " R=", config.replicas);
}

// Every rank's indices for one epoch.
std::vector<std::vector<int64_t>> Shards(const Config& config, bool shuffle, uint64_t seed,
                                         bool drop_last, int64_t epoch = 0) {
  std::vector<std::vector<int64_t>> shards;
  for (int rank = 0; rank < config.replicas; ++rank) {
    absl::StatusOr<DistributedSampler> sampler =
        DistributedSampler::Create(config.n, config.replicas, rank, shuffle, seed, drop_last);
    EXPECT_TRUE(sampler.ok()) << sampler.status();
    if (!sampler.ok()) return {};
    sampler->set_epoch(epoch);
    shards.push_back(sampler->Indices());
  }
  return shards;
}

// The global order the shards were cut from: rank r holds positions r, r + R, r + 2R, ...
std::vector<int64_t> Interleave(const std::vector<std::vector<int64_t>>& shards) {
  std::vector<int64_t> order;
  if (shards.empty()) return order;
  for (size_t i = 0; i < shards[0].size(); ++i)
    for (const std::vector<int64_t>& shard : shards) {
      EXPECT_EQ(shard.size(), shards[0].size());
      if (i < shard.size()) order.push_back(shard[i]);
    }
  return order;
}

std::vector<int64_t> Iota(int64_t n) {
  std::vector<int64_t> values(n);
  std::iota(values.begin(), values.end(), 0);
  return values;
}

TEST(DistributedSamplerTest, PaddedShardsCoverTheDataset) {
  for (bool shuffle : {false, true}) {
    for (const Config& config : AllConfigs()) {
      SCOPED_TRACE(absl::StrCat(Name(config), " shuffle=", shuffle));
      absl::StatusOr<DistributedSampler> sampler =
          DistributedSampler::Create(config.n, config.replicas, 0, shuffle, /*seed=*/3);
      ASSERT_TRUE(sampler.ok()) << sampler.status();
      const int64_t per_rank = (config.n + config.replicas - 1) / config.replicas;
      EXPECT_EQ(sampler->num_samples(), per_rank);
      EXPECT_EQ(sampler->total_size(), per_rank * config.replicas);

      std::vector<std::vector<int64_t>> shards =
          Shards(config, shuffle, /*seed=*/3, /*drop_last=*/false);
      std::map<int64_t, int> counts;
      for (const std::vector<int64_t>& shard : shards) {
        EXPECT_EQ(static_cast<int64_t>(shard.size()), per_rank);
        for (int64_t index : shard) {
          EXPECT_GE(index, 0);
          EXPECT_LT(index, config.n);
          ++counts[index];
        }
      }
      EXPECT_EQ(static_cast<int64_t>(counts.size()), config.n);  // complete
      int64_t duplicates = 0;
      for (const auto& [index, count] : counts) duplicates += count - 1;
      EXPECT_EQ(duplicates, sampler->total_size() - config.n);
      if (config.n % config.replicas == 0) {
        EXPECT_EQ(duplicates, 0);  // disjoint
      }

      // The padding repeats the global order from its start.
      std::vector<int64_t> order = Interleave(shards);
      for (int64_t i = config.n; i < static_cast<int64_t>(order.size()); ++i)
        EXPECT_EQ(order[i], order[i - config.n]);
      if (!shuffle) {
        order.resize(config.n);
        EXPECT_EQ(order, Iota(config.n));
      }
    }
  }
}

TEST(DistributedSamplerTest, DropLastShardsAreDisjointAndEqual) {
  for (bool shuffle : {false, true}) {
    for (const Config& config : AllConfigs()) {
      SCOPED_TRACE(absl::StrCat(Name(config), " shuffle=", shuffle));
      absl::StatusOr<DistributedSampler> sampler =
          DistributedSampler::Create(config.n, config.replicas, config.replicas - 1, shuffle, 0,
                                     /*drop_last=*/true);
      ASSERT_TRUE(sampler.ok()) << sampler.status();
      const int64_t per_rank = config.n / config.replicas;
      EXPECT_EQ(sampler->num_samples(), per_rank);
      EXPECT_EQ(sampler->total_size(), per_rank * config.replicas);

      std::vector<std::vector<int64_t>> shards = Shards(config, shuffle, 0, /*drop_last=*/true);
      std::set<int64_t> seen;
      for (const std::vector<int64_t>& shard : shards) {
        EXPECT_EQ(static_cast<int64_t>(shard.size()), per_rank);
        for (int64_t index : shard) {
          EXPECT_TRUE(seen.insert(index).second) << "duplicate " << index;
          EXPECT_GE(index, 0);
          EXPECT_LT(index, config.n);
        }
      }
      EXPECT_EQ(static_cast<int64_t>(seen.size()), sampler->total_size());
      if (!shuffle) {
        EXPECT_EQ(Interleave(shards), Iota(sampler->total_size()));
      }
    }
  }
}

TEST(DistributedSamplerTest, ShuffleIsOnePermutationPerEpochForAllRanks) {
  for (const Config& config : AllConfigs()) {
    SCOPED_TRACE(Name(config));
    const uint64_t seed = 17;
    // One replica sees the global order itself.
    std::vector<int64_t> epoch0 = Shards({config.n, 1}, true, seed, false, 0).at(0);
    std::vector<int64_t> epoch1 = Shards({config.n, 1}, true, seed, false, 1).at(0);
    std::vector<int64_t> sorted = epoch0;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(sorted, Iota(config.n));
    EXPECT_NE(epoch0, epoch1);

    for (int64_t epoch : {0, 1}) {
      std::vector<int64_t> global = epoch == 0 ? epoch0 : epoch1;
      std::vector<int64_t> order = Interleave(Shards(config, true, seed, false, epoch));
      ASSERT_GE(order.size(), global.size());
      EXPECT_EQ(std::vector<int64_t>(order.begin(), order.begin() + config.n), global)
          << "epoch " << epoch;
      // And the same again (deterministic for the seed and epoch).
      EXPECT_EQ(Interleave(Shards(config, true, seed, false, epoch)), order);
    }
    EXPECT_NE(Shards({config.n, 1}, true, seed + 1, false, 0).at(0), epoch0);
  }
}

// An epoch begun on `before` ranks, each taking `taken` indices, then dealt from where they stood
// to `after` ranks: with padding, every sample of the epoch is taken at least once, and every
// sample the first ranks did not take exactly once by the second (padding repeats only what the
// second dealing's own order began with); with drop_last, no sample twice.
TEST(DistributedSamplerTest, TheRestOfAnEpochGoesToAnyNumberOfRanksOnce) {
  for (int64_t n : {7, 10, 11, 12, 50}) {
    for (int before : {1, 2, 3, 4}) {
      for (int after : {1, 2, 3, 4}) {
        for (bool drop_last : {false, true}) {
          if (drop_last && (n < before || n < after)) continue;
          const int64_t per_rank = drop_last ? n / before : (n + before - 1) / before;
          for (int64_t taken = 0; taken <= per_rank; ++taken) {
            SCOPED_TRACE(absl::StrCat("n=", n, " ", before, "->", after, " ranks, taken ", taken,
                                      drop_last ? " drop_last" : ""));
            std::map<int64_t, int> first, second;
            for (const std::vector<int64_t>& shard :
                 Shards({n, before}, /*shuffle=*/true, 5, drop_last, /*epoch=*/3)) {
              for (int64_t i = 0; i < taken; ++i) ++first[shard[i]];
            }
            const int64_t start = EpochPositionAfter(n, 0, before, drop_last, taken);
            ASSERT_GE(start, 0);
            ASSERT_LE(start, n);
            for (int rank = 0; rank < after; ++rank) {
              absl::StatusOr<DistributedSampler> sampler =
                  DistributedSampler::Create(n, after, rank, true, 5, drop_last);
              ASSERT_TRUE(sampler.ok()) << sampler.status();
              sampler->set_epoch(3);
              ASSERT_TRUE(sampler->set_start(start).ok());
              for (int64_t index : sampler->Indices()) ++second[index];
            }
            const int64_t rest = n - start;
            std::set<int64_t> padding_repeats;
            for (const auto& [index, count] : second) {
              // Only the padding of the rest's order (at most after - 1 of its first samples) comes
              // twice; none of it was taken before.
              EXPECT_EQ(first.count(index), 0u) << "sample " << index << " taken again";
              if (count > 1) padding_repeats.insert(index);
            }
            if (drop_last) {
              EXPECT_TRUE(padding_repeats.empty());
            } else {
              EXPECT_LT(static_cast<int64_t>(padding_repeats.size()), after);
              for (int64_t index = 0; index < n; ++index) {
                EXPECT_TRUE(first.count(index) > 0 || second.count(index) > 0)
                    << "sample " << index << " never taken";
              }
              EXPECT_EQ(static_cast<int64_t>(second.size()), rest);
            }
          }
        }
      }
    }
  }
}

TEST(DistributedSamplerTest, AStartOutsideTheEpochIsAnError) {
  absl::StatusOr<DistributedSampler> sampler = DistributedSampler::Create(10, 2, 0);
  ASSERT_TRUE(sampler.ok());
  EXPECT_FALSE(sampler->set_start(11).ok());
  EXPECT_FALSE(sampler->set_start(-1).ok());
  EXPECT_EQ(sampler->num_samples(), 5);
  ASSERT_TRUE(sampler->set_start(10).ok());  // nothing left of the epoch
  EXPECT_EQ(sampler->num_samples(), 0);
  EXPECT_TRUE(sampler->Indices().empty());
  ASSERT_TRUE(sampler->set_start(7).ok());
  EXPECT_EQ(sampler->num_samples(), 2);  // 3 left, padded to 4
}

TEST(DistributedSamplerTest, BadArgumentsAreErrors) {
  EXPECT_FALSE(DistributedSampler::Create(10, 0, 0).ok());
  EXPECT_FALSE(DistributedSampler::Create(10, -1, 0).ok());
  EXPECT_FALSE(DistributedSampler::Create(10, 2, 2).ok());
  EXPECT_FALSE(DistributedSampler::Create(10, 2, -1).ok());
  EXPECT_FALSE(DistributedSampler::Create(0, 1, 0).ok());
  EXPECT_FALSE(DistributedSampler::Create(-3, 1, 0).ok());
  EXPECT_FALSE(DistributedSampler::Create(3, 4, 0, true, 0, true).ok());
  EXPECT_THAT(DistributedSampler::Create(10, 2, 5).status().message(),
              testing::HasSubstr("rank 5"));
  // Fewer samples than replicas is fine with padding: ranks repeat samples.
  absl::StatusOr<DistributedSampler> padded = DistributedSampler::Create(3, 4, 3, false);
  ASSERT_TRUE(padded.ok()) << padded.status();
  EXPECT_EQ(padded->Indices(), (std::vector<int64_t>{0}));
  absl::StatusOr<DistributedSampler> tiny = DistributedSampler::Create(1, 4, 2);
  ASSERT_TRUE(tiny.ok()) << tiny.status();
  EXPECT_EQ(tiny->Indices(), (std::vector<int64_t>{0}));
}

// Runs `command` and collects its standard output; false if it failed.
bool RunAndCapture(const std::string& command, std::string* output) {
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return false;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) output->append(buffer, n);
  return pclose(pipe) == 0;
}

TEST(DistributedSamplerTest, SameIndicesAsPyTorch) {
  const std::string python = testing_support::VenvPython();
  if (std::system((python + " -c 'import torch' >/dev/null 2>&1").c_str()) != 0)
    FAIL() << python << " has no torch (run tools/setup)";
  struct Case {
    int64_t n;
    int replicas, rank;
    bool shuffle;
    uint64_t seed;
    bool drop_last;
    int64_t epoch;
  };
  const std::vector<Case> cases = {
      {11, 3, 1, true, 0, false, 0}, {11, 3, 2, true, 42, false, 5},
      {7, 4, 3, true, 7, true, 2},   {12, 4, 0, false, 0, false, 0},
      {1, 3, 2, true, 1, false, 0},  {1000, 3, 1, true, 123, false, 9},
      {10, 4, 1, false, 0, true, 0},
  };
  std::string script =
      "import sys, torch.utils.data as d\n"
      "for line in sys.stdin:\n"
      "  n, r, k, sh, seed, dl, ep = map(int, line.split())\n"
      "  s = d.DistributedSampler(range(n), num_replicas=r, rank=k, shuffle=bool(sh), seed=seed, "
      "drop_last=bool(dl))\n"
      "  s.set_epoch(ep)\n"
      "  print(' '.join(map(str, s)))\n";
  std::string input;
  for (const Case& c : cases)
    absl::StrAppend(&input, c.n, " ", c.replicas, " ", c.rank, " ", c.shuffle ? 1 : 0, " ", c.seed,
                    " ", c.drop_last ? 1 : 0, " ", c.epoch, "\n");
  std::string script_path = absl::StrCat(testing::TempDir(), "/sampler.py");
  std::string input_path = absl::StrCat(testing::TempDir(), "/sampler.in");
  FILE* file = fopen(script_path.c_str(), "w");
  ASSERT_NE(file, nullptr);
  fputs(script.c_str(), file);
  fclose(file);
  file = fopen(input_path.c_str(), "w");
  ASSERT_NE(file, nullptr);
  fputs(input.c_str(), file);
  fclose(file);

  std::string output;
  ASSERT_TRUE(RunAndCapture(absl::StrCat(python, " ", script_path, " < ", input_path), &output))
      << output;
  std::vector<std::string> lines = absl::StrSplit(output, '\n');
  ASSERT_GE(lines.size(), cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    SCOPED_TRACE(absl::StrCat("case ", i));
    std::vector<int64_t> expected;
    for (absl::string_view field : absl::StrSplit(lines[i], ' ', absl::SkipEmpty())) {
      int64_t value;
      ASSERT_TRUE(absl::SimpleAtoi(field, &value)) << lines[i];
      expected.push_back(value);
    }
    absl::StatusOr<DistributedSampler> sampler =
        DistributedSampler::Create(c.n, c.replicas, c.rank, c.shuffle, c.seed, c.drop_last);
    ASSERT_TRUE(sampler.ok()) << sampler.status();
    sampler->set_epoch(c.epoch);
    EXPECT_EQ(sampler->Indices(), expected);
  }
}

// ceil(samples / batch_size) and batch ends, exact up to int64's limits: a batch size of 2^63 - 1
// was (samples + batch_size - 1) overflowing, 0 batches.
TEST(BatchCountTest, ExactWithoutOverflow) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(BatchCount(10, 3), 4);
  EXPECT_EQ(BatchCount(9, 3), 3);
  EXPECT_EQ(BatchCount(0, 3), 0);
  EXPECT_EQ(BatchCount(5, kMax), 1);
  EXPECT_EQ(BatchCount(kMax, kMax), 1);
  EXPECT_EQ(BatchCount(kMax, 1), kMax);
  EXPECT_EQ(BatchCount(kMax, 2), int64_t{1} << 62);
  EXPECT_EQ(BatchEnd(0, 3, 10), 3);
  EXPECT_EQ(BatchEnd(3, 3, 10), 10);
  EXPECT_EQ(BatchEnd(0, kMax, 5), 5);
  EXPECT_EQ(BatchEnd(BatchCount(kMax, 2) - 1, 2, kMax), kMax);
}

}  // namespace
}  // namespace ddpspawn
