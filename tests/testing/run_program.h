// A test's helper program, run as a user runs it: its output (stdout and stderr together), whether
// it exited 0, and the result it printed last ("result: ..."), for the suites that drive a program
// mode by mode (tests/strategy/own_loop_test, tests/fabric/fabric_test).
#ifndef DDPSPAWN_TESTS_TESTING_RUN_PROGRAM_H_
#define DDPSPAWN_TESTS_TESTING_RUN_PROGRAM_H_

#include <stdio.h>
#include <sys/wait.h>

#include <memory>
#include <string>
#include <utility>

#include "gtest/gtest.h"

namespace ddpspawn::testing {

// `command`'s output (through the shell, stderr into stdout) and whether it exited 0.
inline std::pair<std::string, bool> RunProgram(const std::string& command) {
  const std::string with_stderr = command + " 2>&1";
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(with_stderr.c_str(), "r"), pclose);
  std::string output;
  char chunk[4096];
  size_t n;
  while ((n = fread(chunk, 1, sizeof(chunk), pipe.get())) > 0) output.append(chunk, n);
  const int status = pclose(pipe.release());
  return {output, WIFEXITED(status) && WEXITSTATUS(status) == 0};
}

// What `command` printed after its last "result: " (to the end), or its whole output when there is
// none; fails the test when the program failed.
inline std::string ProgramResult(const std::string& command) {
  auto [output, ok] = RunProgram(command);
  EXPECT_TRUE(ok) << output;
  const size_t at = output.rfind("result: ");
  return at == std::string::npos ? output : output.substr(at + 8);
}

}  // namespace ddpspawn::testing

#endif  // DDPSPAWN_TESTS_TESTING_RUN_PROGRAM_H_
