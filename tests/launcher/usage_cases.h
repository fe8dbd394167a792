// Command lines dtensor-run must refuse, shared by the parser's unit tests and
// the end-to-end tests (which also check that nothing was started).
#pragma once

#include <string>
#include <vector>

namespace dtensor::run::testing {

struct UsageCase {
  std::vector<std::string> args;  // "PROG" stands for a program that exists
  std::string names;              // the message must contain this
};

inline const std::vector<UsageCase>& usage_cases() {
  static const std::vector<UsageCase> cases = {
      {{}, "-n"},
      {{"PROG"}, "-n"},
      {{"-n"}, "-n"},
      {{"-n", "0", "PROG"}, "-n"},
      {{"-n", "-1", "PROG"}, "-n"},
      {{"-n", "abc", "PROG"}, "-n"},
      {{"-n", "4x", "PROG"}, "-n"},
      {{"-n", "99999999999", "PROG"}, "-n"},
      {{"-n0", "PROG"}, "-n"},
      {{"--nproc-per-node=", "PROG"}, "--nproc-per-node"},
      {{"-n", "2"}, "PROGRAM"},
      {{"-n", "2", "--"}, "PROGRAM"},
      {{"-n", "2", "--bogus", "PROG"}, "--bogus"},
      {{"-x", "-n", "2", "PROG"}, "-x"},
      {{"-n", "2", "--store"}, "--store"},
      {{"-n", "2", "--store", "ftp://host/x", "PROG"}, "--store"},
      {{"-n", "2", "--store", "/plain/path", "PROG"}, "--store"},
      {{"-n", "2", "--store", "file:", "PROG"}, "--store"},
      {{"-n", "2", "--store", "redis://host", "PROG"}, "--store"},
      {{"-n", "2", "--store", "redis://host:99999", "PROG"}, "--store"},
      {{"-n", "2", "--store=redis://:6379", "PROG"}, "--store"},
      {{"-n", "2", "--timeout", "0", "PROG"}, "--timeout"},
      {{"-n", "2", "--timeout", "soon", "PROG"}, "--timeout"},
      {{"-n", "2", "--timeout=inf", "PROG"}, "--timeout"},
      {{"-n", "2", "--deadline", "-5", "PROG"}, "--deadline"},
      {{"-n", "2", "--nnodes", "0", "PROG"}, "--nnodes"},
      {{"-n", "2", "--nnodes", "two", "PROG"}, "--nnodes"},
      {{"-n", "2", "--node-rank", "-1", "--nnodes", "2", "--store", "redis://h:1", "PROG"},
       "--node-rank"},
      {{"-n", "2", "--nnodes", "2", "--node-rank", "2", "--store", "redis://h:1", "PROG"},
       "--node-rank"},
      {{"-n", "2", "--node-rank", "1", "PROG"}, "--node-rank"},
      // Several nodes need a store all of them reach: the private default is not.
      {{"-n", "2", "--nnodes", "2", "--node-rank", "0", "PROG"}, "--store redis://"},
  };
  return cases;
}

}  // namespace dtensor::run::testing
