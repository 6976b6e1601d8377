// The Python of tools/setup's virtual environment, which has torch 2.11 and numpy: what the tests
// script modules and check results with. $DDPSPAWN_VENV names it (the default /opt/ddpspawn/venv),
// as for tools/setup and the build; .bazelrc passes it to the tests.
#ifndef DDPSPAWN_TESTS_TESTING_VENV_H_
#define DDPSPAWN_TESTS_TESTING_VENV_H_

#include <cstdlib>
#include <string>

namespace ddpspawn::testing_support {

inline std::string VenvPython() {
  const char* venv = std::getenv("DDPSPAWN_VENV");
  return std::string(venv != nullptr && venv[0] != '\0' ? venv : "/opt/ddpspawn/venv") +
         "/bin/python3";
}

}  // namespace ddpspawn::testing_support

#endif  // DDPSPAWN_TESTS_TESTING_VENV_H_
