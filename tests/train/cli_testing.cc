// CLI test helpers (see cli_testing.h).
#include "tests/train/cli_testing.h"

#include <ATen/ATen.h>
#include <sys/wait.h>

#include <cstdlib>
#include <fstream>
#include <limits>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/model/checkpoint.h"
#include "core/train/models/mlp_module.h"
#include "core/util/files.h"
#include "gtest/gtest.h"
#include "tests/testing/venv.h"

namespace ddpspawn {

double CliRun::Number(const std::string& key) const {
  double v = 0;
  auto it = values.find(key);
  if (it == values.end() || !absl::SimpleAtod(it->second, &v)) {
    ADD_FAILURE() << "no number " << key << "= in the output:\n" << output;
    return std::numeric_limits<double>::quiet_NaN();  // fails every comparison too
  }
  return v;
}

CliRun Cli(const std::string& args, const std::string& env) {
  static int counter = 0;
  const std::string out = absl::StrCat(testing::TempDir(), "/cli-", ++counter, ".txt");
  const bool trains = !absl::StartsWith(args, "export");  // export has no progress
  const std::string command = absl::StrCat(env, env.empty() ? "" : " ", "tools/ddpspawn ", args,
                                           trains ? " --progress false" : "", " > ", out, " 2>&1");
  const int status = std::system(command.c_str());
  CliRun run{WIFEXITED(status) ? WEXITSTATUS(status) : -1, ReadWholeFile(out).value_or(""), {}};
  for (absl::string_view line : absl::StrSplit(run.output, '\n')) {
    size_t eq = line.find('=');
    if (eq != absl::string_view::npos && !absl::StrContains(line, ' ')) {
      run.values[std::string(line.substr(0, eq))] = std::string(line.substr(eq + 1));
    }
  }
  return run;
}

std::string Dir(const std::string& name) { return absl::StrCat(testing::TempDir(), "/", name); }

std::string ExportedWeights(const std::string& args, const std::string& name) {
  CliRun fit = Cli(absl::StrCat(args, " --default-root-dir ", Dir(name)));
  EXPECT_EQ(fit.exit_code, 0) << fit.output;
  std::string weights = Dir(name + ".safetensors");
  CliRun exported = Cli(absl::StrCat("export --checkpoint ", fit.values["checkpoint"],
                                     " --format safetensors --output ", weights));
  EXPECT_EQ(exported.exit_code, 0) << exported.output;
  return weights;
}

std::string WriteClassification(const std::string& name, int rows) {
  std::string path = Dir(name);
  std::ofstream out(path);
  at::manual_seed(rows);
  at::Tensor x = at::rand({rows, 4});
  at::Tensor y = x.narrow(1, 0, 3).argmax(1);
  for (int i = 0; i < rows; ++i) {
    for (int j = 0; j < 4; ++j) out << x[i][j].item<float>() << ",";
    out << y[i].item<int64_t>() << "\n";
  }
  return path;
}

NamedTensors LoadWeights(const std::string& checkpoint) {
  std::shared_ptr<LightningModule> module = *MakeMlpModule(kModel, true, {});
  absl::StatusOr<std::string> bytes = ReadWholeFile(checkpoint);
  EXPECT_TRUE(bytes.ok()) << checkpoint;
  absl::Status restored = RestoreCheckpoint(bytes.value_or(""), *module, nullptr, nullptr);
  EXPECT_TRUE(restored.ok()) << restored;
  return module->named_state();
}

std::map<std::string, std::string> RunPython(const std::string& name, const std::string& script) {
  const std::string path = Dir(name + ".py"), out = Dir(name + ".txt");
  std::ofstream(path) << script;
  const int status = std::system(
      absl::StrCat(testing_support::VenvPython(), " ", path, " > ", out, " 2>&1").c_str());
  const std::string text = ReadWholeFile(out).value_or("");
  EXPECT_EQ(status, 0) << text;
  std::map<std::string, std::string> values;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    const size_t eq = line.find('=');
    if (eq != absl::string_view::npos) {
      values[std::string(line.substr(0, eq))] = std::string(line.substr(eq + 1));
    }
  }
  return values;
}

double NumberOf(const std::map<std::string, std::string>& values, const std::string& key) {
  double v = -1;
  const auto found = values.find(key);
  EXPECT_TRUE(found != values.end() && absl::SimpleAtod(found->second, &v)) << key;
  return v;
}

}  // namespace ddpspawn
