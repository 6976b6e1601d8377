// Parsing of every cluster environment: ddpspawn's own, TorchElastic, SLURM and plain variables;
// and which process of a job prints for it (rank_zero.h).
#include "core/env/cluster_environment.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "core/env/rank_zero.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ddpspawn {
namespace {

using ::testing::HasSubstr;

EnvLookup FakeEnv(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const char* name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

TEST(ClusterEnvironmentTest, NothingSetIsASingleProcess) {
  absl::StatusOr<ClusterInfo> info = DetectClusterEnvironment(FakeEnv({}));
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->kind, ClusterKind::kEnv);
  EXPECT_EQ(info->rank, 0);
  EXPECT_EQ(info->world_size, 1);
  EXPECT_EQ(info->master_addr, "127.0.0.1");
}

TEST(ClusterEnvironmentTest, PlainVariables) {
  absl::StatusOr<ClusterInfo> info = DetectClusterEnvironment(FakeEnv({{"MASTER_ADDR", "10.0.0.1"},
                                                                       {"MASTER_PORT", "1234"},
                                                                       {"WORLD_SIZE", "8"},
                                                                       {"RANK", "5"},
                                                                       {"LOCAL_RANK", "1"},
                                                                       {"LOCAL_WORLD_SIZE", "4"},
                                                                       {"NODE_RANK", "1"}}));
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->kind, ClusterKind::kEnv);
  EXPECT_EQ(info->rank, 5);
  EXPECT_EQ(info->world_size, 8);
  EXPECT_EQ(info->local_rank, 1);
  EXPECT_EQ(info->local_world_size, 4);
  EXPECT_EQ(info->node_rank, 1);
  EXPECT_EQ(info->master_addr, "10.0.0.1");
  EXPECT_EQ(info->master_port, 1234);
}

TEST(ClusterEnvironmentTest, DdpspawnLauncherWins) {
  absl::StatusOr<ClusterInfo> info =
      DetectClusterEnvironment(FakeEnv({{"DDPSPAWN_RUN_DIR", "/tmp/x"},
                                        {"MASTER_PORT", "1"},
                                        {"WORLD_SIZE", "2"},
                                        {"RANK", "1"},
                                        {"LOCAL_RANK", "1"},
                                        {"LOCAL_WORLD_SIZE", "2"},
                                        {"GROUP_RANK", "0"},
                                        {"SLURM_NTASKS", "4"},
                                        {"SLURM_PROCID", "3"}}));
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->kind, ClusterKind::kDdpspawn);
  EXPECT_EQ(info->run_dir, "/tmp/x");
  EXPECT_EQ(info->rank, 1);
  EXPECT_EQ(info->attempt, 0);
}

// A launcher's restarted ranks (max_restarts) are told their generation as torchrun tells its
// attempts: a multi-node job's store outlives generations.
TEST(ClusterEnvironmentTest, DdpspawnRanksReadTheirGeneration) {
  std::map<std::string, std::string> vars = {{"DDPSPAWN_RUN_DIR", "/tmp/x"},
                                             {"MASTER_PORT", "1"},
                                             {"WORLD_SIZE", "4"},
                                             {"RANK", "3"},
                                             {"LOCAL_RANK", "1"},
                                             {"LOCAL_WORLD_SIZE", "2"},
                                             {"NODE_RANK", "1"},
                                             {"TORCHELASTIC_RESTART_COUNT", "2"}};
  absl::StatusOr<ClusterInfo> info = DetectClusterEnvironment(FakeEnv(vars));
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->kind, ClusterKind::kDdpspawn);
  EXPECT_EQ(info->attempt, 2);
  EXPECT_TRUE(info->store_is_external);
  vars["TORCHELASTIC_RESTART_COUNT"] = "-1";
  EXPECT_THAT(DetectClusterEnvironment(FakeEnv(vars)).status().message(),
              HasSubstr("restart count must be >= 0"));
}

