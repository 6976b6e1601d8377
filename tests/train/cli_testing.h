// Helpers for tests that run the ddpspawn CLI (tools/ddpspawn) as a user would: run it and read its
// key=value result, write a small classification CSV, load a checkpoint's weights into the built-in
// MLP.
#ifndef DDPSPAWN_TESTS_TRAIN_CLI_TESTING_H_
#define DDPSPAWN_TESTS_TRAIN_CLI_TESTING_H_

#include <map>
#include <string>

#include "core/model/module.h"

namespace ddpspawn {

struct CliRun {
  int exit_code;
  std::string output;                         // stdout and stderr together
  std::map<std::string, std::string> values;  // key=value lines
  // A value read as a number; missing or not a number is a test failure (and NaN).
  double Number(const std::string& key) const;
};

// `tools/ddpspawn ARGS --progress false` (export: without the flag), waited for; `env` ("NAME=value
// ...") is set for it.
CliRun Cli(const std::string& args, const std::string& env = "");

// <TempDir>/<name>.
std::string Dir(const std::string& name);

// A learnable 3-class problem in <TempDir>/<name>: the class is which of the first three of four
// features is largest.
std::string WriteClassification(const std::string& name, int rows);

// The built-in model that fits WriteClassification's data.
inline constexpr char kModel[] = "mlp:4,16,3";

// Runs `fit ARGS --default-root-dir <TempDir>/<name>` and exports its checkpoint to
// <TempDir>/<name>.safetensors, whose path it returns (either failing is a test failure).
std::string ExportedWeights(const std::string& args, const std::string& name);

// A kModel checkpoint's weights (a failed load is a test failure).
NamedTensors LoadWeights(const std::string& checkpoint);

// Runs `script` (saved as <TempDir>/<name>.py) with tools/setup's Python (tests/testing/venv.h:
// torch 2.11, numpy, safetensors); its key=value lines. A failing script is a test failure that
// shows its output.
std::map<std::string, std::string> RunPython(const std::string& name, const std::string& script);

// values[key] as a number (a missing or bad one is a test failure, and -1).
double NumberOf(const std::map<std::string, std::string>& values, const std::string& key);

}  // namespace ddpspawn

#endif  // DDPSPAWN_TESTS_TRAIN_CLI_TESTING_H_
