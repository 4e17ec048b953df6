#include "train/scripted_model.h"

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <map>

#include "core/error.h"

namespace hpct::train {
namespace {

// The first line of a libtorch error, without its C++ stack.
std::string first_line(const std::exception& e) {
  const auto* c = dynamic_cast<const c10::Error*>(&e);
  std::string s = c ? c->what_without_backtrace() : e.what();
  s = s.substr(0, s.find('\n'));
  // torch 2.x's reader appends a paragraph of guesses to its own first sentence.
  const auto guess = s.find(". This is an internal miniz error.");
  return guess == std::string::npos ? s : s.substr(0, guess);
}

// "a.b.c" -> ("a.b", "c"); "c" -> ("", "c").
std::pair<std::string, std::string> split_last(const std::string& name) {
  auto dot = name.rfind('.');
  if (dot == std::string::npos) return {"", name};
  return {name.substr(0, dot), name.substr(dot + 1)};
}

}  // namespace

ScriptedModel::ScriptedModel(const std::string& path) : path_(path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    throw_io("open TorchScript model " + path, std::filesystem::exists(path, ec) ? EISDIR : ENOENT);
  }
  try {
    script_ = torch::jit::load(path);
  } catch (const std::exception& e) {
    throw_invalid_argument(path + ": not a TorchScript archive (write it with torch.jit.script(m).save(), " +
                           "not torch.save): " + first_line(e));
  }
  if (!script_.find_method("forward")) throw_invalid_argument(path + ": the TorchScript module has no forward()");

  // The mirror tree: one plain Module per script submodule, children
  // registered under their attribute names, so named_parameters() and
  // checkpoint keys read as in Python.
  std::map<std::string, std::shared_ptr<torch::nn::Module>> mirror;
  std::map<std::string, torch::jit::Module> owners{{"", script_}};  // "": the root
  for (const auto& sub : script_.named_modules()) {
    owners.emplace(sub.name, sub.value);
    if (sub.name.empty()) continue;
    auto [parent, leaf] = split_last(sub.name);
    auto node = std::make_shared<torch::nn::Module>("ScriptedSubmodule");
    torch::nn::Module& up = parent.empty() ? static_cast<torch::nn::Module&>(*this) : *mirror.at(parent);
    up.register_module(leaf, node);
    mirror.emplace(sub.name, node);
  }
  auto node_of = [&](const std::string& module_name) -> torch::nn::Module& {
    return module_name.empty() ? *this : *mirror.at(module_name);
  };
  std::int64_t trainable = 0;
  for (const auto& p : script_.named_parameters(/*recurse=*/true)) {
    auto [owner, leaf] = split_last(p.name);
    node_of(owner).register_parameter(leaf, p.value, p.value.requires_grad());
    if (p.value.requires_grad()) trainable += p.value.numel();
  }
  for (const auto& b : script_.named_buffers(/*recurse=*/true)) {
    auto [owner, leaf] = split_last(b.name);
    auto& registered = node_of(owner).register_buffer(leaf, b.value);
    buffers_.push_back({owners.at(owner), leaf, registered});
  }
  if (trainable == 0) {
    throw_invalid_argument(path + ": the TorchScript module has no trainable parameters (none with " +
                           "requires_grad); nothing to train");
  }
  train(true);
}

torch::Tensor ScriptedModel::forward(torch::Tensor x) {
  c10::IValue out = script_.forward({std::move(x)});
  rebind_buffers();
  if (!out.isTensor()) {
    throw_invalid_argument(path_ + ": forward() returned " + out.tagKind() +
                           ", not one tensor of logits [N, classes]");
  }
  return out.toTensor();
}

void ScriptedModel::train(bool on) {
  torch::nn::Module::train(on);
  script_.train(on);
}

void ScriptedModel::save_script(const std::string& path) {
  bool was_training = is_training();
  train(false);
  try {
    script_.save(path);
  } catch (const std::exception& e) {
    train(was_training);
    throw_io("save TorchScript model " + path + " (" + first_line(e) + ")", errno ? errno : EIO);
  }
  train(was_training);
}

void ScriptedModel::rebind_buffers() {
  for (auto& slot : buffers_) {
    torch::Tensor now = slot.owner.attr(slot.attr).toTensor();
    if (now.is_same(slot.registered)) continue;
    torch::NoGradGuard no_grad;
    slot.registered.set_(now);  // same TensorImpl as before, the script's new storage
    slot.owner.setattr(slot.attr, slot.registered);
  }
}

std::shared_ptr<Model> open_model(const std::string& spec, int in_channels) {
  auto names = model_names();
  if (std::find(names.begin(), names.end(), spec) != names.end()) return make_model(spec, in_channels);
  std::error_code ec;
  if (!std::filesystem::exists(spec, ec)) {
    throw_invalid_argument("--model " + spec + ": neither a built-in model (mlp, cnn, resnet20, mlp50m, mlp200m) nor an " +
                           "existing TorchScript file");
  }
  return std::make_shared<ScriptedModel>(spec);
}

}  // namespace hpct::train