TEST(ClusterEnvironmentTest, TorchElastic) {
  absl::StatusOr<ClusterInfo> info =
      DetectClusterEnvironment(FakeEnv({{"TORCHELASTIC_RUN_ID", "abc"},
                                        {"TORCHELASTIC_USE_AGENT_STORE", "True"},
                                        {"MASTER_ADDR", "host0"},
                                        {"MASTER_PORT", "29400"},
                                        {"WORLD_SIZE", "4"},
                                        {"RANK", "3"},
                                        {"GROUP_RANK", "1"},
                                        {"LOCAL_RANK", "1"},
                                        {"LOCAL_WORLD_SIZE", "2"},
                                        {"TORCHELASTIC_RESTART_COUNT", "2"}}));
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->kind, ClusterKind::kTorchElastic);
  EXPECT_EQ(info->node_rank, 1);
  EXPECT_EQ(info->rank, 3);
  EXPECT_TRUE(info->store_is_external);
  EXPECT_EQ(info->master_addr, "host0");
  EXPECT_EQ(info->attempt, 2);
  EXPECT_TRUE(CreatesProcessesExternally(*info));
}

// Who started this process decides whether Launch() starts ranks or joins.
TEST(ClusterEnvironmentTest, WhoCreatesTheProcesses) {
  auto external = [](std::map<std::string, std::string> vars) {
    absl::StatusOr<ClusterInfo> info = DetectClusterEnvironment(FakeEnv(std::move(vars)));
    EXPECT_TRUE(info.ok()) << info.status();
    return info.ok() && CreatesProcessesExternally(*info);
  };
  EXPECT_FALSE(external({}));
  EXPECT_FALSE(external({{"WORLD_SIZE", "1"}, {"RANK", "0"}}));
  EXPECT_TRUE(external({{"WORLD_SIZE", "2"}, {"RANK", "1"}}));
  EXPECT_TRUE(external({{"SLURM_NTASKS", "2"}, {"SLURM_PROCID", "0"}}));
  // One task: a batch script that runs ddpspawn, which starts the ranks.
  EXPECT_FALSE(external({{"SLURM_NTASKS", "1"}, {"SLURM_PROCID", "0"}}));
  EXPECT_FALSE(external({{"DDPSPAWN_RUN_DIR", "/x"},
                         {"WORLD_SIZE", "2"},
                         {"RANK", "1"},
                         {"LOCAL_RANK", "1"},
                         {"LOCAL_WORLD_SIZE", "2"},
                         {"MASTER_ADDR", "127.0.0.1"},
                         {"MASTER_PORT", "1"}}));
}

TEST(ClusterEnvironmentTest, Slurm) {
  absl::StatusOr<ClusterInfo> info =
      DetectClusterEnvironment(FakeEnv({{"SLURM_NTASKS", "8"},
                                        {"SLURM_PROCID", "6"},
                                        {"SLURM_LOCALID", "2"},
                                        {"SLURM_NODEID", "1"},
                                        {"SLURM_JOB_NAME", "train"},
                                        {"SLURM_NODELIST", "gpu[007-008]"},
                                        {"SLURM_TASKS_PER_NODE", "4(x2)"},
                                        {"SLURM_JOB_ID", "123456"}}));
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->kind, ClusterKind::kSlurm);
  EXPECT_EQ(info->rank, 6);
  EXPECT_EQ(info->world_size, 8);
  EXPECT_EQ(info->local_rank, 2);
  EXPECT_EQ(info->local_world_size, 4);
  EXPECT_EQ(info->node_rank, 1);
  EXPECT_EQ(info->master_addr, "gpu007");
  EXPECT_EQ(info->master_port, 15000 + 3456);
}

TEST(ClusterEnvironmentTest, SlurmJobAndItsRequeues) {
  EXPECT_FALSE(DetectSlurmJob(FakeEnv({})).has_value());
  std::optional<SlurmJob> job = DetectSlurmJob(FakeEnv({{"SLURM_JOB_ID", "77"}}));
  ASSERT_TRUE(job.has_value());
  EXPECT_EQ(job->job_id, "77");
  EXPECT_EQ(job->restart_count, 0);
  job = DetectSlurmJob(FakeEnv({{"SLURM_JOB_ID", "77"}, {"SLURM_RESTART_COUNT", "2"}}));
  ASSERT_TRUE(job.has_value());
  EXPECT_EQ(job->restart_count, 2);
}

TEST(ClusterEnvironmentTest, InteractiveSlurmIsIgnored) {
  absl::StatusOr<ClusterInfo> info = DetectClusterEnvironment(
      FakeEnv({{"SLURM_NTASKS", "8"}, {"SLURM_PROCID", "6"}, {"SLURM_JOB_NAME", "bash"}}));
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->kind, ClusterKind::kEnv);
  EXPECT_EQ(info->world_size, 1);
}

