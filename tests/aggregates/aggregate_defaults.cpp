// Designated initialisers as users write them: only the members they care
// about. Each line would warn (-Wmissing-field-initializers) if a member it
// leaves out had no default member initialiser. Never run, only compiled.
#include <dtensor/core/store_url.h>
#include <dtensor/dtensor.h>

namespace dtensor::aggregates {

void uses(const DTensorSpec& spec, const DTensor& d, const Tensor& t) {
  [[maybe_unused]] const PoolParams pool{.kernel = {2}, .stride = {2}};
  [[maybe_unused]] const ConvParams conv{.stride = {2}};
  [[maybe_unused]] const ConvTransposeParams convt{.stride = {2}};
  [[maybe_unused]] const UpsampleParams up{.scale_factor = {2.0}};
  [[maybe_unused]] const nn::ConvOptions conv_options{.padding = {1}};
  [[maybe_unused]] const nn::ConvTransposeOptions convt_options{.stride = {2}};
  [[maybe_unused]] const nn::SGDOptions sgd{.lr = 0.1};
  [[maybe_unused]] const nn::AdamOptions adam{.lr = 0.1};
  [[maybe_unused]] const nn::AdamWOptions adamw{.lr = 0.1};
  [[maybe_unused]] const nn::RMSpropOptions rmsprop{.lr = 0.1};
  [[maybe_unused]] const nn::ParamGroup group{.lr = 0.1};
  [[maybe_unused]] const nn::ParamGroupSettings group_settings{.lr = 0.1};
  [[maybe_unused]] const nn::OneCycleLROptions one_cycle{.pct_start = 0.25};
  [[maybe_unused]] const nn::ShardingPlan plan{};
  [[maybe_unused]] const InitOptions init{.backend = "gloo"};
  [[maybe_unused]] const Config config{.log_level = "info"};
  [[maybe_unused]] const EnvInt env_int{.value = 1};
  [[maybe_unused]] const StoreUrl url{.path = "/tmp"};
  [[maybe_unused]] const CheckpointTarget target{.name = "w", .spec = spec};
  [[maybe_unused]] const CheckpointShard shard{.file = "f"};
  [[maybe_unused]] const CheckpointEntry entry{.name = "w"};
  [[maybe_unused]] const OpDef op{.name = "my_op"};
  [[maybe_unused]] const TensorMeta meta{.shape = {2}};
  [[maybe_unused]] const ShardingSignature signature{.inputs = {Replicate()}};
  [[maybe_unused]] const ShardingStrategy strategy{.inputs = {{Replicate()}}};
  [[maybe_unused]] const OutputSharding sharding{.input_specs = {spec}};
  [[maybe_unused]] const P2POp p2p{.tensor = t};
  [[maybe_unused]] const ConvGrads conv_grads{.grad_input = d};
  [[maybe_unused]] const NormGrads norm_grads{.grad_input = d};
  [[maybe_unused]] const BatchNormResult bn{.output = d};
  [[maybe_unused]] const ConvWeightGrads weight_grads{.grad_weight = t};
  [[maybe_unused]] const TiledTensor::Tile tile{.data = t};
  [[maybe_unused]] const RedistributeStep step{.from = Shard(0), .to = Replicate()};
}

}  // namespace dtensor::aggregates
