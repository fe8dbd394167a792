#include "testing/registration.h"

#include <catch2/catch.hpp>
#include <deque>
#include <map>

namespace dtensor::testing {
namespace {

std::map<std::string, std::function<void()>>& bodies() {
  static std::map<std::string, std::function<void()>> b;
  return b;
}
// Catch2 keeps StringRefs to the names: they must never move.
std::deque<std::string>& strings() {
  static std::deque<std::string> s;
  return s;
}

// Every registered case runs this; it looks up the body by the running test's name.
void dispatch() {
  bodies().at(Catch::getResultCapture().getCurrentTestName())();
}

}  // namespace

void register_test(const std::string& name, const std::string& tags, std::function<void()> body) {
  if (!bodies().emplace(name, std::move(body)).second)
    throw std::logic_error("duplicate test name: " + name);
  const std::string& n = strings().emplace_back(name);
  const std::string& t = strings().emplace_back(tags);
  Catch::AutoReg reg(Catch::makeTestInvoker(&dispatch), Catch::SourceLineInfo(__FILE__, __LINE__),
                     Catch::StringRef(),
                     Catch::NameAndTags{Catch::StringRef(n), Catch::StringRef(t)});
  (void)reg;
}

}  // namespace dtensor::testing