TEST(ClusterEnvironmentTest, BadValuesAreNamed) {
  EXPECT_THAT(DetectClusterEnvironment(FakeEnv({{"RANK", "one"}})).status().message(),
              HasSubstr("RANK='one' is not an integer"));
  EXPECT_THAT(
      DetectClusterEnvironment(FakeEnv({{"RANK", "2"}, {"WORLD_SIZE", "2"}})).status().message(),
      HasSubstr("rank 2 is outside [0, 2)"));
  EXPECT_THAT(DetectClusterEnvironment(FakeEnv({{"DDPSPAWN_RUN_DIR", "/x"}})).status().message(),
              HasSubstr("is not set"));
  EXPECT_THAT(DetectClusterEnvironment(FakeEnv({{"RANK", "0"},
                                                {"WORLD_SIZE", "1"},
                                                {"MASTER_PORT", "29500"},
                                                {"GROUP_RANK", "0"},
                                                {"LOCAL_RANK", "0"},
                                                {"LOCAL_WORLD_SIZE", "1"},
                                                {"TORCHELASTIC_RESTART_COUNT", "x"}}))
                  .status()
                  .message(),
              HasSubstr("TORCHELASTIC_RESTART_COUNT='x' is not an integer"));
}

TEST(SlurmNodeListTest, FirstHost) {
  EXPECT_EQ(*FirstHostInSlurmNodeList("node1"), "node1");
  EXPECT_EQ(*FirstHostInSlurmNodeList("node1,node2"), "node1");
  EXPECT_EQ(*FirstHostInSlurmNodeList("n[003-005,9],gpu1"), "n003");
  EXPECT_EQ(*FirstHostInSlurmNodeList("n[12]"), "n12");
  EXPECT_FALSE(FirstHostInSlurmNodeList("n[").ok());
  EXPECT_FALSE(FirstHostInSlurmNodeList("").ok());
  EXPECT_FALSE(FirstHostInSlurmNodeList("n[x-y]").ok());
}

// Which process prints for the job: rank 0 for what the ranks print; for main()'s banner, a
// ddpspawn launching process but none of its spawned ranks (which rerun main()), and rank 0 of a
// torchrun job.
TEST(RankZeroTest, EachLauncherPrintsOnce) {
  const std::map<std::string, std::string> spawned = {{"DDPSPAWN_RUN_DIR", "/tmp/x"},
                                                      {"MASTER_PORT", "1"},
                                                      {"WORLD_SIZE", "2"},
                                                      {"LOCAL_RANK", "0"},
                                                      {"LOCAL_WORLD_SIZE", "2"},
                                                      {"GROUP_RANK", "0"}};
  const std::map<std::string, std::string> torchrun = {{"TORCHELASTIC_RUN_ID", "abc"},
                                                       {"MASTER_ADDR", "host0"},
                                                       {"MASTER_PORT", "29400"},
                                                       {"WORLD_SIZE", "2"},
                                                       {"GROUP_RANK", "0"},
                                                       {"LOCAL_WORLD_SIZE", "2"}};
  for (const auto& [vars, name] :
       {std::pair(spawned, "spawned"), std::pair(torchrun, "torchrun")}) {
    for (int rank = 0; rank < 2; ++rank) {
      std::map<std::string, std::string> env = vars;
      env["RANK"] = env["LOCAL_RANK"] = std::to_string(rank);
      SCOPED_TRACE(absl::StrCat(name, " rank ", rank));
      EXPECT_EQ(IsRankZero(FakeEnv(env)), rank == 0);
      EXPECT_EQ(IsFirstProcessOfJob(FakeEnv(env)), rank == 0 && vars == torchrun);
    }
  }
  EXPECT_TRUE(IsRankZero(FakeEnv({})));  // a launching or single process
  EXPECT_TRUE(IsFirstProcessOfJob(FakeEnv({})));
  // A rank that cannot be read: printing, rather than hiding by a guess.
  EXPECT_TRUE(IsRankZero(FakeEnv({{"WORLD_SIZE", "2"}, {"RANK", "one"}})));
}

}  // namespace
}  // namespace ddpspawn
