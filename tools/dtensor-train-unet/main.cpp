// dtensor-train-unet: trains the U-Net of unet.h on one batch (x.npy,
// y.npy), spatially parallel over a mesh, with autograd, an optimiser (and
// optionally parameter groups, a learning-rate schedule and gradient
// clipping) and sharded checkpoints. docs/training.md describes the
// interface.
//
// Exit codes: 0 done; 2 bad arguments or inputs (every rank finds them
// before communicating, or the library raises the same InvalidArgument on
// every rank); 3 any other error.
#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <new>
#include <optional>

#include "dtensor/checkpoint/checkpoint.h"
#include "dtensor/checkpoint/safetensors.h"
#include "dtensor/cuda.h"
#include "dtensor/dtensor.h"
#include "tools/dtensor-train-unet/unet.h"

namespace dtensor::train {
namespace {

struct Options {
  std::string mesh;
  std::string placements;
  std::string data;
  std::string init;
  std::optional<std::int64_t> base, groups;
  std::uint64_t seed = 0;
  std::int64_t steps = 0;
  std::string optimizer;
  double lr = 0;
  double momentum = 0;
  std::optional<double> weight_decay;
  bool amsgrad = false;
  bool no_decay_norm_bias = false;
  std::string scheduler = "none";
  std::optional<std::int64_t> step_size, t_max, total_iters;
  std::optional<double> gamma, eta_min, start_factor, end_factor;
  std::optional<double> clip_grad_norm;
  std::string autocast = "none";
  std::string dtype = "f32";
  std::string device = "cpu";
  std::string save, resume;
  bool json = false;
};

Shape parse_mesh(const std::string& text, int world) {
  if (text.empty()) return {world};
  Shape mesh;
  std::stringstream s(text);
  std::string d;
  while (std::getline(s, d, 'x')) {
    std::size_t used = 0;
    std::int64_t v = 0;
    try {
      v = std::stoll(d, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    check_arg(used == d.size() && v >= 1, "--mesh", "'{}' is not a mesh shape like 4 or 2x2", text);
    mesh.push_back(v);
  }
  check_arg(shape_numel(mesh) == world, "--mesh", "{} has {} ranks but the world has {}", text,
            shape_numel(mesh), world);
  return mesh;
}

Placements default_placements(std::size_t mesh_dims) {
  // H, then W: the spatial dims of [N, C, H, W].
  Placements p;
  for (std::size_t m = 0; m < mesh_dims; ++m)
    p.push_back(m < 2 ? Shard(2 + static_cast<std::int64_t>(m)) : Replicate());
  return p;
}

void print_losses(const std::vector<double>& losses, std::int64_t steps,
                  const std::vector<double>& lrs) {
  // 17 significant digits: the doubles round-trip.
  const auto list = [](const std::vector<double>& v) {
    std::string text;
    for (std::size_t i = 0; i < v.size(); ++i)
      text += fmt::format("{}{:.17g}", i ? ", " : "", v[i]);
    return text;
  };
  std::cout << fmt::format("{{\"losses\": [{}], \"steps\": {}, \"lrs\": [{}]}}", list(losses),
                           steps, list(lrs))
            << std::endl;
}

// The parameter groups: one, or with --no-decay-norm-bias a second one of
// every norm weight and every bias (whose decay would pull a normalisation's
// scale or an offset to zero for nothing), with weight decay 0.
std::vector<nn::ParamGroup> param_groups(const nn::NamedParameters& params, bool split) {
  if (!split) return {{.params = params}};
  nn::ParamGroup decay, no_decay{.weight_decay = 0.0};
  for (const auto& e : params) {
    const std::string& name = e.first;
    const bool bias = name.size() >= 5 && name.compare(name.size() - 5, 5, ".bias") == 0;
    const bool norm = name.find(".norm") != std::string::npos;
    (bias || norm ? no_decay : decay).params.push_back(e);
  }
  return {decay, no_decay};
}

std::unique_ptr<nn::Optimizer> make_optimizer(const Options& o,
                                              std::vector<nn::ParamGroup> groups) {
  if (o.optimizer == "sgd") {
    nn::SGDOptions so;
    so.lr = o.lr;
    so.momentum = o.momentum;
    so.weight_decay = o.weight_decay.value_or(0);
    return std::make_unique<nn::SGD>(std::move(groups), so);
  }
  if (o.optimizer == "rmsprop") {
    nn::RMSpropOptions ro;  // alpha 0.99, eps 1e-8: torch's defaults
    ro.lr = o.lr;
    ro.momentum = o.momentum;
    ro.weight_decay = o.weight_decay.value_or(0);
    return std::make_unique<nn::RMSprop>(std::move(groups), ro);
  }
  if (o.optimizer == "adamw") {
    nn::AdamWOptions wo;  // weight decay 1e-2 unless given
    wo.lr = o.lr;
    wo.weight_decay = o.weight_decay.value_or(wo.weight_decay);
    wo.amsgrad = o.amsgrad;
    return std::make_unique<nn::AdamW>(std::move(groups), wo);
  }
  nn::AdamOptions ao;
  ao.lr = o.lr;
  ao.weight_decay = o.weight_decay.value_or(0);
  ao.amsgrad = o.amsgrad;
  return std::make_unique<nn::Adam>(std::move(groups), ao);
}

// torch's defaults where an option is not given (StepLR gamma 0.1; LinearLR
// 1/3 to 1 over 5; cosine down to 0).
std::unique_ptr<nn::LRScheduler> make_scheduler(const Options& o, nn::Optimizer& opt) {
  if (o.scheduler == "step")
    return std::make_unique<nn::StepLR>(opt, *o.step_size, o.gamma.value_or(0.1));
  if (o.scheduler == "cosine")
    return std::make_unique<nn::CosineAnnealingLR>(opt, *o.t_max, o.eta_min.value_or(0));
  if (o.scheduler == "linear")
    return std::make_unique<nn::LinearLR>(opt, o.start_factor.value_or(1.0 / 3),
                                          o.end_factor.value_or(1.0), o.total_iters.value_or(5));
  return nullptr;
}

int run(const Options& o) {
  const DType dtype = o.dtype == "f64" ? DType::F64 : DType::F32;
  // Inputs are read before the process group starts: a bad file is exit 2
  // on every rank, without waiting for anyone.
  Tensor X = data::read_npy(o.data + "/x.npy").to(dtype);
  Tensor Y = data::read_npy(o.data + "/y.npy").to(dtype);
  check_arg(X.dim() == 4 && Y.dim() == 4 && X.shape()[0] == Y.shape()[0] &&
                X.shape()[2] == Y.shape()[2] && X.shape()[3] == Y.shape()[3],
            "--data", "x.npy {} and y.npy {} must be [N, C, H, W] with equal N, H and W",
            shape_str(X.shape()), shape_str(Y.shape()));
  // An empty batch trains nothing: its mean loss is 0/0, printed as NaN.
  for (const auto& [file, t] : {std::pair{"x.npy", &X}, std::pair{"y.npy", &Y}})
    check_arg(t->numel() > 0, "--data", "{}/{}: shape {} is empty (N, C, H and W must be >= 1)",
              o.data, file, shape_str(t->shape()));
  check_arg(X.shape()[2] % 2 == 0 && X.shape()[3] % 2 == 0, "--data",
            "H and W must be even (the U-Net pools by 2 and upsamples by 2), got {}",
            shape_str(X.shape()));
  UNetShape shape;
  shape.in_ch = X.shape()[1];
  shape.out_ch = Y.shape()[1];
  std::map<std::string, Tensor> init;
  if (!o.init.empty()) {
    try {
      init = read_safetensors(o.init);  // the library's reader (dtensor/checkpoint/safetensors.h)
    } catch (const Error& e) {
      // Exit 2 naming the option, a corrupt file as much as a missing one.
      throw InvalidArgument("--init", e.what());
    }
    check_arg(init.count("enc1.conv1.weight") == 1, "--init",
              "{}: no enc1.conv1.weight (the U-Net's parameter names are in docs/training.md)",
              o.init);
    shape.base = init.at("enc1.conv1.weight").shape().at(0);
  } else if (o.base) {
    shape.base = *o.base;
  }
  check_arg(o.groups.has_value(), "--groups", "is required (GroupNorm's group count)");
  shape.groups = *o.groups;

  // CUDA tensors need a backend that serves them: NCCL unless
  // DTENSOR_BACKEND names one (e.g. cpu:gloo,cuda:gloo for ranks sharing a GPU).
  const DeviceType device = o.device == "cuda" ? DeviceType::CUDA : DeviceType::CPU;
  if (device == DeviceType::CUDA)
    check_arg(cuda::is_available(), "--device", "cuda is not available here ({})",
              cuda::unavailable_reason());
  InitOptions init_options;
  if (device == DeviceType::CUDA && !std::getenv("DTENSOR_BACKEND")) init_options.backend = "nccl";
  init_process_group(init_options);
  const int world = get_world_size();
  const DeviceMesh mesh(device, parse_mesh(o.mesh, world));
  const Placements placements = o.placements.empty()
                                    ? default_placements(static_cast<std::size_t>(mesh.ndim()))
                                    : parse_placements(o.placements, "--placements");
  check_arg(static_cast<std::int64_t>(placements.size()) == mesh.ndim(), "--placements",
            "{} placements for a {}-dim mesh", placements.size(), mesh.ndim());

  if (!o.resume.empty() && o.init.empty() && !o.base) {
    for (const auto& e : read_checkpoint_index(o.resume))
      if (e.name == "enc1.conv1.weight") shape.base = e.shape.at(0);
  }
  nn::manual_seed(o.seed);
  UNet model(shape, dtype);
  model.distribute(mesh);
  if (!init.empty()) {
    nn::NamedDTensors state;
    // Any dtype the reader returns (f32, f64, bf16, f16) becomes the run's:
    // bf16 and f16 values are all f32 values, so only f64 -> f32 rounds.
    for (const auto& [name, t] : init)
      state.emplace_back(
          name, distribute_tensor(t.to(dtype), mesh, Placements(placements.size(), Replicate())));
    model.load_state_dict(state);
  }
  std::unique_ptr<nn::Optimizer> opt =
      make_optimizer(o, param_groups(model.named_parameters(), o.no_decay_norm_bias));
  std::unique_ptr<nn::LRScheduler> scheduler = make_scheduler(o, *opt);
  if (!o.resume.empty()) {
    // Parameters and optimiser state onto this run's mesh (replicated, as the
    // parameters are), whatever wrote them: the fresh optimiser's
    // state_dict() names all the state it needs.
    std::vector<CheckpointTarget> targets;
    for (const auto& [name, p] : model.named_parameters())
      targets.push_back({name, p->spec()});
    for (const auto& t : checkpoint_targets(opt->state_dict()))
      targets.push_back(t);
    const auto loaded = load_checkpoint(o.resume, targets);
    nn::NamedDTensors params, optim;
    for (const auto& [name, t] : loaded)
      (name.rfind("optim.", 0) == 0 ? optim : params).emplace_back(name, t);
    model.load_state_dict(params);
    opt->load_state_dict(optim);
    // The schedule is a function of the steps taken (one scheduler step per
    // optimiser step), so it is replayed rather than saved: the resumed run
    // uses the lrs the unbroken one would.
    if (scheduler)
      for (std::int64_t i = 0; i < opt->steps_taken(); ++i)
        scheduler->step();
  }

  const DTensor x = distribute_tensor(X, mesh, placements);
  const DTensor y = distribute_tensor(Y, mesh, placements);
  std::vector<double> losses, lrs;
  for (std::int64_t step = 0; step < o.steps; ++step) {
    // The forward and the loss under autocast, the backward outside it, as
    // torch.autocast is used: the gradients follow the forward's dtypes.
    const DTensor loss = [&] {
      const AutocastScope autocast(o.autocast == "bf16", DType::BF16);
      return mse_loss(model(x), y);
    }();
    losses.push_back(loss.to_local().to(Device::cpu()).item_flat(0));
    if (!o.json && get_rank() == 0)
      std::cout << fmt::format("step {} loss {:.10g}", opt->steps_taken() + 1, losses.back())
                << std::endl;
    backward(loss);
    if (o.clip_grad_norm) nn::clip_grad_norm_(model.parameters(), *o.clip_grad_norm);
    lrs.push_back(opt->lr());  // every group has the same lr
    opt->step();
    opt->zero_grad();
    if (scheduler) scheduler->step();
  }
  if (!o.save.empty()) {
    nn::NamedDTensors state = model.state_dict();
    for (auto& e : opt->state_dict())
      state.push_back(e);
    save_checkpoint(state, o.save);
  }
  if (o.json && get_rank() == 0) print_losses(losses, o.steps, lrs);
  destroy_process_group();
  return 0;
}

}  // namespace
}  // namespace dtensor::train

int main(int argc, char** argv) {
  using namespace dtensor::train;
  Options o;
  CLI::App app{"Trains a 2-D U-Net, spatially parallel, on one batch (docs/training.md)",
               "dtensor-train-unet"};
  app.add_option("--mesh", o.mesh, "mesh shape, e.g. 4 or 2x2 (default: the world size)");
  app.add_option("--placements", o.placements,
                 "data placements, one per mesh dim (default S2 on 1-D meshes, S2,S3 on 2-D)");
  app.add_option("--data", o.data, "directory with x.npy [N, in_ch, H, W] and y.npy")->required();
  auto* init = app.add_option("--init", o.init, "every parameter, by name (safetensors)");
  auto* base = app.add_option("--base", o.base, "channels of the first level");
  app.add_option("--groups", o.groups, "GroupNorm's number of groups");
  auto* seed = app.add_option("--seed", o.seed, "seed of the initialisation (with --base)");
  app.add_option("--steps", o.steps, "optimiser steps")->required()->check(CLI::NonNegativeNumber);
  app.add_option("--optimizer", o.optimizer, "sgd, adam, adamw or rmsprop")
      ->required()
      ->check(CLI::IsMember({"sgd", "adam", "adamw", "rmsprop"}));
  app.add_option("--lr", o.lr, "learning rate")->required()->check(CLI::NonNegativeNumber);
  app.add_option("--momentum", o.momentum, "SGD's or RMSprop's momentum")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--weight-decay", o.weight_decay,
                 "weight decay (default 0; adamw: 1e-2, decoupled)")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--amsgrad", o.amsgrad, "Adam's / AdamW's amsgrad variant");
  app.add_flag("--no-decay-norm-bias", o.no_decay_norm_bias,
               "a second parameter group: every norm weight and bias, weight decay 0");
  app.add_option("--scheduler", o.scheduler,
                 "none, step, cosine or linear (stepped after each step)")
      ->check(CLI::IsMember({"none", "step", "cosine", "linear"}));
  app.add_option("--step-size", o.step_size, "StepLR: decay every N steps (required with step)")
      ->check(CLI::PositiveNumber);
  app.add_option("--gamma", o.gamma, "StepLR: the decay factor (default 0.1)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--t-max", o.t_max, "CosineAnnealingLR: the half period (required with cosine)")
      ->check(CLI::PositiveNumber);
  app.add_option("--eta-min", o.eta_min, "CosineAnnealingLR: the lowest lr (default 0)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--start-factor", o.start_factor, "LinearLR: the first factor (default 1/3)");
  app.add_option("--end-factor", o.end_factor, "LinearLR: the last factor (default 1)");
  app.add_option("--total-iters", o.total_iters, "LinearLR: steps to the last factor (default 5)")
      ->check(CLI::PositiveNumber);
  app.add_option("--clip-grad-norm", o.clip_grad_norm,
                 "clip the gradients' total 2-norm to X before each step")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--autocast", o.autocast,
                 "bf16: convolutions in bf16, norms and the loss in f32 (torch.autocast); with "
                 "--dtype f64 nothing is lowered, as in torch")
      ->check(CLI::IsMember({"none", "bf16"}));
  app.add_option("--dtype", o.dtype, "f32 or f64")->check(CLI::IsMember({"f32", "f64"}));
  app.add_option("--device", o.device, "cpu or cuda (one GPU per rank: the rank's local one)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--save", o.save, "write the sharded checkpoint here after the last step");
  app.add_option("--resume", o.resume, "continue from such a checkpoint");
  app.add_flag("--json", o.json,
               "last line of rank 0's stdout: {\"losses\": [...], \"steps\": N, \"lrs\": [...]}");
  init->excludes(base);
  base->excludes(init);
  seed->needs(base);
  try {
    app.parse(argc, argv);
    if (o.init.empty() && !o.base && o.resume.empty())
      throw CLI::ValidationError("--init", "give --init FILE or --base B (or --resume DIR)");
    if (o.base && *o.base < 1) throw CLI::ValidationError("--base", "must be at least 1");
    // An option the chosen optimiser or scheduler does not read would be
    // ignored, running something else than the user asked for.
    if ((o.optimizer == "adam" || o.optimizer == "adamw") && app.count("--momentum") > 0)
      throw CLI::ValidationError(
          "--momentum",
          fmt::format("is SGD's and RMSprop's; --optimizer {} takes none", o.optimizer));
    if (o.amsgrad && o.optimizer != "adam" && o.optimizer != "adamw")
      throw CLI::ValidationError(
          "--amsgrad", fmt::format("is Adam's and AdamW's; --optimizer {} has none", o.optimizer));
    const std::pair<const char*, const char*> scheduler_options[] = {
        {"--step-size", "step"},    {"--gamma", "step"},          {"--t-max", "cosine"},
        {"--eta-min", "cosine"},    {"--start-factor", "linear"}, {"--end-factor", "linear"},
        {"--total-iters", "linear"}};
    for (const auto& [option, scheduler] : scheduler_options)
      if (app.count(option) > 0 && o.scheduler != scheduler)
        throw CLI::ValidationError(option, fmt::format("needs --scheduler {}", scheduler));
    if (o.scheduler == "step" && !o.step_size)
      throw CLI::ValidationError("--step-size", "is required with --scheduler step");
    if (o.scheduler == "cosine" && !o.t_max)
      throw CLI::ValidationError("--t-max", "is required with --scheduler cosine");
    if (o.start_factor && !(*o.start_factor > 0 && *o.start_factor <= 1))
      throw CLI::ValidationError("--start-factor", "must be in (0, 1]");
    if (o.end_factor && !(*o.end_factor >= 0 && *o.end_factor <= 1))
      throw CLI::ValidationError("--end-factor", "must be in [0, 1]");
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    return run(o);
  } catch (const dtensor::InvalidArgument& e) {
    std::cerr << "dtensor-train-unet: " << e.what() << std::endl;
    return 2;
  } catch (const std::bad_alloc&) {
    // The file sizes are checked as they are read, so what remains is the
    // user's: a batch or a model that this machine cannot hold.
    std::cerr << fmt::format(
                     "dtensor-train-unet: out of memory: the batch of --data {} and the "
                     "model ({}) need more memory than this process can get",
                     o.data,
                     o.base           ? fmt::format("--base {}", *o.base)
                     : o.init.empty() ? fmt::format("--resume {}", o.resume)
                                      : fmt::format("--init {}", o.init))
              << std::endl;
    std::fflush(nullptr);
    std::_Exit(2);  // as below: peers may be stuck
  } catch (const std::exception& e) {
    std::cerr << "dtensor-train-unet: " << e.what() << std::endl;
    std::fflush(nullptr);
    std::_Exit(3);  // peers may be stuck; do not wait for them at exit
  }
}
