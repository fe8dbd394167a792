// dtensor-ckpt: a sharded checkpoint's contents, and the whole of it as one
// safetensors file, on one process (docs/checkpoints.md).
//
//   dtensor-ckpt info DIR [--json]
//   dtensor-ckpt consolidate DIR OUT.safetensors
//
// Exit status: 0 done; 1 the checkpoint cannot be read (no index, a corrupt
// or truncated file: the message names it); 2 bad usage.
#include <CLI/CLI.hpp>
#include <iostream>

#include "dtensor/checkpoint/checkpoint.h"
#include "tools/dtensor-ckpt/listing.h"

int main(int argc, char** argv) {
  CLI::App app{"Inspect and consolidate libdtensor sharded checkpoints", "dtensor-ckpt"};
  app.require_subcommand(1);
  std::string dir, out;
  bool as_json = false;
  auto* info = app.add_subcommand("info", "List every tensor: name, shape, dtype, placements");
  info->add_option("DIR", dir, "Checkpoint directory")->required();
  info->add_flag("--json", as_json, "One JSON document instead of one line per tensor");
  auto* consolidate =
      app.add_subcommand("consolidate", "Write every tensor whole into one safetensors file");
  consolidate->add_option("DIR", dir, "Checkpoint directory")->required();
  consolidate->add_option("OUT", out, "Output file (.safetensors)")->required();
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return 2;
  }
  try {
    if (info->parsed()) {
      const auto entries = dtensor::read_checkpoint_index(dir);
      std::cout << (as_json ? dtensor::ckpt_cli::listing_json(dir, entries)
                            : dtensor::ckpt_cli::listing_text(entries));
    } else {
      dtensor::consolidate_checkpoint(dir, out);
      std::cout << "dtensor-ckpt: wrote " << out << "\n";
    }
  } catch (const std::exception& e) {
    std::cerr << "dtensor-ckpt: " << e.what() << std::endl;
    return 1;
  }
  return 0;
}
